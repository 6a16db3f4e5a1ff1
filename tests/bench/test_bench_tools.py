"""The benchmark tools that need no GPU: the prefill A/B driver (bench/ab_prefill.py) and the
reader of CUTLASS's example (bench/cutlass_peer.py), against stand-ins for the programs they run,
the process runner (bench/processes.py), the order statistics of the side-by-side benchmarks and
their summary over processes (bench/timing_stats.py), the reader of
captured Q/K/V (bench/captures.py), the channel-box bound of bench/studies/box_bound_study.py,
and the cost model of bench/studies/dense_prefix_study.py. (The side-by-side scripts take the C
API's argument structs from the Python package's binding, which python/tests checks.)"""
import json
import os
import pathlib
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH / "studies"))  # the one-off CPU studies (box bound, dense prefix)
from cutlass_peer import cutlass_fmha_ms  # noqa: E402
from processes import (run_json_process, script_in_processes, without_options,  # noqa: E402
                       write_json)
from timing_stats import across_processes, paired_speedups, quartiles  # noqa: E402

try:
    import numpy as np
    from box_bound_study import box_bounds, count
    from captures import load_capture, parse_layers
    from dense_prefix_study import leading_kept, slice_cost, slice_verdicts
except ImportError:  # numpy absent: the capture reader's and the CPU studies' tests skip
    np = None


def temp_dir(test):
    """A fresh folder that is removed when the test ends."""
    folder = tempfile.TemporaryDirectory()
    test.addCleanup(folder.cleanup)
    return pathlib.Path(folder.name)


def write_program(path, text):
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# A stand-in for skipsoftmax_prefill_bench: writes the bench's JSON for two lengths (the second
# 1/16 of the first's times) with a dense arm, the guard arm and skip arms at lambda 0, 1e-6 and
# 3e-3, and appends its name and arguments to the log. Its k-th call scales the dense arms by
# DENSE_F[k] and the others by OTHER_F[k], so that a median differs from the first, the last and
# the mean of three calls.
DENSE_F = [1.09, 1.00, 1.03]
OTHER_F = [1.00, 1.03, 1.09]
FAKE_BENCH = """
    #!/usr/bin/env python3
    import json, os, sys
    name = os.path.basename(sys.argv[0])
    log = os.environ["AB_LOG"]
    calls = sum(1 for l in open(log) if l.split()[0] == name) if os.path.exists(log) else 0
    with open(log, "a") as f:
        f.write(name + " " + " ".join(sys.argv[1:]) + "\\n")
    if {fail}:
        sys.exit("bench: no GPU")
    fd, fo = {dense_f}[calls % 3], {other_f}[calls % 3]
    rows = []
    for length, scale in ((8192, 1 / 16), (32768, 1.0)):
        dense = {dense} * scale * fd
        def row(arm, lam, ms, sparsity):
            return {{"arm": arm, "lambda": lam, "length": length, "ms": ms,
                     "speedup_vs_dense": dense / ms, "tile_sparsity": sparsity}}
        rows += [row("dense", 0.0, dense, 0.0),
                 row("skip lambda=0", 0.0, {dense} * scale * fo, 0.0),
                 row("skip", 0.003, {skip} * scale * fo, 0.75),
                 row("skip", 0.0, 2 * {dense} * scale * fo, 0.0),
                 row("skip", 1e-06, 0.5 * {dense} * scale * fo, 0.1)]
    json.dump({{"gpu": "stand-in", "results": rows}},
              open(sys.argv[sys.argv.index("--json") + 1], "w"))
"""


def median3(xs):
    return sorted(xs)[1]


