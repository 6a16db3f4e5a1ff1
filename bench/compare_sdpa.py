#!/usr/bin/env python3
"""Side by side in one process, on the same inputs: PyTorch SDPA's cuDNN and FlashAttention
backends against our dense and skip-softmax prefill kernels (through the C API with ctypes).

Inputs are real-structure attention tensors (an attention sink, a rotary-like band around the
diagonal, a Gaussian far field; the recipe of core/synthetic.cpp), or Q/K/V captured from a model
(--inputs DIR with q.npy, k.npy, v.npy of shape [tokens, heads, head_dim]). Timing: CUDA events
around each call, arms interleaved round by round (odd rounds in reverse order), median per arm.
Prints a table and writes JSON.

With --cutlass-fmha, CUTLASS's Hopper attention example (scripts/build-cutlass-fmha.sh) runs as a
second peer on the same shapes: in its own process, with its own random inputs and its own timing
(the mean of back-to-back calls), its fastest variant's median over --cutlass-runs runs, its FLOPs
counted as ours are. It has fp16 and MHA only, so every arm then runs fp16 MHA (--dtype fp16
--heads-kv equal to --heads-q).

  python3 bench/compare_sdpa.py --lib build/libskipsoftmax_capi.so --json out.json

Medians move 1-5% from one process to the next on the H200 (the clock under its power cap), more
than between the arms of one process. With --processes N the script runs itself N times, each
process printing its table, and then prints and writes the median over the processes of each arm's
ms and speedup over cuDNN, with that speedup's range (the JSON keeps every process's results).
"""
import argparse
import ctypes
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cutlass_peer import cutlass_fmha_ms
from processes import summarize_in_processes
from timing_stats import paired_speedups, quartiles


# The C API's argument structs and loader come from the Python package's binding, one mirror of
# c_api.h for the package, these scripts and their tests.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from skipsoftmax import _capi  # noqa: E402

PrefillArgs = _capi.PrefillArgs
ORDERS = {"forward": 0, "reverse": 1, "sink-reverse": 2}


def load_library(path):
    """libskipsoftmax_capi.so at `path`, refused by name unless it is of the binding's minor
    version (a struct of another layout would be misread, not refused)."""
    os.environ["SKIPSOFTMAX_LIBRARY"] = str(path)
    return _capi.library()


