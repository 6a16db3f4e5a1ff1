#!/usr/bin/env python3
"""Paged decode side by side in one process: our dense and skip-softmax decode kernels (C API,
ctypes) against PyTorch SDPA's cuDNN and FlashAttention backends on the same cache contents, and
against the bandwidth of a device-to-device copy measured in the same run.

One new token per sequence, or with --q-len N the N new tokens of a speculative verification
(N x G <= 16, G = Hq / Hkv): they are already in the cache of L tokens, token i at L - N + i seeing
the keys up to it (causal, bottom-right aligned). The KV cache holds real-structure attention (an
attention sink, a rotary-like band, a Gaussian far field: the recipe of core/synthetic.cpp) on
shuffled pages, or with --inputs the K/V a model wrote on a real text (`skipsoftmax capture`,
layers stacked as heads with --input-layers; bench/captures.py), each query that of its
sequence's last token. SDPA gets the same K/V as contiguous [B, Hkv, L, D] tensors and the N x G query
rows of each GQA group packed token-major ([B, Hkv, N G, D], row r: token r / G, head r % G, our
kernel's order), so that it too reads each K/V byte once. With N > 1 the rows need causal limits
of their own: cuDNN gets them as an additive [N G, L] bias; FlashAttention takes no mask, so it
gets [B, Hq, N, D] with GQA and torch.nn.attention.bias.causal_lower_right (FA2's own causal) and
reads K/V per query head (its TB/s still counts the K/V bytes once).

Every timed call follows a sweep of the L2 (--flush-mb MiB, 256; 0: none), a sweep of the
instruction caches and a spin of ~100 us (so that no arm's host launch is timed). The code sweep
runs 256 KB of straight-line code on every SM: without it an arm found the code of the arm timed
before it in the SMs' instruction caches (the L2 sweep reads data only), so a skip arm after
another skip arm ran warm and one after a dense arm cold (1 x 4k: 14.0 against 14.7 us for the
same launch); in serving, the other layers' kernels run between two attention calls.
--no-code-sweep leaves it out. --flush-mode read (the default) reads the sweep's buffer,
which leaves clean lines, as the weight reads of a model's matrix products leave the L2 before
its attention; zero writes it, which leaves dirty lines that the timed call writes back to DRAM as
its reads evict them (7 us more for our batch-1 call at 32k). --warm-metadata then reads q, the
page table and the lengths back into the L2, as the kernels that write them in serving leave
them; the K/V pages stay cold. A sequence's pages lie at shuffled slots (--page-order contiguous:
one after another); arms are interleaved round by round (odd rounds reversed); median per arm.
Two more arms give the floor for a call of that size: a device-to-device copy moving as many bytes
as the kernels read (half read, half written; the written half may stay in the L2 within the
call), and a plain read of the cache's own K and V pages (bulk copies of 16 KB into shared
memory, 7 in flight a CTA, two CTAs an SM: the fastest read of this size found, 95-97% of the
copy at 128 MiB where a loop of 16-byte loads reached 87%, bench/studies/read_balance.cu; CuPy),
launch and ramp included. Each skip arm (automatic splits) gets its
own floor: a read of as many bytes as it reads (K in full, the V of its kept tiles, tile 0's K
once more per split after the first), and a "ceiling" line gives the most any kernel reading
those bytes could gain: our dense time, and the time of a dense call at 90% of the copy's
bandwidth, over that read.
With --timeline N, N more calls of each of our arms (and the base build's) and of the copy and
read arms run under the PyTorch profiler, which reports per call the GPU time of each kernel, the
gap between the flush's end and the call's first kernel, and the span to the call's last kernel's
end. Prints a table and writes JSON.

With --processes N the script runs itself N times, each process printing its table, and then
prints and writes the median over the processes of each arm's time and ratios (to cuDNN, to our
dense arm, to the copy) with each ratio's range: medians move 1-5% between processes on the H200.

  python3 bench/decode_sdpa.py --lib build-gpu/libskipsoftmax_capi.so --json out.json
  python3 bench/decode_sdpa.py --lib build-gpu/libskipsoftmax_capi.so --q-len 4 --json out.json
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from compare_sdpa import _capi, interleaved_median_ms, load_library, rel_l2, structured
from processes import summarize_in_processes


DecodeArgs = _capi.DecodeArgs


def median_ms(fn, iters=10):
    """The median of `iters` event-timed calls of fn, after 3 untimed ones."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def copy_bandwidth(gb=2.0):
    """Bytes read plus written per second of a device-to-device copy (PyTorch), median."""
    n = int(gb * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * n * 2 / (ms * 1e-3)


def read_bandwidth(reader, gb=2.0):
    """Bytes per second of the read kernel over a large buffer, median."""
    buf = torch.empty(int(gb * 2**30), dtype=torch.uint8, device="cuda").random_(0, 256)
    half = buf.numel() // 2
    ms = median_ms(reader.bind(buf[:half], buf[half:]))
    n = buf.numel()
    del buf
    return n / (ms * 1e-3)


# Reads n16 16-byte words of a, then of b, each once; four loads in flight a thread. The words'
# XOR is stored only if it equals a constant, so that no load can be dropped.
READ_KERNEL = r"""
extern "C" __global__ void NAME(const uint4* __restrict__ a, long long na,
                                     const uint4* __restrict__ b, long long nb,
                                     unsigned int* sink) {
  const long long n = na + nb, stride = (long long)gridDim.x * blockDim.x;
  unsigned int acc = 0;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i < n; i += 4 * stride) {
    uint4 w[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const long long j = i + u * stride;
      w[u] = j < na ? a[j] : (j < n ? b[j - na] : make_uint4(0, 0, 0, 0));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= w[u].x ^ w[u].y ^ w[u].z ^ w[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""


# The read arms' kernel: the best read of a decode call's size found (bench/studies/read_balance.cu,
# runs 216-217: 95-97% of the copy at 128 MiB where the loop above reaches 87%). One warp a CTA, two
# CTAs an SM, each copying its share of a, then b, in pieces of 16 KB (the last piece of each
# shorter) by 1-D bulk copies into 7 shared-memory stages (112 KB) that complete on mbarriers,
# each lane reading a word of every landed piece.
READ_BULK_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(32) NAME(const char* __restrict__ a, long long na,
                                                      const char* __restrict__ b, long long nb,
                                                      unsigned int* sink) {
  constexpr int kPiece = 16384, kStages = 7;
  extern __shared__ __align__(128) unsigned char st[];
  __shared__ unsigned long long full[kStages];
  const long long pa = (na + kPiece - 1) / kPiece, pieces = pa + (nb + kPiece - 1) / kPiece;
  const long long p0 = pieces * blockIdx.x / gridDim.x;
  const long long p1 = pieces * (blockIdx.x + 1) / gridDim.x;
  const unsigned lane = threadIdx.x;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;"
                   :: "r"((unsigned)__cvta_generic_to_shared(&full[s])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  for (long long p = p0; p < p1 + kStages; ++p) {
    const long long i = p - p0;
    const int s = (int)(i % kStages);
    if (p >= p0 + kStages) {  // piece p - kStages landed in stage s: read a word of it
      const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[s]);
      const unsigned parity = (unsigned)((i / kStages - 1) & 1);
      unsigned done = 0;
      while (!done) {
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2;"
                     " selp.u32 %0, 1, 0, q; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
      }
      const unsigned word = ((const unsigned*)(st + s * kPiece))[lane * 4];
      if (word == 0x9e3779b9u) sink[0] = word;
      __syncwarp();
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (p < p1 && lane == 0) {
      const char* src = p < pa ? a + p * kPiece : b + (p - pa) * kPiece;
      const long long left = p < pa ? na - p * kPiece : nb - (p - pa) * kPiece;
      const unsigned bytes = (unsigned)(left < kPiece ? left : kPiece);
      const unsigned bar = (unsigned)__cvta_generic_to_shared(&full[s]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                   :: "r"(bar), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                   " [%0], [%1], %2, [%3];"
                   :: "r"((unsigned)__cvta_generic_to_shared(st + s * kPiece)), "l"(src),
                      "r"(bytes), "r"(bar) : "memory");
    }
  }
}
"""
READ_BULK_STAGE_BYTES = 7 * 16384


def torch_stream(cupy):
    """PyTorch's current stream as a CuPy stream, so that CuPy launches queue behind torch's."""
    with warnings.catch_warnings():  # CuPy 14 deprecates it for Stream.from_external
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)