class AbPrefill(unittest.TestCase):
    def setUp(self):
        self.dir = temp_dir(self)
        self.log = self.dir / "calls.log"
        self.env = dict(os.environ, AB_LOG=str(self.log))

    def bench(self, name, dense, skip, fail=False):
        text = FAKE_BENCH.format(dense=dense, skip=skip, fail=fail, dense_f=DENSE_F,
                                 other_f=OTHER_F)
        return write_program(self.dir / name, text)

    def run_ab(self, *args):
        return subprocess.run([sys.executable, str(BENCH / "ab_prefill.py"), *args],
                              capture_output=True, text=True, env=self.env)

    def test_summary_and_alternating_order(self):
        a, b = self.bench("a", 30.0, 20.0), self.bench("b", 30.0, 18.0)
        out = self.dir / "ab.json"
        done = self.run_ab("--variant", f"main={a}", "--variant", f"new={b}", "--reps", "3",
                           "--json", str(out), "--", "--lengths", "32768")
        self.assertEqual(done.returncode, 0, done.stderr)
        calls = self.log.read_text().splitlines()
        self.assertEqual([c.split()[0] for c in calls], ["a", "b", "b", "a", "a", "b"])
        self.assertTrue(all(c.split()[1:3] == ["--lengths", "32768"] for c in calls))
        doc = json.loads(out.read_text())
        self.assertEqual(len(doc["runs"]), 6)
        # Longest first; per length dense, the guard, then the skip arms by lambda.
        self.assertEqual([(e["length"], e["arm"]) for e in doc["summary"]][:5],
                         [(32768, "dense"), (32768, "guard (skip kernel, lambda=0)"),
                          (32768, "skip lambda=0"), (32768, "skip lambda=1e-06"),
                          (32768, "skip lambda=0.003")])
        self.assertEqual(len(doc["summary"]), 10)
        cell = {(e["length"], e["arm"]): e for e in doc["summary"]}
        dense = cell[(32768, "dense")]
        self.assertAlmostEqual(dense["main"]["ms"], 30.0 * median3(DENSE_F))
        # The guard and the skip arm at lambda 0 are separate arms, not one median of both.
        self.assertAlmostEqual(cell[(32768, "guard (skip kernel, lambda=0)")]["main"]["ms"],
                               30.0 * median3(OTHER_F))
        self.assertAlmostEqual(cell[(32768, "skip lambda=0")]["main"]["ms"],
                               60.0 * median3(OTHER_F))
        skip = cell[(32768, "skip lambda=0.003")]
        self.assertAlmostEqual(skip["new"]["ms"], 18.0 * median3(OTHER_F))
        self.assertAlmostEqual(skip["new"]["time_vs_main"], 0.9)
        self.assertAlmostEqual(skip["new"]["tile_sparsity"], 0.75)
        # Skip over the same process's dense arm, the median over processes.
        self.assertAlmostEqual(skip["main"]["speedup_vs_own_dense"],
                               median3([30.0 * d / (20.0 * o) for d, o in zip(DENSE_F, OTHER_F)]))
        self.assertAlmostEqual(cell[(8192, "skip lambda=0.003")]["main"]["ms"],
                               20.0 / 16 * median3(OTHER_F))

    def test_a_failing_variant_stops_it_and_writes_nothing(self):
        a, b = self.bench("a", 30.0, 20.0), self.bench("b", 30.0, 18.0, fail=True)
        out = self.dir / "ab.json"
        done = self.run_ab("--variant", f"main={a}", "--variant", f"new={b}", "--json", str(out))
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("new exited 1", done.stderr)
        self.assertIn("no GPU", done.stderr)
        self.assertFalse(out.exists())

    def test_bad_variants_are_refused(self):
        a = self.bench("a", 30.0, 20.0)
        out = str(self.dir / "ab.json")
        for args in (["--variant", f"main={a}"],
                     ["--variant", f"main={a}", "--variant", f"main={a}"],
                     ["--variant", f"main={a}", "--variant", f"new={self.dir / 'missing'}"],
                     ["--variant", f"main={a}", "--variant", "no-equals-sign"],
                     ["--variant", f"main={a}", "--variant", f"new={self.dir}"],
                     ["--variant", f"main={a}", "--variant", f"x/y={a}"]):
            done = self.run_ab(*args, "--json", out)
            self.assertEqual(done.returncode, 2, args)
            self.assertIn("--variant", done.stderr)
        self.assertFalse(self.log.exists())


# A stand-in for CUTLASS's 88_hopper_fmha: prints its result lines as the example does with
# --verbose, with times that change from run to run (a counter in a file).
FAKE_CUTLASS = """
    #!/usr/bin/env python3
    import os, sys
    counter = os.path.join(os.path.dirname(sys.argv[0]), "runs")
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
    open(counter + ".args", "a").write(" ".join(sys.argv[1:]) + "\\n")
    print("###### B 2 H 32 Q 32768 K 32768 D 128 Forward Causal #SM 132")
    print(" [--]  tma ws cooperative 128x128x128   : 590.1 TFLOPS/s")
    print("       t=%.3fms, smem=196608b" % (3.0 + 0.1 * n))
    print("[FAIL] tma ws special 128x128x128       : 0 TFLOPS/s")
    print("       t=0.001ms, smem=0b")
    print(" [--]  tma ws ping-pong 128x128x128     : 610.4 TFLOPS/s")
    print("       t=%.3fms, smem=196608b" % (2.9 - 0.1 * (n % 2)))
"""


