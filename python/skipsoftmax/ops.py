"""PyTorch ops over the skip-softmax kernels.

Two custom ops per phase are registered with torch.library (``skipsoftmax::prefill``,
``skipsoftmax::prefill_paged``, ``skipsoftmax::decode``), each with a fake implementation, so
that torch.compile traces them without a graph break and CUDA graphs capture them: a call on CUDA
tensors makes no host synchronisation and allocates only its output (and, for decode, the split
workspace) through PyTorch's allocator, on the current stream. On CPU tensors the same call runs
the library's float64 reference with the kernels' tiles, visit order and dispatch, so the skip
decisions (and the statistics) are the GPU's.

The thresholds follow the checkpoint keys' contract: ``scale_table`` is ``[[seqlen_bin, S], ...]``
(lambda = S / L for a sequence of KV length L, exact dense below the first bin or where S >= L),
``threshold`` a flat lambda in [0, 1) or a float32 tensor [B] of one lambda per sequence (read on
the device at each call, so it may change between CUDA-graph replays; a value outside (0, 1), NaN
included, runs its sequence dense); neither runs the dense kernel.

``return_lse=True`` adds each row's log-sum-exp: float32, natural log, ln sum_j exp(scale q.k_j)
over the keys computed (a skipped tile's keys excluded), -inf for a row that sees no key, shaped as
the output without its head dim. Outputs over disjoint key sets merge exactly with it (split-KV,
cascades, context parallelism).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import torch

from . import _capi

KV_ORDERS = {"forward": 0, "reverse": 1, "sink_then_reverse": 2}
_DTYPES = {torch.float16: _capi.FP16, torch.bfloat16: _capi.BF16}


def _threshold(scale_table, threshold, batch: int, device
               ) -> tuple[list[int], list[float], float, Optional[torch.Tensor]]:
    """(bins, scales, flat lambda, per-sequence lambdas) for the ops' schema; the library checks
    the values (those of a lambdas tensor, on the device, are read there)."""
    if scale_table is not None and threshold is not None:
        raise ValueError("give scale_table or threshold, not both")
    if isinstance(threshold, torch.Tensor):
        _check("threshold", threshold, 1, torch.float32, device)
        if threshold.shape[0] != batch or not threshold.is_contiguous():
            raise ValueError(f"a threshold tensor must be a contiguous float32 [batch] = [{batch}] "
                             f"tensor, got {tuple(threshold.shape)}")
        return [], [], 0.0, threshold
    if threshold is not None:
        return [], [], float(threshold), None
    if scale_table is None:
        return [], [], 0.0, None
    bins, scales = [], []
    for i, row in enumerate(scale_table):
        if len(row) != 2:
            raise ValueError(f"scale_table[{i}] must be [seqlen_bin, S], got {row!r}")
        bins.append(int(row[0]))
        scales.append(float(row[1]))
    if not bins:
        raise ValueError("scale_table is empty: pass None for dense attention")
    return bins, scales, 0.0, None


def _check(name: str, t: torch.Tensor, ndim: int, dtype=None, device=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, the queries on {device}")


def _attention_dtype(q: torch.Tensor, *others: tuple[str, torch.Tensor]) -> None:
    if q.dtype not in _DTYPES:
        raise TypeError(f"q must be float16 or bfloat16, got {q.dtype}")
    for name, t in others:
        if t.dtype != q.dtype:
            raise TypeError(f"{name} is {t.dtype}, q is {q.dtype}")


def _check_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, names: tuple[str, str]) -> None:
    """k and v alike, their head dim q's: the library sizes its reads from q and k."""
    if v.shape != k.shape:
        raise ValueError(f"{names[0]} and {names[1]} differ: {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{names[0]} has head dim {k.shape[-1]}, q {q.shape[-1]}")


def _check_pool(name: str, pool: torch.Tensor) -> None:
    # A page pool is the caller's cache: copying it whole at every call would be a silent cost.
    if not pool.is_contiguous():
        raise ValueError(f"{name} must be contiguous [num_pages, page_size, Hkv, D]")