class Reader:
    """A read-only kernel over CUDA tensors (CuPy's runtime compiler), on PyTorch's stream,
    named `name` (the profiler tells the flush's kernel from the read arm's by it). bulk: the
    read arms' kernel (READ_BULK_KERNEL: two CTAs of one warp an SM, each reading its share by
    bulk copies into shared memory); otherwise the loop of 16-byte loads (READ_KERNEL: four
    CTAs of 512 threads an SM), which the L2 sweep uses."""

    def __init__(self, name, bulk=False):
        try:
            import cupy
        except ImportError as e:
            raise SystemExit(f"decode_sdpa.py: the read arm and --flush-mode read need CuPy ({e})")
        self.cp = cupy
        self.bulk = bulk
        source = READ_BULK_KERNEL if bulk else READ_KERNEL
        self.kernel = cupy.RawKernel(source.replace("NAME", name), name)
        if bulk:
            self.kernel.max_dynamic_shared_size_bytes = READ_BULK_STAGE_BYTES
        self.sink = cupy.zeros(1, dtype=cupy.uint32)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.blocks = (2 if bulk else 4) * sms

    def words(self, t):
        if t.numel() * t.element_size() % 16:
            raise ValueError("Reader: a tensor of whole 16-byte words is needed")
        return self.cp.from_dlpack(t.detach().view(torch.uint8).view(-1).view(torch.int32))

    def bind(self, a, b):
        """A call that reads a, then b: the conversions are done once, here, so that a timed
        call is one launch."""
        wa, wb = self.words(a), self.words(b)
        # The bulk kernel counts bytes, the loop 16-byte words (wa and wb hold 4-byte words).
        def count(w):
            return self.cp.int64(w.size * 4 if self.bulk else w.size // 4)
        args = (wa, count(wa), wb, count(wb), self.sink)
        stream = torch_stream(self.cp)
        threads, smem = (32, READ_BULK_STAGE_BYTES) if self.bulk else (512, 0)

        def call():
            with stream:
                self.kernel((self.blocks,), (threads,), args, shared_mem=smem)
        return call


# Straight-line code larger than an SM's instruction caches: 16,384 dependent FMAs, 16 bytes each,
# with distinct immediates. Written as PTX (the CUDA front end takes minutes over such a body;
# ptxas under two seconds).
CODE_SWEEP_FMAS = 16384
CODE_SWEEP_NAME = "sweep_code"  # its kernel, which the timeline leaves out of each call


class CodeSweep:
    """A kernel whose 256 KB of code, run by four warps on every SM, evicts the code of the
    kernels run before it from the SMs' instruction caches."""

    def __init__(self):
        import struct

        import cupy

        def imm(x):
            return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]
        body = "\n".join(f"  fma.rn.f32 x, x, av, {imm(i + 0.5)};"
                         for i in range(CODE_SWEEP_FMAS))
        ptx = (".version 8.0\n.target sm_90\n.address_size 64\n"
               f".visible .entry {CODE_SWEEP_NAME}(.param .f32 a, .param .u64 sink) {{\n"
               "  .reg .f32 x, av; .reg .pred p; .reg .u64 s; .reg .u32 t;\n"
               "  ld.param.f32 av, [a];\n  ld.param.u64 s, [sink];\n"
               "  mov.u32 t, %tid.x;\n  cvt.rn.f32.u32 x, t;\n"
               f"{body}\n"
               # The result is stored only if it equals a constant, so no FMA can be dropped.
               f"  setp.neu.f32 p, x, {imm(1234.5)};\n  @p bra DONE;\n"
               "  cvta.to.global.u64 s, s;\n  st.global.f32 [s], x;\nDONE:\n  ret;\n}\n")
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
        try:
            self.kernel = cupy.RawModule(path=f.name).get_function(CODE_SWEEP_NAME)
        finally:
            os.unlink(f.name)
        self.cp = cupy
        self.sink = cupy.zeros(1, dtype=cupy.float32)
        self.blocks = 2 * torch.cuda.get_device_properties(0).multi_processor_count
        self.stream = torch_stream(cupy)

    def __call__(self):
        with self.stream:
            self.kernel((self.blocks,), (128,), (self.cp.float32(1.0), self.sink))