def structured(positions, heads, dim, role, gen, sink=12.0, band=8.0, noise=0.75):
    """[len(positions), heads, dim] float32 rows of the real-structure recipe at `positions`."""
    n = positions.numel()
    if role == "v":
        return torch.randn(n, heads, dim, device="cuda", generator=gen)
    pairs = max(1, dim // 8)
    first_noise = min(dim, 1 + 2 * pairs)
    root = math.sqrt(dim)
    x = torch.empty(n, heads, dim, device="cuda")
    noise_std = math.sqrt(noise * root / math.sqrt(max(1, dim - first_noise)))
    x[:, :, first_noise:] = noise_std * torch.randn(n, heads, dim - first_noise, device="cuda",
                                                    generator=gen)
    pos = positions.float()
    sink_amp = math.sqrt(sink * root)
    x[:, :, 0] = sink_amp if role == "q" else (positions == 0).float()[:, None] * sink_amp
    band_amp = math.sqrt(band * root / pairs)
    for f in range(pairs):
        if 2 + 2 * f >= first_noise:
            break
        phase = 2 * math.pi * pos / (64.0 * 64.0 ** (f / pairs))
        x[:, :, 1 + 2 * f] = band_amp * torch.cos(phase)[:, None]
        x[:, :, 2 + 2 * f] = band_amp * torch.sin(phase)[:, None]
    return x


SPIN_CYCLES = 200_000  # about 100 us at the H200's 1.98 GHz


def interleaved_median_ms(fns, warmup, iters, rounds, flush=None):
    """Per function, the median of interleaved_times."""
    return [statistics.median(t) for t in interleaved_times(fns, warmup, iters, rounds, flush)]


def interleaved_times(fns, warmup, iters, rounds, flush=None):
    """Per function, the times in ms of rounds x iters event-timed calls in timing order (call i of
    every function from the same round), the functions taking turns
    round by round so that clock and thermal drift fall on all of them alike, odd rounds in
    reverse order so that no function always follows the same one; with `flush` (a function that
    sweeps the L2), it runs before every timed call so that no call finds its inputs in L2, and a
    spin of about 100 us follows it on the GPU, so that the host has queued the timed call before
    the GPU reaches it (without it, an arm whose launch takes the host longer than the sweep takes
    the GPU is timed with that launch)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for k in order:
            fn = fns[k]
            for _ in range(iters):
                if flush is not None:
                    flush()
                    torch.cuda._sleep(SPIN_CYCLES)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times[k].append(a.elapsed_time(b))
    return times


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


class Ours:
    def __init__(self, lib_path):
        self.lib = load_library(lib_path)
        self.lib.skipsoftmax_prefill.restype = ctypes.c_int
        self.err = ctypes.create_string_buffer(1024)

    def __call__(self, q, k, v, out, cu, batch, seq_len, causal, order, lam, force, stats=None):
        a = PrefillArgs()
        self.lib.skipsoftmax_prefill_args_init(ctypes.byref(a))  # the defaults and struct_size
        a.dtype = 1 if q.dtype == torch.bfloat16 else 0
        a.head_dim = q.shape[2]
        a.q, a.k, a.v, a.out = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
        a.cu_seqlens_q = a.cu_seqlens_k = cu.data_ptr()
        a.batch = batch
        a.total_q = a.total_k = q.shape[0]
        a.max_seqlen_q = a.max_seqlen_k = seq_len
        a.num_heads_q, a.num_heads_kv = q.shape[1], k.shape[1]
        a.causal = int(causal)
        a.kv_order = ORDERS[order]
        a.flat_lambda = lam
        a.stats = stats.data_ptr() if stats is not None else None
        a.force_kernel = force
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if self.lib.skipsoftmax_prefill(ctypes.byref(a), stream, self.err, 1024) < 0:
            raise RuntimeError(self.err.value.decode())


def sdpa(backend, q, k, v, batch, seq_len, causal):
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[2]
    qs = q.view(batch, seq_len, hq, d).transpose(1, 2)
    ks = k.view(batch, seq_len, hkv, d).transpose(1, 2)
    vs = v.view(batch, seq_len, hkv, d).transpose(1, 2)
    if hkv != hq:  # not every backend takes GQA: give it the expanded heads
        ks = ks.repeat_interleave(hq // hkv, dim=1)
        vs = vs.repeat_interleave(hq // hkv, dim=1)
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    return run


def print_summary(summary):
    """The table of the median over processes (--processes)."""
    print(f"{'length':>7} {'batch':>5} {'arm':<22} {'ms':>9} {'sparsity':>9} {'vs cuDNN':>9} "
          f"{'range':>13}")
    for row in summary:
        ratio, span = row["speedup_vs_cudnn"], row["speedup_vs_cudnn_range"]
        ratio_s = f"{ratio:.3f}x" if ratio is not None else "-"
        span_s = f"{span[0]:.3f}-{span[1]:.3f}" if span and row["arm"] != "cuDNN (SDPA)" else "-"
        print(f"{row['length']:>7} {row['batch']:>5} {row['arm']:<22} {row['ms']:>9.3f} "
              f"{100 * row['tile_sparsity']:>8.1f}% {ratio_s:>9} {span_s:>13}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="path of libskipsoftmax_capi.so")
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536])
    p.add_argument("--tokens", type=int, default=65536, help="tokens per launch (batch = tokens / length)")
    p.add_argument("--heads-q", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--non-causal", action="store_true")
    p.add_argument("--lambdas", type=float, nargs="*", default=[1e-3, 1e-2])
    p.add_argument("--kv-order", choices=list(ORDERS), default="sink-reverse")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=1, help="timed calls per arm and round")
    p.add_argument("--rounds", type=int, default=20, help="round-robin rounds over the arms")
    p.add_argument("--git-revision", default="unknown")
    p.add_argument("--json")
    p.add_argument("--inputs", help="directory with q.npy, k.npy, v.npy [tokens, heads, head_dim] "
                                    "captured from a model (one sequence; --lengths is ignored)")
    p.add_argument("--input-layers", help="with --inputs: a capture's layers (layerNN_q.npy, ...) "
                                          "stacked along the head axis, e.g. 0-29 or 5,11,17")
    p.add_argument("--cutlass-fmha", help="path of CUTLASS's 88_hopper_fmha binary (fp16 only)")
    p.add_argument("--cutlass-runs", type=int, default=5, help="runs of the CUTLASS example per length")
    p.add_argument("--cutlass-iterations", type=int, default=20, help="timed calls per CUTLASS run")
    p.add_argument("--processes", type=int, default=1,
                   help="run the whole comparison in N processes and summarize over them")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per process (--processes)")
    args = p.parse_args()
    if args.rounds < 1 or args.iters < 1:
        p.error("--rounds and --iters must be at least 1")
    if args.input_layers and not args.inputs:
        p.error("--input-layers needs --inputs")
    if args.cutlass_fmha and args.inputs:
        p.error("--cutlass-fmha times CUTLASS's example on its own random inputs; it cannot run "
                "on captured --inputs")
    if args.cutlass_fmha and (args.dtype != "fp16" or args.heads_kv != args.heads_q):
        p.error("--cutlass-fmha: CUTLASS's example has fp16 and MHA only; for the same shape in "
                f"every arm add --dtype fp16 --heads-kv {args.heads_q}")
    if args.processes < 1:
        p.error("--processes must be at least 1")
    if args.processes > 1:
        return summarize_in_processes(__file__, args, "compare_sdpa", print_summary)

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    causal = not args.non_causal
    ours = Ours(args.lib)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    captured = None
    if args.inputs:
        from captures import load_capture_option
        arrays, inputs_words = load_capture_option(args.inputs, args.input_layers)
        captured = [torch.from_numpy(x) for x in arrays]
        args.lengths = [captured[0].shape[0]]
        args.heads_q, args.heads_kv, args.head_dim = (captured[0].shape[1], captured[1].shape[1],
                                                      captured[0].shape[2])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}, {args.dtype}, Hq={args.heads_q} Hkv={args.heads_kv} "
          f"D={args.head_dim}, {'causal' if causal else 'non-causal'}, median of "
          f"{args.iters * args.rounds} interleaved")
    print(f"{'length':>7} {'batch':>5} {'arm':<22} {'ms':>9} {'TFLOPS':>8} {'sparsity':>9} "
          f"{'vs cuDNN':>9} {'paired IQR':>13} {'err':>9}")
    for L in args.lengths:
        B = max(1, args.tokens // L) if captured is None else 1
        T = B * L
        if captured is not None:
            q, k, v = (x.to(device="cuda", dtype=dtype).contiguous() for x in captured)
        else:
            positions = torch.arange(T, device="cuda") % L
            q = structured(positions, args.heads_q, args.head_dim, "q", gen).to(dtype)
            k = structured(positions, args.heads_kv, args.head_dim, "k", gen).to(dtype)
            v = structured(positions, args.heads_kv, args.head_dim, "v", gen).to(dtype)
        out = torch.empty_like(q)
        cu = torch.arange(0, T + 1, L, dtype=torch.int32, device="cuda")
        stats = torch.zeros(B, 2, dtype=torch.int64, device="cuda")
        scores = L * (L + 1) / 2 if causal else L * L
        flops = 4 * args.head_dim * scores * args.heads_q * B

        arms = []  # (name, function, sparsity, error against cuDNN)
        ref = None
        for name, backend in (("cuDNN (SDPA)", SDPBackend.CUDNN_ATTENTION),
                              ("FlashAttention-2 (SDPA)", SDPBackend.FLASH_ATTENTION)):
            fn = sdpa(backend, q, k, v, B, L, causal)
            try:
                res = fn()
            except RuntimeError as e:
                print(f"{L:>7} {B:>5} {name:<22} unavailable: {str(e).splitlines()[0][:60]}")
                continue
            if ref is None:
                ref = res.transpose(1, 2).reshape(T, args.heads_q, args.head_dim)
            arms.append((name, fn, 0.0, None))

        def ours_arm(lam, force):
            return lambda: ours(q, k, v, out, cu, B, L, causal, args.kv_order, lam, force)
        ours_arm(0.0, 0)()
        arms.append(("ours dense", ours_arm(0.0, 0), 0.0,
                     rel_l2(out, ref) if ref is not None else None))
        arms.append(("ours skip lambda=0", ours_arm(0.0, 1), 0.0, None))
        for lam in args.lambdas:
            stats.zero_()
            ours(q, k, v, out, cu, B, L, causal, args.kv_order, lam, 1, stats)
            s = stats.sum(0).tolist()
            sparsity = s[1] / s[0] if s[0] else 0.0
            err = rel_l2(out, ref) if ref is not None else None
            arms.append((f"ours skip lambda={lam:g}", ours_arm(lam, 1), sparsity, err))
        times = interleaved_times([fn for _, fn, _, _ in arms], args.warmup, args.iters,
                                  args.rounds)
        arms = [(name, t, sparsity, err) for (name, _, sparsity, err), t in zip(arms, times)]
        cutlass = None
        if args.cutlass_fmha:
            try:
                cutlass = cutlass_fmha_ms(args.cutlass_fmha, B, args.heads_q, L, args.head_dim,
                                          causal, args.cutlass_iterations, args.cutlass_runs)
            except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
                print(f"{L:>7} {B:>5} {'CUTLASS 88':<22} unavailable: {str(e)[:80]}")
        cudnn = next((t for n, t, _, _ in arms if n.startswith("cuDNN")), None)
        cudnn_ms = statistics.median(cudnn) if cudnn else None
        rows_here = []
        for name, t, sparsity, err in arms:
            q1, ms, q3 = quartiles(t)
            row = {"length": L, "batch": B, "arm": name, "ms": ms, "ms_quartiles": [q1, q3],
                   "tflops": flops / ms * 1e-9, "tile_sparsity": sparsity,
                   "speedup_vs_cudnn": cudnn_ms / ms if cudnn else None, "rel_l2_vs_cudnn": err}
            if cudnn:
                p1, pm, p3 = paired_speedups(cudnn, t)
                row["speedup_vs_cudnn_paired"] = {"median": pm, "quartiles": [p1, p3]}
            rows_here.append(row)
        if cutlass:
            ms, variant = cutlass
            rows_here.append({"length": L, "batch": B, "arm": "CUTLASS 88", "variant": variant,
                              "ms": ms,
                              "tflops": flops / ms * 1e-9, "tile_sparsity": 0.0,
                              "speedup_vs_cudnn": cudnn_ms / ms if cudnn else None,
                              "rel_l2_vs_cudnn": None})
        for row in rows_here:
            ratio = row["speedup_vs_cudnn"]
            ratio_s = f"{ratio:.3f}x" if ratio is not None else "-"
            paired = row.get("speedup_vs_cudnn_paired")
            spread = (f"{paired['quartiles'][0]:.3f}-{paired['quartiles'][1]:.3f}"
                      if paired and row["arm"] != "cuDNN (SDPA)" else "-")
            err = row["rel_l2_vs_cudnn"]
            err_s = f"{err:.2e}" if err is not None else "-"
            print(f"{L:>7} {B:>5} {row['arm']:<22} {row['ms']:>9.3f} {row['tflops']:>8.1f} "
                  f"{100 * row['tile_sparsity']:>8.1f}% {ratio_s:>9} {spread:>13} {err_s:>9}")
        rows += rows_here
        del q, k, v, out
        torch.cuda.empty_cache()
    if args.json:
        doc = {"command": " ".join(sys.argv), "git_revision": args.git_revision,
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "dtype": args.dtype,
               "heads_q": args.heads_q, "heads_kv": args.heads_kv, "head_dim": args.head_dim,
               "causal": causal, "kv_order": args.kv_order,
               "inputs": (inputs_words if captured is not None else
                          "synthetic real-structure (sink 12, band 8, far field 0.75)"),
               "timing": f"median of {args.iters * args.rounds} event-timed calls per arm, arms "
                         f"interleaved over {args.rounds} rounds (odd rounds reversed), after "
                         f"{args.warmup} warm-up calls; speedup_vs_cudnn is the ratio of the "
                         "medians, speedup_vs_cudnn_paired the median and quartiles of the "
                         "ratios of calls timed in the same round",
               "cutlass_fmha": (f"{args.cutlass_fmha}: CUTLASS 4.2.0 examples/88_hopper_fmha, "
                                f"its own random inputs, median over "
                                f"{args.cutlass_runs} runs of the mean of "
                                f"{args.cutlass_iterations} back-to-back calls"
                                if args.cutlass_fmha else None),
               "results": rows}
        with open(args.json + ".tmp", "w") as f:
            json.dump(doc, f, indent=2, allow_nan=False)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()