def _check_stats(stats: Optional[torch.Tensor], batch: int, device) -> None:
    if stats is None:
        return
    _check("stats", stats, 2, torch.int64, device)
    if tuple(stats.shape) != (batch, 2) or not stats.is_contiguous():
        raise ValueError(f"stats must be a contiguous int64 [batch, 2] = [{batch}, 2] tensor "
                         f"(tiles visited, skipped), got {tuple(stats.shape)}")


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


class _Table:
    """The table's rows as C arrays, alive for the duration of a call."""

    def __init__(self, args, bins: Sequence[int], scales: Sequence[float], flat: float):
        self.bins = (ctypes.c_int64 * len(bins))(*bins)
        self.scales = (ctypes.c_double * len(scales))(*scales)
        args.table_rows = len(bins)
        args.table_bins = ctypes.cast(self.bins, ctypes.c_void_p) if bins else None
        args.table_scales = ctypes.cast(self.scales, ctypes.c_void_p) if bins else None
        args.flat_lambda = flat


def _run(entry: str, args, device: torch.device, table: _Table) -> int:
    """Runs a launch on the current stream of `device`, or the reference on the CPU; `table`
    holds the arrays args points to."""
    if device.type == "cpu":
        return _capi.call(entry + "_reference", ctypes.byref(args))
    if device.type != "cuda":
        raise ValueError(f"tensors on {device}: only CUDA (Hopper) and CPU are supported")
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        return _capi.call(entry, ctypes.byref(args), ctypes.c_void_p(stream))


def _fill_prefill(a, q, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                  softmax_scale, window, kv_order, lambdas, stats, lse, num_heads_kv) -> None:
    a.dtype = _DTYPES[q.dtype]
    a.head_dim = q.shape[2]
    a.q, a.out = _ptr(q), _ptr(out)
    a.cu_seqlens_q, a.cu_seqlens_k = _ptr(cu_seqlens_q), _ptr(cu_seqlens_k)
    a.batch = cu_seqlens_q.shape[0] - 1
    a.total_q = q.shape[0]
    a.max_seqlen_q, a.max_seqlen_k = max_seqlen_q, max_seqlen_k
    a.num_heads_q, a.num_heads_kv = q.shape[1], num_heads_kv
    a.causal = int(causal)
    a.softmax_scale = softmax_scale
    a.window = window
    a.kv_order = kv_order
    a.lambdas, a.stats, a.lse = _ptr(lambdas), _ptr(stats), _ptr(lse)


def _prefill_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                softmax_scale: float, window: int, kv_order: int, table_bins: list[int],
                table_scales: list[float], flat_lambda: float, lambdas: Optional[torch.Tensor],
                stats: Optional[torch.Tensor], lse: Optional[torch.Tensor]) -> torch.Tensor:
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    out = torch.empty_like(q)
    a = _capi.prefill_args()
    _fill_prefill(a, q, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                  softmax_scale, window, kv_order, lambdas, stats, lse, k.shape[1])
    a.k, a.v = _ptr(k), _ptr(v)
    a.total_k = k.shape[0]
    _run("skipsoftmax_prefill", a, q.device, _Table(a, table_bins, table_scales, flat_lambda))
    return out


_prefill_op = torch.library.custom_op("skipsoftmax::prefill", _prefill_impl,
                                      mutates_args=("stats", "lse"))


@_prefill_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
      window, kv_order, table_bins, table_scales, flat_lambda, lambdas, stats, lse):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _prefill_paged_impl(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
                      page_table: torch.Tensor, cu_seqlens_q: torch.Tensor,
                      cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                      causal: bool, softmax_scale: float, window: int, kv_order: int,
                      table_bins: list[int], table_scales: list[float], flat_lambda: float,
                      lambdas: Optional[torch.Tensor], stats: Optional[torch.Tensor],
                      lse: Optional[torch.Tensor]) -> torch.Tensor:
    _check_pool("k_pages", k_pages)
    _check_pool("v_pages", v_pages)
    q, page_table = q.contiguous(), page_table.contiguous()
    cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    out = torch.empty_like(q)
    a = _capi.prefill_args()
    _fill_prefill(a, q, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                  softmax_scale, window, kv_order, lambdas, stats, lse, k_pages.shape[2])
    a.k_pages, a.v_pages = _ptr(k_pages), _ptr(v_pages)
    a.num_pages, a.page_size = k_pages.shape[0], k_pages.shape[1]
    a.page_table, a.max_pages_per_seq = _ptr(page_table), page_table.shape[1]
    # Unread in a paged launch (the offsets give each sequence's keys), but checked to be in range.
    a.total_k = k_pages.shape[0] * k_pages.shape[1]
    _run("skipsoftmax_prefill", a, q.device, _Table(a, table_bins, table_scales, flat_lambda))
    return out