class CutlassPeer(unittest.TestCase):
    def test_fastest_variant_median_and_arguments(self):
        d = temp_dir(self)
        binary = write_program(d / "fmha", FAKE_CUTLASS)
        ms, name = cutlass_fmha_ms(binary, 2, 32, 32768, 128, True, 20, 3)
        self.assertEqual(name, "tma ws ping-pong 128x128x128")  # the FAIL line's time is ignored
        self.assertAlmostEqual(ms, 2.9)  # runs 2.9, 2.8, 2.9
        args = (d / "runs.args").read_text().splitlines()
        self.assertEqual(len(args), 3)
        self.assertEqual(args[0].split(), ["--b=2", "--h=32", "--q=32768", "--k=32768", "--d=128",
                                           "--mask=causal", "--iterations=20", "--verbose"])
        cutlass_fmha_ms(binary, 1, 8, 4096, 64, False, 5, 1)
        self.assertIn("--mask=no", (d / "runs.args").read_text().splitlines()[-1].split())

    def test_no_successful_variant_is_an_error(self):
        d = temp_dir(self)
        binary = write_program(d / "fmha", """
            #!/bin/sh
            echo "This example requires a GPU of NVIDIA's Hopper Architecture"
        """)
        with self.assertRaisesRegex(RuntimeError, "no successful variant"):
            cutlass_fmha_ms(binary, 2, 32, 32768, 128, True, 20, 2)


