#!/usr/bin/env python3
"""A/B of prefill kernels built from two (or more) revisions: runs each variant's
skipsoftmax_prefill_bench in its own processes, the variants taking turns (the order reversed on
every other repetition, so that drift between processes falls on all of them alike), and writes
one JSON with every run and a summary per (length, lambda).

Kernels that are SASS-identical differ by 1-2% from process to process on the H200, so a verdict
needs several repetitions; the summary gives, per variant, the median over repetitions of each
arm's ms and of skip over the same process's own dense arm, and each variant's ratio to the first.

  python3 bench/ab_prefill.py --variant main=build-gpu/skipsoftmax_prefill_bench \\
      --variant new=.var/new/skipsoftmax_prefill_bench --reps 3 --json ab.json \\
      --description "what changed" -- --lengths 32768 8192 --lambdas 1e-3 3e-3
"""
import argparse
import os
import statistics
import sys
import tempfile

from processes import run_json_process, write_json


def parse_variant(text):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--variant wants NAME=PATH, got '{text}'")
    return name, path


def arm_key(row):
    """The summary's key of one result row of the bench's JSON, (length, rank, lambda, label),
    which sorts as the table prints: per length dense, the guard, then the skip arms by lambda.
    The bench names its arms "dense", "skip lambda=0" (the skip kernel's guard) and "skip" (one
    per --lambdas value, which may be 0 as well)."""
    if row["arm"] == "skip":
        return row["length"], 2, row["lambda"], f"skip lambda={row['lambda']:g}"
    if row["arm"] == "skip lambda=0":
        return row["length"], 1, 0.0, "guard (skip kernel, lambda=0)"
    return row["length"], 0, 0.0, row["arm"]


def summarize(runs, names):
    """{arm_key: {variant: (median ms, median skip-over-dense, median sparsity)}}."""
    table = {}
    for name in names:
        per_arm = {}
        for run in (r for r in runs if r["variant"] == name):
            for row in run["results"]:
                per_arm.setdefault(arm_key(row), []).append(row)
        for key, rows in per_arm.items():
            table.setdefault(key, {})[name] = (
                statistics.median(r["ms"] for r in rows),
                statistics.median(r["speedup_vs_dense"] for r in rows),
                statistics.median(r["tile_sparsity"] for r in rows))
    return table


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", type=parse_variant, action="append", required=True,
                   help="NAME=PATH of a skipsoftmax_prefill_bench binary (two or more)")
    p.add_argument("--reps", type=int, default=3, help="processes per variant")
    p.add_argument("--description", default="")
    p.add_argument("--timeout", type=int, default=300, help="seconds per process")
    p.add_argument("--json", required=True)
    p.add_argument("bench_args", nargs=argparse.REMAINDER,
                   help="after --: the arguments every bench process gets")
    args = p.parse_args()
    names = [n for n, _ in args.variant]
    if len(names) < 2 or len(set(names)) != len(names):
        p.error("--variant: give two or more variants with distinct names")
    for name, path in args.variant:
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            p.error(f"--variant {name}: {path} is not an executable file")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            p.error(f"--variant {name}: a name of letters, digits, '-', '_' and '.' only")
    if args.reps < 1:
        p.error("--reps must be at least 1")
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args

    runs = []
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.reps):
            order = args.variant if rep % 2 == 0 else args.variant[::-1]
            for name, path in order:
                out = os.path.join(work, f"{name}_{rep}.json")
                run = run_json_process([path, *bench_args, "--json", out], out, args.timeout,
                                       f"ab_prefill: [rep {rep + 1}/{args.reps}] {name}")
                run.update(variant=name, binary=path, rep=rep)
                runs.append(run)

    table = summarize(runs, names)
    base = names[0]
    print(f"{'length':>7} {'arm':<30} " + " ".join(
        f"{n + ' ms':>12} {n + ' x dense':>12}" + (f" {n + '/' + base:>10}" if n != base else "")
        for n in names))
    summary = []
    for (length, _, _, arm), cells in sorted(table.items(), key=lambda kv: (-kv[0][0], kv[0][1:])):
        line = f"{length:>7} {arm:<30} "
        entry = {"length": length, "arm": arm}
        for n in names:
            if n not in cells:
                line += f"{'-':>12} {'-':>12}" + (f" {'-':>10}" if n != base else "") + " "
                continue
            ms, speedup, sparsity = cells[n]
            entry[n] = {"ms": ms, "speedup_vs_own_dense": speedup, "tile_sparsity": sparsity}
            line += f"{ms:>12.3f} {speedup:>11.3f}x"
            if n != base and base in cells:
                entry[n]["time_vs_" + base] = ms / cells[base][0]
                line += f" {ms / cells[base][0]:>10.3f}"
            line += " "
        print(line.rstrip())
        summary.append(entry)

    doc = {"command": " ".join(sys.argv), "description": args.description,
           "gpu": runs[0].get("gpu"), "variants": dict(args.variant),
           "timing": f"{args.reps} processes a variant, order reversed every other repetition; "
                     "medians over processes of each process's own medians",
           "summary": summary, "runs": runs}
    write_json(args.json, doc)


if __name__ == "__main__":
    main()