_prefill_paged_op = torch.library.custom_op("skipsoftmax::prefill_paged", _prefill_paged_impl,
                                            mutates_args=("stats", "lse"))


@_prefill_paged_op.register_fake
def _(q, k_pages, v_pages, page_table, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      causal, softmax_scale, window, kv_order, table_bins, table_scales, flat_lambda, lambdas,
      stats, lse):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _decode_impl(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
               page_table: torch.Tensor, seq_lens: torch.Tensor, max_seq_len: int,
               softmax_scale: float, window: int, table_bins: list[int],
               table_scales: list[float], flat_lambda: float, lambdas: Optional[torch.Tensor],
               num_splits: int, stats: Optional[torch.Tensor],
               lse: Optional[torch.Tensor]) -> torch.Tensor:
    _check_pool("k_pages", k_pages)
    _check_pool("v_pages", v_pages)
    q, page_table, seq_lens = q.contiguous(), page_table.contiguous(), seq_lens.contiguous()
    out = torch.empty_like(q)
    a = _capi.decode_args()
    a.dtype = _DTYPES[q.dtype]
    a.head_dim = q.shape[3]
    a.q, a.out = _ptr(q), _ptr(out)
    a.q_len = q.shape[1]
    a.k_pages, a.v_pages = _ptr(k_pages), _ptr(v_pages)
    a.num_pages, a.page_size = k_pages.shape[0], k_pages.shape[1]
    a.page_table, a.max_pages_per_seq = _ptr(page_table), page_table.shape[1]
    a.seq_lens, a.batch, a.max_seq_len = _ptr(seq_lens), q.shape[0], max_seq_len
    a.num_heads_q, a.num_heads_kv = q.shape[2], k_pages.shape[2]
    a.softmax_scale = softmax_scale
    a.window = window
    a.num_splits = num_splits
    a.lambdas, a.stats, a.lse = _ptr(lambdas), _ptr(stats), _ptr(lse)
    table = _Table(a, table_bins, table_scales, flat_lambda)
    if q.device.type == "cuda":
        with torch.cuda.device(q.device):
            size = _capi.call("skipsoftmax_decode_workspace_size", ctypes.byref(a), None)
        if size:
            # Splits' partial outputs and log-sum-exps; the combine kernel reads them on the
            # stream, after which the caching allocator may hand the block out again.
            workspace = torch.empty(size, dtype=torch.uint8, device=q.device)
            a.workspace, a.workspace_bytes = _ptr(workspace), size
    _run("skipsoftmax_decode", a, q.device, table)
    return out


_decode_op = torch.library.custom_op("skipsoftmax::decode", _decode_impl,
                                     mutates_args=("stats", "lse"))


@_decode_op.register_fake
def _(q, k_pages, v_pages, page_table, seq_lens, max_seq_len, softmax_scale, window, table_bins,
      table_scales, flat_lambda, lambdas, num_splits, stats, lse):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _eager(op, impl):
    """The op under torch.compile (its fake implementation traces it), else its implementation
    called directly: the same work without the dispatcher's layers (about half of a call's host
    time), which an eager caller, a CUDA graph capture included, does not need. The ops have no
    autograd formula either way."""
    return op if torch.compiler.is_compiling() else impl


def _lse(shape, device) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=torch.float32, device=device)


def _max_len(lengths: torch.Tensor) -> int:
    # A host synchronisation: callers in CUDA graphs or torch.compile pass the maximum instead.
    return int(lengths.max().item()) if lengths.numel() else 0


def prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
            cu_seqlens_q: Optional[torch.Tensor] = None,
            cu_seqlens_k: Optional[torch.Tensor] = None,
            max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
            page_table: Optional[torch.Tensor] = None,
            causal: bool = True, softmax_scale: Optional[float] = None,
            window: Optional[int] = None, scale_table=None, threshold=None,
            kv_order: str = "sink_then_reverse", return_lse: bool = False,
            stats: Optional[torch.Tensor] = None):
    """Prefill attention, dense or skip-softmax; returns the output in the layout of q, and with
    return_lse the float32 log-sum-exp per row and head ([B, S, Hq] or [total_q, Hq]).

    Layouts (head dim 64, 128 or 256; float16 or bfloat16; GQA where heads_q % heads_kv == 0):
      * batched: q [B, S, Hq, D], k and v [B, Sk, Hkv, D]; no cu_seqlens;
      * packed varlen: q [total_q, Hq, D], k and v [total_k, Hkv, D], cu_seqlens_q and
        cu_seqlens_k int32 [B + 1] (from 0, non-decreasing) on the tensors' device;
      * paged history (chunked prefill): k and v are the page pools [num_pages, page_size, Hkv,
        D] that already hold each sequence's history and this chunk, page_table int32
        [B, max_pages], cu_seqlens_k the KV lengths' prefix sums; q packed as above.
    max_seqlen_q / max_seqlen_k are the longest query chunk and KV length, exactly; when absent
    they are read from cu_seqlens (a host synchronisation, so pass them under CUDA graphs).
    causal is bottom-right aligned (a chunk's rows see its history). window W: each query sees its
    last W keys (causal, dense threshold only). threshold: a flat lambda, or a float32 [B] tensor
    of one lambda per sequence. stats: int64 [B, 2] that a skip launch adds tiles visited and
    skipped to, per sequence.
    """
    if kv_order not in KV_ORDERS:
        raise ValueError(f"kv_order must be one of {sorted(KV_ORDERS)}, got {kv_order!r}")
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    window = 0 if window is None else int(window)
    device = q.device
    if cu_seqlens_q is None:
        if page_table is not None or cu_seqlens_k is not None:
            raise ValueError("the paged and varlen layouts take cu_seqlens_q and cu_seqlens_k")
        _check("q", q, 4)
        _check("k", k, 4, device=device)
        _check("v", v, 4, device=device)
        _attention_dtype(q, ("k", k), ("v", v))
        _check_kv(q, k, v, ("k", "v"))
        b, s, hq, d = q.shape
        sk = k.shape[1]
        if k.shape[0] != b:
            raise ValueError(f"k and v must be [B={b}, Sk, Hkv, D], got {tuple(k.shape)}")
        if b == 0 or s == 0 or sk == 0:
            raise ValueError(f"empty batch or sequences: q {tuple(q.shape)}, k {tuple(k.shape)}")
        cu_q = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device=device)
        cu_k = torch.arange(0, (b + 1) * sk, sk, dtype=torch.int32, device=device)
        _check_stats(stats, b, device)
        bins, scales, flat, lambdas = _threshold(scale_table, threshold, b, device)
        lse = _lse((b * s, hq), device) if return_lse else None
        out = _eager(_prefill_op, _prefill_impl)(
            q.reshape(b * s, hq, d), k.reshape(b * sk, k.shape[2], d),
            v.reshape(b * sk, v.shape[2], d), cu_q, cu_k, s, sk, causal, scale,
            window, KV_ORDERS[kv_order], bins, scales, flat, lambdas, stats, lse)
        out = out.view(b, s, hq, d)
        return (out, lse.view(b, s, hq)) if return_lse else out

    if cu_seqlens_k is None:
        raise ValueError("cu_seqlens_q needs cu_seqlens_k")
    _check("q", q, 3)
    _check("cu_seqlens_q", cu_seqlens_q, 1, torch.int32, device)
    _check("cu_seqlens_k", cu_seqlens_k, 1, torch.int32, device)
    if cu_seqlens_k.shape != cu_seqlens_q.shape:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k hold {cu_seqlens_q.shape[0]} and "
                         f"{cu_seqlens_k.shape[0]} offsets; both must hold batch + 1")
    batch = cu_seqlens_q.shape[0] - 1
    _check_stats(stats, batch, device)
    bins, scales, flat, lambdas = _threshold(scale_table, threshold, batch, device)
    lse = _lse((q.shape[0], q.shape[1]), device) if return_lse else None
    if max_seqlen_q is None:
        max_seqlen_q = _max_len(cu_seqlens_q.diff())
    if max_seqlen_k is None:
        max_seqlen_k = _max_len(cu_seqlens_k.diff())
    if page_table is None:
        _check("k", k, 3, device=device)
        _check("v", v, 3, device=device)
        _attention_dtype(q, ("k", k), ("v", v))
        _check_kv(q, k, v, ("k", "v"))
        out = _eager(_prefill_op, _prefill_impl)(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
            int(max_seqlen_k), causal, scale, window, KV_ORDERS[kv_order], bins,
            scales, flat, lambdas, stats, lse)
        return (out, lse) if return_lse else out
    _check("k_pages", k, 4, device=device)
    _check("v_pages", v, 4, device=device)
    _check("page_table", page_table, 2, torch.int32, device)
    _attention_dtype(q, ("k_pages", k), ("v_pages", v))
    _check_kv(q, k, v, ("k_pages", "v_pages"))
    _check_pool("k_pages", k)
    _check_pool("v_pages", v)
    if page_table.shape[0] != batch:
        raise ValueError(f"page_table has {page_table.shape[0]} rows, the batch {batch}")
    out = _eager(_prefill_paged_op, _prefill_paged_impl)(
        q, k, v, page_table, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
        int(max_seqlen_k), causal, scale, window, KV_ORDERS[kv_order], bins,
        scales, flat, lambdas, stats, lse)
    return (out, lse) if return_lse else out


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           page_table: torch.Tensor, seq_lens: torch.Tensor, *,
           max_seq_len: Optional[int] = None, softmax_scale: Optional[float] = None,
           window: Optional[int] = None, scale_table=None, threshold=None,
           num_splits: Optional[int] = None, return_lse: bool = False,
           stats: Optional[torch.Tensor] = None):
    """Paged decode attention, dense or skip-softmax; returns the output in the layout of q, and
    with return_lse the float32 log-sum-exp per row and head (the layout of q without D).

    q: [B, Hq, D] (one new token per sequence) or [B, q_len, Hq, D] (speculative verification,
    q_len x Hq / Hkv <= 16). k_cache, v_cache: [num_pages, page_size, Hkv, D] pools (page_size a
    power of two in [16, 128]) already holding the new tokens; page_table int32 [B, max_pages];
    seq_lens int32 [B], the cached tokens of each sequence, new ones included. max_seq_len is the
    longest seq_lens entry, exactly; when absent it is read from seq_lens (a host
    synchronisation). num_splits: split-KV parts (None: chosen from the arguments and the GPU's
    multiprocessor count, the H100/H200's on a machine without one; fix it under CUDA graphs so
    that the workspace size stays put, and on the CPU to reproduce another GPU's decisions).
    threshold and stats as for prefill.
    """
    device = q.device
    one_token = q.dim() == 3
    q4 = q.unsqueeze(1) if one_token else q
    _check("q", q4, 4)
    _check("k_cache", k_cache, 4, device=device)
    _check("v_cache", v_cache, 4, device=device)
    _check("page_table", page_table, 2, torch.int32, device)
    _check("seq_lens", seq_lens, 1, torch.int32, device)
    _attention_dtype(q4, ("k_cache", k_cache), ("v_cache", v_cache))
    _check_kv(q4, k_cache, v_cache, ("k_cache", "v_cache"))
    _check_pool("k_cache", k_cache)
    _check_pool("v_cache", v_cache)
    batch = q4.shape[0]
    if page_table.shape[0] != batch or seq_lens.shape[0] != batch:
        raise ValueError(f"page_table rows ({page_table.shape[0]}) and seq_lens "
                         f"({seq_lens.shape[0]}) must match the batch ({batch})")
    _check_stats(stats, batch, device)
    bins, scales, flat, lambdas = _threshold(scale_table, threshold, batch, device)
    lse = _lse(q4.shape[:3], device) if return_lse else None
    if max_seq_len is None:
        max_seq_len = _max_len(seq_lens)
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    out = _eager(_decode_op, _decode_impl)(
        q4, k_cache, v_cache, page_table, seq_lens, int(max_seq_len), scale,
        0 if window is None else int(window), bins, scales, flat, lambdas,
        0 if num_splits is None else int(num_splits), stats, lse)
    if one_token:
        out, lse = out.squeeze(1), None if lse is None else lse.squeeze(1)
    return (out, lse) if return_lse else out