def make_flush(mode, mib, code_sweep):
    """The sweep run before every timed call (None for mib 0): of the L2, where zero writes `mib`
    MiB (dirty lines left in the L2) and read reads them (clean lines left); then, with
    code_sweep, of the SMs' instruction caches."""
    if mib <= 0:
        return None
    buf = torch.zeros(mib * 2**20, dtype=torch.uint8, device="cuda")
    if mode == "zero":
        data = buf.zero_
    else:
        half = buf.numel() // 2
        data = Reader("sweep_l2").bind(buf[:half], buf[half:])
    if not code_sweep:
        return data
    code = CodeSweep()

    def flush():
        data()
        code()
    return flush


def timeline(fns, flush, calls):
    """Per (name, fn): the medians over `calls` profiled calls, each after `flush()`, of the GPU
    time of each kernel or copy the call ran, of the gap from the flush's end to the call's first
    one, and of the span from the flush's end to the call's last one's end (microseconds)."""
    from torch.profiler import ProfilerActivity, profile
    flush()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _, fn in fns:
            for _ in range(calls):
                flush()
                fn()
                torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)["traceEvents"]
    acts = sorted((e for e in trace if e.get("ph") == "X" and
                   e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    # Each call is the flush (one fill or read kernel, and the code sweep) and what follows it up
    # to the next flush.
    flush_name = acts[0]["name"]
    groups = []
    for e in acts:
        if e["name"] == CODE_SWEEP_NAME:
            continue
        if e["name"] == flush_name:
            groups.append((e, []))
        elif groups:
            groups[-1][1].append(e)
    if len(groups) != calls * len(fns):
        raise RuntimeError(f"timeline: {len(groups)} profiled calls, expected {calls * len(fns)}")
    out = []
    for i, (name, _) in enumerate(fns):
        calls_of = groups[i * calls:(i + 1) * calls]
        kernels = {}
        for _, body in calls_of:
            for e in body:
                kernels.setdefault(e["name"], []).append(float(e["dur"]))
        gaps = [body[0]["ts"] - (fl["ts"] + fl["dur"]) for fl, body in calls_of if body]
        spans = [max(e["ts"] + e["dur"] for e in body) - (fl["ts"] + fl["dur"])
                 for fl, body in calls_of if body]
        out.append({"arm": name, "calls": calls,
                    "kernels_us": {k[:120]: statistics.median(v) for k, v in kernels.items()},
                    "gap_after_flush_us": statistics.median(gaps),
                    "span_after_flush_us": statistics.median(spans)})
    return out


def skip_bytes(kv_bytes, sparsity, splits, batch, hkv, d, tile_k=64):
    """Bytes a skip launch reads: K in full, the V of its kept tiles, and the K of tile 0 once
    more in every split after the first (the sink that seeds its running maximum); tile_k is
    decode_tile_k(d), 64 for every head dim."""
    half = kv_bytes // 2
    seed = max(0, splits - 1) * batch * hkv * tile_k * d * 2
    return half + round((1.0 - sparsity) * half) + seed


def floor_arm(lam):
    return f"read of skip lambda={lam:g}'s bytes"


MAX_SPLITS = 128  # decode::kMaxSplits


class Ours:
    def __init__(self, lib_path):
        self.lib = load_library(lib_path)
        self.lib.skipsoftmax_decode.restype = ctypes.c_int
        self.lib.skipsoftmax_decode_workspace_size.restype = ctypes.c_int64
        self.err = ctypes.create_string_buffer(1024)

    def args(self, q, out, kp, vp, table, lens, L, hkv, lam, force, stats=None, splits=0):
        a = DecodeArgs()
        self.lib.skipsoftmax_decode_args_init(ctypes.byref(a))  # the defaults and struct_size
        a.num_splits = splits
        a.dtype = 1 if q.dtype == torch.bfloat16 else 0
        a.head_dim = q.shape[3]  # q: [B, q_len, Hq, D]
        a.q, a.out = q.data_ptr(), out.data_ptr()
        a.k_pages, a.v_pages = kp.data_ptr(), vp.data_ptr()
        a.num_pages, a.page_size = kp.shape[0], kp.shape[1]
        a.page_table, a.max_pages_per_seq = table.data_ptr(), table.shape[1]
        a.seq_lens, a.batch, a.max_seq_len = lens.data_ptr(), q.shape[0], L
        a.num_heads_q, a.num_heads_kv, a.q_len = q.shape[2], hkv, q.shape[1]
        a.flat_lambda = lam
        a.force_kernel = force
        a.stats = stats.data_ptr() if stats is not None else None
        return a

    def workspace_size(self, a):
        """Bytes of workspace the call `a` needs, and its number of splits."""
        splits = ctypes.c_int(0)
        size = self.lib.skipsoftmax_decode_workspace_size(ctypes.byref(a), ctypes.byref(splits),
                                                          self.err, 1024)
        if size < 0:
            raise RuntimeError(self.err.value.decode())
        return size, splits.value

    def prepare(self, a, ws):
        """Points `a` at the start of the shared workspace `ws`; returns its number of splits."""
        size, splits = self.workspace_size(a)
        if size > ws.numel():
            raise RuntimeError(f"workspace: {size} bytes needed, {ws.numel()} shared")
        a.workspace, a.workspace_bytes = ws.data_ptr(), ws.numel()
        return splits

    def run(self, a):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if self.lib.skipsoftmax_decode(ctypes.byref(a), stream, self.err, 1024) < 0:
            raise RuntimeError(self.err.value.decode())


def print_summary(summary):
    """The table of the median over processes (--processes)."""
    def ratio(row, field):
        value, span = row.get(field), row.get(field + "_range")
        if value is None:
            return f"{'-':>9} {'-':>13}"
        return f"{value:>8.3f}x {span[0]:>6.3f}-{span[1]:.3f}"

    print(f"{'batch':>5} {'length':>7} {'arm':<36} {'us':>9} {'of copy':>8} {'sparsity':>9} "
          f"{'vs cuDNN':>9} {'range':>13} {'vs dense':>9} {'range':>13}")
    for row in summary:
        print(f"{row['batch']:>5} {row['length']:>7} {row['arm']:<36} {row['ms'] * 1e3:>9.1f} "
              f"{row['fraction_of_copy']:>7.1%} {100 * row['tile_sparsity']:>8.1f}% "
              f"{ratio(row, 'speedup_vs_cudnn')} {ratio(row, 'speedup_vs_ours_dense')}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, help="path of libskipsoftmax_capi.so")
    p.add_argument("--configs", nargs="+", default=["1x4096", "1x32768", "1x131072", "2x32768",
                                                     "8x32768", "64x4096", "64x32768"],
                   help="BATCHxLENGTH")
    p.add_argument("--heads-q", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--lambdas", type=float, nargs="*", default=[1e-4, 1e-3, 3e-3, 1e-2, 3e-2])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=1)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--git-revision", default="unknown")
    p.add_argument("--splits", type=int, nargs="*", default=[],
                   help="also time dense and skip arms with these split counts (default: the "
                        "library's automatic choice only)")
    p.add_argument("--q-len", type=int, default=1,
                   help="new tokens per sequence (speculative verification): 1..16, with q_len x "
                        "heads-q / heads-kv <= 16")
    p.add_argument("--compare-lib",
                   help="a second build of libskipsoftmax_capi.so (say, the previous revision, "
                        "of the same C API version): its dense and skip arms are timed in the "
                        "same rounds, labelled 'base'")
    p.add_argument("--page-order", choices=["shuffled", "contiguous"], default="shuffled",
                   help="where a sequence's pages lie in the cache: at shuffled slots (as a "
                        "serving engine's cache after a while) or one after another")
    p.add_argument("--flush-mb", type=int, default=256,
                   help="MiB swept before every timed call to empty the L2 (0: no flush)")
    p.add_argument("--flush-mode", choices=["read", "zero"], default="read",
                   help="read the sweep's buffer (clean L2 lines left, as a model's weight reads "
                        "leave them) or zero it (dirty lines, written back during the timed call)")
    p.add_argument("--no-code-sweep", action="store_true",
                   help="no instruction-cache sweep after the L2 sweep")
    p.add_argument("--warm-metadata", action="store_true",
                   help="after each sweep, read q, the page table and the lengths back into the "
                        "L2, as the kernels that write them in serving leave them (K/V stay cold)")
    p.add_argument("--timeline", type=int, default=0, metavar="N",
                   help="profile N calls of each of our arms and of the same-bytes copy and "
                        "read (PyTorch profiler): kernel times, gap after the flush, span")
    p.add_argument("--same-heads", action="store_true",
                   help="every KV head's K and its query group copies of the first: the same "
                        "sparsity in every head (a diagnosis of the imbalance between heads)")
    p.add_argument("--inputs",
                   help="a capture directory (skipsoftmax capture): the cache of every sequence "
                        "holds the capture's first L tokens, and its query is the capture's q "
                        "of the last (L of each --configs entry; heads and head dim from the "
                        "capture)")
    p.add_argument("--input-layers", help="with --inputs: the capture's layers stacked along the "
                                          "head axis, e.g. 0-29 or 5,11,17")
    p.add_argument("--processes", type=int, default=1,
                   help="run the whole comparison in N processes and summarize over them")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per process (--processes)")
    p.add_argument("--json")
    args = p.parse_args()

    if args.processes < 1:
        p.error("--processes must be at least 1")
    if args.processes > 1 and args.timeline:
        p.error("--timeline profiles calls of one process: run it without --processes")
    if args.timeline and args.flush_mb <= 0:
        p.error("--timeline marks each call by the flush before it: give --flush-mb > 0")
    if args.timeline and args.warm_metadata:
        p.error("--timeline takes the flush as a call's one preceding kernel: drop "
                "--warm-metadata")
    if args.warm_metadata and args.flush_mb <= 0:
        p.error("--warm-metadata reads the metadata back after the flush: give --flush-mb > 0")
    if args.input_layers and not args.inputs:
        p.error("--input-layers needs --inputs")
    captured = None
    if args.inputs:
        from captures import load_capture_option
        arrays, inputs_words = load_capture_option(args.inputs, args.input_layers)
        captured = [torch.from_numpy(x) for x in arrays]
        args.heads_q, args.heads_kv, args.head_dim = (captured[0].shape[1], captured[1].shape[1],
                                                      captured[0].shape[2])
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    hq, hkv, d, ps, lq = args.heads_q, args.heads_kv, args.head_dim, args.page_size, args.q_len
    g = hq // hkv
    # The kernel's limit: a GQA group's q_len x G query rows are the 16 rows of one MMA.
    if not 1 <= lq <= 16 or lq * g > 16:
        p.error(f"--q-len {lq}: q_len must lie in [1, 16] and q_len x (heads-q / heads-kv) = "
                f"{lq} x {g} = {lq * g} must not exceed 16")
    configs = [tuple(int(x) for x in cfg.split("x")) for cfg in args.configs]
    if any(L < lq for _, L in configs):
        p.error(f"--q-len {lq}: every length in --configs must hold the {lq} new tokens")
    if captured is not None and any(L > captured[0].shape[0] for _, L in configs):
        p.error(f"--inputs holds {captured[0].shape[0]} tokens: every length in --configs must "
                "be at most that")
    if args.processes > 1:
        return summarize_in_processes(__file__, args, "decode_sdpa", print_summary)
    ours = Ours(args.lib)
    base = Ours(args.compare_lib) if args.compare_lib else None
    gen = torch.Generator(device="cuda").manual_seed(0)
    reader = Reader("read_once", bulk=True)
    code_sweep = args.flush_mb > 0 and not args.no_code_sweep
    flush = make_flush(args.flush_mode, args.flush_mb, code_sweep)
    copy_bps = copy_bandwidth()
    read_bps = read_bandwidth(reader)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; device-to-device copy {copy_bps / 1e12:.2f} TB/s "
          f"(read + write), read of 2 GiB {read_bps / 1e12:.2f} TB/s; L2 flush "
          f"{args.flush_mb} MiB {args.flush_mode}; {args.dtype}, Hq={hq} Hkv={hkv} D={d}, "
          f"pages of {ps}"
          + (f", q_len {lq}" if lq > 1 else ""))
    print(f"{'batch':>5} {'length':>7} {'arm':<36} {'us':>9} {'TB/s':>6} {'of copy':>8} "
          f"{'sparsity':>9} {'vs cuDNN':>9} {'vs dense':>9} {'err':>9}")
    rows, unavailable, timelines, ceilings = [], [], [], []
    for B, L in configs:
        pages_per_seq = (L + ps - 1) // ps
        n_pages = B * pages_per_seq
        if captured is None:
            positions = torch.arange(L, device="cuda").repeat(B)
            k = structured(positions, hkv, d, "k", gen).to(dtype)  # [B * L, Hkv, D]
            v = structured(positions, hkv, d, "v", gen).to(dtype)
            # The new tokens are the cache's last q_len: token i of each sequence at L - q_len + i.
            q = structured(torch.arange(L - lq, L, device="cuda").repeat(B), hq, d, "q", gen)
        else:  # every sequence the capture's first L tokens
            k, v = (x[:L].to("cuda", dtype).repeat(B, 1, 1) for x in captured[1:])
            q = captured[0][L - lq:L].to("cuda").repeat(B, 1, 1)
        q = q.to(dtype).view(B, lq, hq, d)
        if args.same_heads:  # every KV head (and its query group) a copy of the first
            k = k[:, :1].expand(-1, hkv, -1).contiguous()
            q = q.view(B, lq, hkv, g, d)[:, :, :1].expand(-1, -1, hkv, -1, -1).reshape(B, lq, hq, d)
        # Pages: sequence b's page j holds tokens [j ps, (j + 1) ps), stored at a shuffled slot
        # (or at slot b * pages_per_seq + j).
        perm = (torch.randperm(n_pages, device="cuda", generator=gen)
                if args.page_order == "shuffled" else torch.arange(n_pages, device="cuda"))
        kp = torch.empty(n_pages, ps, hkv, d, dtype=dtype, device="cuda")
        vp = torch.empty_like(kp)
        kp[perm] = k.view(n_pages, ps, hkv, d)
        vp[perm] = v.view(n_pages, ps, hkv, d)
        table = perm.view(B, pages_per_seq).to(torch.int32).contiguous()
        lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
        ks = k.view(B, L, hkv, d).transpose(1, 2).contiguous()  # SDPA's own contiguous copy
        vs = v.view(B, L, hkv, d).transpose(1, 2).contiguous()
        # Row r of a group: token r // G, head r % G (a view when q_len is 1).
        qs = q.view(B, lq, hkv, g, d).transpose(1, 2).reshape(B, hkv, lq * g, d)
        del k, v
        out = torch.empty_like(q)
        stats = torch.zeros(B, 2, dtype=torch.int64, device="cuda")
        kv_bytes = 2 * B * L * hkv * d * 2  # the q_len new tokens are among the L

        def packed(res):  # [B, Hkv, q_len G, D] -> our [B, q_len, Hq, D]
            return res.view(B, hkv, lq, g, d).transpose(1, 2).reshape(B, lq, hq, d)
        if lq == 1:  # every row sees every key: no mask, both backends take the packed rows
            sdpa_inputs = [(qs, {}, packed)] * 2
        else:
            # A packed row needs its token's causal limit, L - q_len + r // G: no causal flag says
            # that, a bias does. cuDNN's is_causal is top-left; the bias is built once (a bool
            # mask is converted on every call), -65504 rather than -inf as torch does for cuDNN.
            last = L - lq + torch.arange(lq * g, device="cuda") // g
            bias = torch.zeros(lq * g, L, dtype=dtype, device="cuda").masked_fill_(
                torch.arange(L, device="cuda") > last[:, None], -65504.0)
            # FlashAttention takes no mask but has the bottom-right causal: one query head a row
            # block, so it reads K/V per query head.
            sdpa_inputs = [(qs, {"attn_mask": bias}, packed),
                           (q.transpose(1, 2), {"attn_mask": causal_lower_right(lq, L),
                                                "enable_gqa": True},
                            lambda res: res.transpose(1, 2).reshape(B, lq, hq, d))]

        arms = []  # (name, fn, sparsity, error against cuDNN, is_ours_dense)
        ref = None
        for (name, backend), (qx, kw, unpack) in zip(
                (("cuDNN (SDPA)", SDPBackend.CUDNN_ATTENTION),
                 ("FlashAttention-2 (SDPA)", SDPBackend.FLASH_ATTENTION)), sdpa_inputs):
            def fn(backend=backend, qx=qx, kw=kw):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qx, ks, vs, **kw)
            try:
                res = unpack(fn())
            except RuntimeError as e:
                reason = str(e).splitlines()[0]
                print(f"{B:>5} {L:>7} {name:<36} unavailable: {reason[:60]}")
                unavailable.append({"batch": B, "length": L, "arm": name, "reason": reason})
                continue
            err = None
            if ref is None:
                ref = res
            elif lq > 1:  # the two arms mask differently: check the second against the first
                err = rel_l2(res, ref)
            arms.append((name, fn, 0.0, err))

        # One workspace for every arm (sized for the most splits a launch may take): with one
        # each, the arms' partial outputs lay at different addresses, and two launches of the
        # same kernel measured up to 1 us apart at 1 x 4k.
        probe = ours.args(q, out, kp, vp, table, lens, L, hkv, 0.0, 0, None, MAX_SPLITS)
        shared_ws = torch.empty(max(16, ours.workspace_size(probe)[0]), dtype=torch.uint8,
                                device="cuda")

        def ours_arm(lam, force, with_stats=False, n_splits=0, lib=ours):
            a = lib.args(q, out, kp, vp, table, lens, L, hkv, lam, force,
                         stats if with_stats else None, n_splits)
            splits = lib.prepare(a, shared_ws)
            return (lambda: lib.run(a)), splits

        dense, splits = ours_arm(0.0, 0)
        dense()
        arms.append((f"ours dense ({splits} splits)", dense, 0.0,
                     rel_l2(out, ref) if ref is not None else None))
        arms.append(("ours skip lambda=0", ours_arm(0.0, 1)[0], 0.0, None))
        skip_reads = []  # (lambda, sparsity, bytes read) of the automatic-split skip arms
        for n_splits in [0] + args.splits:
            tag = f" ({n_splits} splits)" if n_splits else ""
            if n_splits:
                arms.append((f"ours dense{tag}", ours_arm(0.0, 0, n_splits=n_splits)[0], 0.0,
                             None))
            for lam in args.lambdas:
                stats.zero_()
                ours_arm(lam, 1, True, n_splits)[0]()
                s = stats.sum(0).tolist()
                sparsity = s[1] / s[0] if s[0] else 0.0
                err = rel_l2(out, ref) if ref is not None else None
                fn, used = ours_arm(lam, 1, False, n_splits)
                arms.append((f"ours skip lambda={lam:g}{tag}", fn, sparsity, err))
                if not n_splits:
                    skip_reads.append((lam, sparsity,
                                       skip_bytes(kv_bytes, sparsity, used, B, hkv, d)))
        # A copy moving the bytes our kernels read: half read, half written.
        copy_src = torch.empty(kv_bytes // 4, dtype=torch.bfloat16, device="cuda").normal_()
        copy_dst = torch.empty_like(copy_src)
        arms.append(("copy of the same bytes", lambda: copy_dst.copy_(copy_src), 0.0, None))
        arms.append(("read of the same bytes", reader.bind(kp, vp), 0.0, None))
        # The floor of each skip arm: a plain read of as many bytes as that arm reads (K, then a
        # prefix of the V pages; capped at all of V, which can only lower the floor).
        v_flat = vp.view(-1).view(torch.uint8)
        for lam, _, nbytes in skip_reads:
            rest = min(v_flat.numel(), max(16, (nbytes - kv_bytes // 2) // 16 * 16))
            arms.append((floor_arm(lam), reader.bind(kp, v_flat[:rest]), 0.0, None))
        if base is not None:
            arms.append(("base dense", ours_arm(0.0, 0, lib=base)[0], 0.0, None))
            for lam in args.lambdas:
                stats.zero_()
                ours_arm(lam, 1, True, lib=base)[0]()
                s = stats.sum(0).tolist()
                arms.append((f"base skip lambda={lam:g}", ours_arm(lam, 1, lib=base)[0],
                             s[1] / s[0] if s[0] else 0.0,
                             rel_l2(out, ref) if ref is not None else None))
        sweep = flush
        if flush is not None and args.warm_metadata:
            # After the sweep, q, the page table and the lengths are read back into the L2 (and
            # their translations into the TLBs), as the kernels that wrote them leave them in
            # serving; the K/V pages stay cold.
            def sweep():
                flush()
                for t in (q, table, lens):
                    t.max()
        times = interleaved_median_ms([a[1] for a in arms], args.warmup, args.iters, args.rounds,
                                      sweep)
        if args.timeline:
            named = [(a[0], a[1]) for a in arms
                     if a[0].startswith(("ours ", "base ", "copy of", "read of"))]
            for t in timeline(named, sweep, args.timeline):
                t.update({"batch": B, "length": L})
                timelines.append(t)
                ks = ", ".join(f"{k.split('<')[0].split('(')[0]} {v:.1f}"
                               for k, v in t["kernels_us"].items())
                print(f"{B:>5} {L:>7} timeline {t['arm']:<27} gap {t['gap_after_flush_us']:.1f} "
                      f"us, span {t['span_after_flush_us']:.1f} us; {ks}")
        cudnn_ms = next((ms for a, ms in zip(arms, times) if a[0].startswith("cuDNN")), None)
        dense_ms = next(ms for a, ms in zip(arms, times) if a[0].startswith("ours dense"))
        base_ms = next((ms for a, ms in zip(arms, times) if a[0] == "base dense"), None)
        for (name, _, sparsity, err), ms in zip(arms, times):
            # The base build's arms against its own dense arm.
            own_dense_ms = base_ms if name.startswith("base") else dense_ms
            bps = kv_bytes / (ms * 1e-3)
            ratio = cudnn_ms / ms if cudnn_ms else None
            ratio_s = f"{ratio:.3f}x" if ratio is not None else "-"
            err_s = f"{err:.2e}" if err is not None else "-"
            print(f"{B:>5} {L:>7} {name:<36} {ms * 1e3:>9.1f} {bps / 1e12:>6.2f} "
                  f"{bps / copy_bps:>7.1%} {100 * sparsity:>8.1f}% {ratio_s:>9} "
                  f"{own_dense_ms / ms:>8.3f}x {err_s:>9}")
            rows.append({"batch": B, "length": L, "q_len": lq, "arm": name, "ms": ms,
                         "kv_bytes_per_s": bps, "fraction_of_copy": bps / copy_bps,
                         "tile_sparsity": sparsity, "speedup_vs_cudnn": ratio,
                         "speedup_vs_ours_dense": own_dense_ms / ms, "rel_l2_vs_cudnn": err})
        # What the plain read allows any skip kernel: our dense call's time, and the time of a
        # dense call at 90% of the copy's bandwidth, over the read of the skip arm's bytes.
        ms_of = {a[0]: ms for a, ms in zip(arms, times)}
        dense90_ms = kv_bytes / (0.9 * copy_bps) * 1e3
        for lam, sparsity, nbytes in skip_reads:
            floor_ms = ms_of[floor_arm(lam)]
            c = {"batch": B, "length": L, "q_len": lq, "lambda": lam, "tile_sparsity": sparsity,
                 "bytes_read": nbytes, "fraction_of_kv_bytes": nbytes / kv_bytes,
                 "read_ms": floor_ms, "ours_skip_ms": ms_of[f"ours skip lambda={lam:g}"],
                 "ceiling_vs_ours_dense": dense_ms / floor_ms,
                 "ceiling_vs_dense_at_90pct_of_copy": dense90_ms / floor_ms}
            ceilings.append(c)
            print(f"{B:>5} {L:>7} ceiling at lambda={lam:g} ({100 * sparsity:.1f}% skipped, "
                  f"{nbytes / kv_bytes:.1%} of the bytes): reading them takes "
                  f"{floor_ms * 1e3:.1f} us, {c['ceiling_vs_ours_dense']:.3f}x our dense, "
                  f"{c['ceiling_vs_dense_at_90pct_of_copy']:.3f}x a dense call at 90% of the copy")
        del kp, vp, ks, vs, shared_ws, copy_src, copy_dst
        torch.cuda.empty_cache()
    if args.json:
        doc = {"command": " ".join(sys.argv), "git_revision": args.git_revision,
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cudnn": torch.backends.cudnn.version(), "dtype": args.dtype,
               "compare_lib": args.compare_lib,
               "heads_q": hq, "heads_kv": hkv, "head_dim": d, "page_size": ps, "q_len": lq,
               "copy_bytes_per_s": copy_bps, "read_bytes_per_s": read_bps,
               "inputs": (inputs_words + "; every sequence its first L tokens, "
                          if captured is not None else
                          "synthetic real-structure (sink 12, band 8, far field 0.75), ") +
                         ("query at the last position" if lq == 1 else
                          f"queries at the last {lq} positions, causal among them"),
               "kv_bytes": "K and V read once: 2 x batch x length x heads_kv x head_dim x 2 "
                           "(the q_len new tokens are among the length; q and out not counted)",
               "sdpa_inputs": "K/V [B, Hkv, L, D]; q rows of a GQA group packed token-major "
                              "[B, Hkv, q_len G, D]" +
                              ("" if lq == 1 else
                               "; cuDNN: additive [q_len G, L] causal bias; FlashAttention: "
                               "[B, Hq, q_len, D], enable_gqa, causal_lower_right (K/V read per "
                               "query head)"),
               "unavailable": unavailable,
               "timelines": timelines,
               "ceilings": ceilings,
               "ceiling_definition": "per automatic-split skip arm: the bytes it reads (K in "
                                     "full, (1 - sparsity) of V, tile 0's K once more per split "
                                     "after the first), the time of a plain read of that many "
                                     "bytes of the cache (K, then a prefix of V) in the same "
                                     "rounds, and our dense time and the time of a dense call at "
                                     "90% of the copy bandwidth over it: the most any kernel "
                                     "reading those bytes could gain",
               "page_order": args.page_order, "same_heads": args.same_heads,
               "flush_mib": args.flush_mb,
               "flush_mode": args.flush_mode, "warm_metadata": args.warm_metadata,
               "code_sweep": code_sweep,
               "timing": f"median of {args.iters * args.rounds} event-timed calls per arm " +
                         (f"after an L2 flush ({args.flush_mb} MiB "
                          f"{'read' if args.flush_mode == 'read' else 'zeroed'}, " +
                          (f"a {CODE_SWEEP_FMAS * 16 // 1024} KB instruction-cache sweep, "
                           if code_sweep else "") +
                          "then a ~100 us spin) each"
                          if args.flush_mb > 0 else "without an L2 flush") +
                         f", arms interleaved over {args.rounds} rounds (odd rounds "
                         f"reversed), after {args.warmup} warm-up calls",
               "results": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