class TimingStats(unittest.TestCase):
    def test_quartiles_interpolate_between_order_statistics(self):
        self.assertEqual(quartiles([5.0]), (5.0, 5.0, 5.0))
        self.assertEqual(quartiles([4.0, 1.0, 3.0, 2.0, 5.0]), (2.0, 3.0, 4.0))
        self.assertEqual(quartiles([1.0, 2.0, 3.0, 4.0]), (1.75, 2.5, 3.25))  # as numpy's default
        with self.assertRaises(ValueError):
            quartiles([])

    def test_paired_speedups_follow_the_rounds(self):
        # Both arms slow down together in the last rounds (clock drift): the ratio of each round
        # stays 1.1, although the two arms' medians alone would suggest a wider spread.
        base = [1.1, 1.1, 1.1, 2.2, 2.2]
        arm = [1.0, 1.0, 1.0, 2.0, 2.0]
        q1, median, q3 = paired_speedups(base, arm)
        self.assertAlmostEqual(q1, 1.1)
        self.assertAlmostEqual(median, 1.1)
        self.assertAlmostEqual(q3, 1.1)
        self.assertEqual(paired_speedups([2.0, 4.0, 6.0], [2.0, 2.0, 2.0]), (1.5, 2.0, 2.5))
        with self.assertRaisesRegex(ValueError, "3 base calls against 2"):
            paired_speedups([1.0, 1.0, 1.0], [1.0, 1.0])


    def test_across_processes_takes_medians_and_ranges(self):
        def doc(cudnn_ms, ours_ms):
            return {"results": [
                {"length": 32768, "batch": 2, "arm": "cuDNN (SDPA)", "ms": cudnn_ms,
                 "tile_sparsity": 0.0, "speedup_vs_cudnn": 1.0},
                {"length": 32768, "batch": 2, "arm": "ours dense", "ms": ours_ms,
                 "tile_sparsity": 0.0, "speedup_vs_cudnn": cudnn_ms / ours_ms}]}
        # Three processes: ours at 1.10x, 1.00x and 1.25x cuDNN; the median ratio is 1.10x, not
        # the ratio of the median times (28 / 25 = 1.12x) nor the mean.
        docs = [doc(27.5, 25.0), doc(28.0, 28.0), doc(30.0, 24.0)]
        cudnn, ours = across_processes(docs)
        self.assertEqual((cudnn["arm"], cudnn["processes"], cudnn["ms"]), ("cuDNN (SDPA)", 3, 28.0))
        self.assertEqual((ours["length"], ours["batch"], ours["ms"]), (32768, 2, 25.0))
        self.assertAlmostEqual(ours["speedup_vs_cudnn"], 1.1)
        self.assertAlmostEqual(ours["speedup_vs_cudnn_range"][0], 1.0)
        self.assertAlmostEqual(ours["speedup_vs_cudnn_range"][1], 1.25)
        # cuDNN unavailable in the second process: the benchmarks leave its row out and give the
        # other arms no ratio there. Its row and the ratios come from the other two processes.
        del docs[1]["results"][0]
        docs[1]["results"][0]["speedup_vs_cudnn"] = None
        cudnn, ours = across_processes(docs)
        self.assertEqual((cudnn["processes"], cudnn["ms"]), (2, 28.75))
        self.assertEqual((ours["processes"], ours["ms"]), (3, 25.0))
        self.assertAlmostEqual(ours["speedup_vs_cudnn"], 1.175)  # of 1.10 and 1.25
        self.assertAlmostEqual(ours["speedup_vs_cudnn_range"][0], 1.1)
        # No process with cuDNN: no ratio at all.
        for d in docs:
            d["results"][-1]["speedup_vs_cudnn"] = None
        self.assertIsNone(across_processes(docs)[1]["speedup_vs_cudnn_range"])
        with self.assertRaisesRegex(ValueError, "no processes"):
            across_processes([])

    def test_across_processes_keeps_arms_of_the_same_name_apart(self):
        # --lambdas 0 names an arm as the guard's: the first of the name pairs with the first.
        def doc(guard_ms, zero_ms):
            return {"results": [
                {"length": 8192, "arm": "ours skip lambda=0", "ms": guard_ms, "tile_sparsity": 0.0},
                {"length": 8192, "arm": "ours skip lambda=0", "ms": zero_ms, "tile_sparsity": 0.0}]}
        guard, zero = across_processes([doc(7.0, 9.0), doc(7.2, 9.4), doc(7.1, 9.2)])
        self.assertEqual((guard["arm"], guard["ms"], guard["processes"]), ("ours skip lambda=0", 7.1, 3))
        self.assertEqual((zero["ms"], zero["processes"]), (9.2, 3))
        self.assertNotIn("speedup_vs_cudnn", guard)  # rows without the ratio get none


    def test_across_processes_keys_decode_rows_by_batch(self):
        def doc(dense_us, skip_us):
            rows = []
            for batch in (1, 64):
                for arm, us, sparsity in (("ours dense", dense_us * batch, 0.0),
                                          ("ours skip lambda=0.001", skip_us * batch, 0.75)):
                    rows.append({"batch": batch, "length": 32768, "q_len": 1, "arm": arm,
                                 "ms": us / 1e3, "tile_sparsity": sparsity,
                                 "fraction_of_copy": 40.0 / us, "speedup_vs_cudnn": None,
                                 "speedup_vs_ours_dense": dense_us / us})
            return {"results": rows}
        rows = across_processes([doc(40.0, 32.0), doc(40.0, 25.0), doc(44.0, 40.0)])
        self.assertEqual([(r["batch"], r["arm"]) for r in rows],
                         [(1, "ours dense"), (1, "ours skip lambda=0.001"),
                          (64, "ours dense"), (64, "ours skip lambda=0.001")])
        skip = rows[1]
        self.assertEqual((skip["q_len"], skip["tile_sparsity"]), (1, 0.75))
        self.assertAlmostEqual(skip["speedup_vs_ours_dense"], 1.25)  # of 1.25, 1.6 and 1.1
        self.assertAlmostEqual(skip["speedup_vs_ours_dense_range"][0], 1.1)
        self.assertAlmostEqual(skip["speedup_vs_ours_dense_range"][1], 1.6)
        self.assertAlmostEqual(skip["fraction_of_copy"], 40.0 / 32.0)
        self.assertIsNone(skip["speedup_vs_cudnn"])  # no cuDNN arm in these processes
        self.assertAlmostEqual(rows[3]["ms"], 64 * 32.0 / 1e3)


class Processes(unittest.TestCase):
    def test_script_in_processes_gives_each_process_its_own_json(self):
        folder = temp_dir(self)
        script = folder / "bench.py"
        script.write_text(textwrap.dedent('''
            import json, sys
            argv = sys.argv[1:]
            json.dump({"argv": argv}, open(argv[argv.index("--json") + 1], "w"))
        '''))
        docs = script_in_processes(str(script), ["--lengths", "8192", "--processes", "3",
                                                 "--json", "out.json", "--timeout=9"],
                                   2, 60, "bench")
        self.assertEqual(len(docs), 2)
        for i, doc in enumerate(docs):
            argv = doc["argv"]
            self.assertEqual(argv[:4], ["--lengths", "8192", "--processes", "1"])
            self.assertEqual(argv[4], "--json")
            self.assertTrue(argv[5].endswith(f"process_{i}.json"))
            self.assertEqual(len(argv), 6)

    def test_write_json_leaves_the_whole_file_or_none(self):
        folder = temp_dir(self)
        path = str(folder / "out.json")
        write_json(path, {"a": [1, 2]})
        self.assertEqual(json.loads(pathlib.Path(path).read_text()), {"a": [1, 2]})
        with self.assertRaises(ValueError):
            write_json(path, {"a": float("nan")})  # allow_nan=False: the old file stays
        self.assertEqual(json.loads(pathlib.Path(path).read_text()), {"a": [1, 2]})
        self.assertEqual(sorted(p.name for p in folder.iterdir()), ["out.json"])

    def test_without_options_drops_each_spelling_and_its_value(self):
        argv = ["--lib", "x.so", "--processes", "3", "--json=a.json", "--timeout", "9",
                "--lengths", "8192", "--json", "b.json"]
        self.assertEqual(without_options(argv, ("--processes", "--timeout", "--json")),
                         ["--lib", "x.so", "--lengths", "8192"])

    def test_run_json_process_reads_or_names_the_failure(self):
        folder = temp_dir(self)
        out = str(folder / "out.json")
        writes = write_program(folder / "writes", f"""
            #!/usr/bin/env python3
            import json
            json.dump({{"ok": 1}}, open({out!r}, "w"))
        """)
        self.assertEqual(run_json_process([writes], out, 60, "writes"), {"ok": 1})
        silent = write_program(folder / "silent", """
            #!/usr/bin/env python3
        """)
        missing = str(folder / "none.json")
        with self.assertRaisesRegex(SystemExit, "silent wrote no readable JSON"):
            run_json_process([silent], missing, 60, "silent")
        fails = write_program(folder / "fails", """
            #!/usr/bin/env python3
            import sys
            sys.exit("no GPU here")
        """)
        with self.assertRaisesRegex(SystemExit, "(?s)fails exited 1.*no GPU here"):
            run_json_process([fails], missing, 60, "fails")


@unittest.skipIf(np is None, "numpy is not installed")
class Captures(unittest.TestCase):
    def write_layer(self, folder, layer, hq, hkv, tokens=5, dim=4):
        # Every element encodes (layer, head): q and k = 100 l + h, v = -(100 l + h).
        for t, heads, sign in (("q", hq, 1), ("k", hkv, 1), ("v", hkv, -1)):
            x = np.zeros((tokens, heads, dim), np.float16)
            for h in range(heads):
                x[:, h, :] = sign * (100 * layer + h)
            np.save(folder / f"layer{layer:02d}_{t}.npy", x)

    def test_stacked_layers_keep_each_query_head_with_its_kv_head(self):
        folder = temp_dir(self)
        for layer in (5, 11, 17):
            self.write_layer(folder, layer, hq=6, hkv=2)
        q, k, v = load_capture(folder, [5, 11, 17])
        self.assertEqual((q.shape, k.shape, v.shape), ((5, 18, 4), (5, 6, 4), (5, 6, 4)))
        self.assertEqual(q.dtype, np.float32)
        g = q.shape[1] // k.shape[1]
        for h in range(q.shape[1]):
            layer, head = divmod(int(q[0, h, 0]), 100)
            kv_layer, kv_head = divmod(int(k[0, h // g, 0]), 100)
            self.assertEqual((kv_layer, kv_head), (layer, head // 3))
        self.assertTrue((v == -k).all())

    def test_plain_triple_and_bad_stacks(self):
        folder = temp_dir(self)
        for t in ("q", "k", "v"):
            np.save(folder / f"{t}.npy", np.ones((3, 2, 4), np.float16))
        self.assertEqual([x.shape for x in load_capture(folder)], [(3, 2, 4)] * 3)
        self.write_layer(folder, 0, hq=6, hkv=2)
        self.write_layer(folder, 1, hq=6, hkv=3)
        with self.assertRaisesRegex(ValueError, "differ in shape"):
            load_capture(folder, [0, 1])
        with self.assertRaises(FileNotFoundError):
            load_capture(folder, [0, 2])

    def test_per_layer_capture_without_layers_names_the_option(self):
        folder = temp_dir(self)
        for layer in (0, 1, 2):
            self.write_layer(folder, layer, hq=6, hkv=2)
        with self.assertRaisesRegex(ValueError, "--input-layers 0-2"):
            load_capture(folder)
        # Gemma 3's global layers are not contiguous: a list, which --input-layers parses.
        other = temp_dir(self)
        for layer in (5, 11, 17):
            self.write_layer(other, layer, hq=6, hkv=2)
        with self.assertRaisesRegex(ValueError, "--input-layers 5,11,17$"):
            load_capture(other)
        self.assertEqual(parse_layers("5,11,17"), [5, 11, 17])

    def test_layer_lists(self):
        self.assertEqual(parse_layers("0-3"), [0, 1, 2, 3])
        self.assertEqual(parse_layers("5,11,17"), [5, 11, 17])
        self.assertEqual(parse_layers("0-1,7"), [0, 1, 7])
        for bad in ("3-1", "a", "1-", "-2", ""):
            with self.assertRaises(ValueError, msg=bad):
                parse_layers(bad)


@unittest.skipIf(np is None, "numpy is not installed")
class BoxBound(unittest.TestCase):
    def test_the_bound_holds_every_score_of_its_box(self):
        rng = np.random.default_rng(1)
        q, k = rng.standard_normal((40, 16)), rng.standard_normal((100, 16))
        scores = q @ k.T * 0.5
        for box in (16, 32):
            bound = box_bounds(q, k, box, 0.5)
            self.assertEqual(bound.shape, (40, (100 + box - 1) // box))
            for j in range(bound.shape[1]):
                self.assertTrue((bound[:, j] >= scores[:, j * box:(j + 1) * box].max(1)).all())
        # A box of one key is that key: the bound is the score.
        np.testing.assert_allclose(box_bounds(q, k, 1, 0.5), scores)

    def test_a_far_field_of_small_keys_is_proven(self):
        # Every row sees a strong sink; the other keys are tiny, so every tile but the sink's
        # and the diagonal's is skipped, and their boxes prove it.
        rng = np.random.default_rng(2)
        q = np.abs(rng.standard_normal((512, 8))) + 1
        k = 1e-3 * rng.standard_normal((512, 8))
        k[0] = 10
        visited, skipped, proven = count(q, k, 1e-3, [256, 448], 64, 1.0, boxes=(64, 16))
        self.assertGreater(skipped, 0)
        self.assertEqual(proven, {64: skipped, 16: skipped})


@unittest.skipIf(np is None, "numpy is not installed")
class DensePrefix(unittest.TestCase):
    def test_slices_are_visited_sink_first_then_the_diagonal_back(self):
        # A tiny far field, and two keys as strong as each other: the sink (key 0) and key 300,
        # in tile 4 of 64 keys. Only their tiles are kept, wherever the visit order puts them:
        # sink-reverse visits tile 0, then the diagonal tile, then back towards tile 1.
        rng = np.random.default_rng(3)
        q = np.abs(rng.standard_normal((512, 8))) + 1
        k = 1e-3 * rng.standard_normal((512, 8))
        k[0] = k[300] = 10
        slices = slice_verdicts(q, k, 1e-3, [0, 256, 448], 64, 1.0)
        kept = [list(np.flatnonzero(~v)) for v in slices]
        # Slice 0 sees tile 0 alone; slice 256's order is 0, 4, 3, 2, 1; slice 448's 0, 7, ..., 1.
        self.assertEqual(kept, [[0], [0, 1], [0, 4]])
        self.assertEqual([len(v) for v in slices], [1, 5, 8])
        self.assertEqual([leading_kept(v) for v in slices], [1, 2, 1])

    def test_the_cost_model(self):
        v = np.array([False, False, True, False, True, True])
        self.assertEqual(leading_kept(v), 2)
        self.assertEqual(leading_kept(np.zeros(3, bool)), 3)
        # No prefix: 3 skipped at 0.5 and 3 kept at 1.25.
        self.assertAlmostEqual(slice_cost(v, 0, 0.5, 1.25, 0.25), 5.25)
        # Two dense positions, one switch, then 3 skipped and 1 kept.
        self.assertAlmostEqual(slice_cost(v, 2, 0.5, 1.25, 0.25), 2 + 0.25 + 1.5 + 1.25)
        # A prefix as long as the slice runs it all dense, with no switch.
        self.assertAlmostEqual(slice_cost(v, 6, 0.5, 1.25, 0.25), 6)
        self.assertAlmostEqual(slice_cost(v, 9, 0.5, 1.25, 0.25), 6)


if __name__ == "__main__":
    unittest.main()
