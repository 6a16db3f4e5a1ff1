"""Hugging Face transformers integration: ``attn_implementation="skipsoftmax"``.

    import skipsoftmax.transformers
    skipsoftmax.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="skipsoftmax",
                                                 dtype=torch.bfloat16, device_map="cuda")
    model.generate(...)
    skipsoftmax.transformers.tile_stats(model)  # {layer: {"prefill": (visited, skipped), ...}}

The thresholds come from the model's config.json, the keys the C++ engine reads:
``skip_softmax_prefill_scale_table`` and ``skip_softmax_decode_scale_table`` (``[[seqlen_bin,
S], ...]``; absent or null: dense). A phase without its key reads ModelOpt's
``sparse_attention_config`` (its skip_softmax group, as TensorRT-LLM does): S = a * exp(b * t) at
the block's target sparsity t for that phase, lambda = S / L at every length, and the attention
modules its ``ignore`` patterns match (``model.layers.<i>.self_attn``) stay dense. Steps with several new tokens per sequence (prefill, chunked
prefill) take the prefill table and the prefill kernel; steps of one new token take the decode
table and the paged decode kernel. Sliding-window layers (Gemma's local layers) stay dense.

Transformers keeps the KV cache as [B, Hkv, L, D] tensors, so each step copies K and V into the
kernels' token-major layout (a decode step also into pages of PAGE_SIZE tokens); an engine with a
paged cache calls skipsoftmax.decode on it directly. A padded batch runs the varlen prefill
kernel over its packed tokens in both phases (reading the longest length from the device, as
transformers' flash-attention path does). Masks beyond (sliding) causal (packed sequences,
bidirectional overlays, a static cache) and logit soft-capping are refused with
NotImplementedError.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Optional

import torch

from . import ops

NAME = "skipsoftmax"
PAGE_SIZE = 64
PREFILL_TABLE_KEY = "skip_softmax_prefill_scale_table"
DECODE_TABLE_KEY = "skip_softmax_decode_scale_table"
PHASES = ("prefill", "decode")
_MAX_DECODE_ROWS = 16  # the decode kernel's q_len x (Hq / Hkv) limit


def register(name: str = NAME) -> None:
    """Registers the attention function and its mask function (none for an unpadded batch)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    def mask(*args, allow_is_causal_skip: bool = True, **kwargs):
        # transformers clears allow_is_causal_skip whenever the mask is more than causal or
        # sliding-window causal: packed sequences, bidirectional overlays (Gemma 3's image
        # tokens), a static cache's decode. The kernels would attend across such boundaries.
        if not allow_is_causal_skip:
            raise NotImplementedError(
                "skipsoftmax attention runs causal and sliding-window masks over a dynamic cache; "
                "this call needs another mask (packed sequences, a bidirectional overlay or a "
                "static cache): use attn_implementation='sdpa' for it")
        return flash_attention_mask(*args, **kwargs)

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, mask)


def _table(config, key: str):
    table = getattr(config, key, None)
    if table is None or (isinstance(table, (list, tuple)) and not table):
        return None  # absent, null, or [] (a calibration that deploys dense)
    if not isinstance(table, (list, tuple)):
        raise ValueError(f"config {key} must be [[seqlen_bin, S], ...] or null, got {table!r}")
    return [tuple(row) for row in table]


MODELOPT_KEY = "sparse_attention_config"
_MODELOPT_FORMULA = "a*exp(b*target_sparsity)"


def _modelopt_curves(block) -> tuple[dict, list]:
    """{phase: S at the block's target} and the ignore patterns of a ModelOpt block (the
    skip_softmax group of config_groups, or the fields at the top level)."""
    where = MODELOPT_KEY
    if not isinstance(block, dict):
        raise ValueError(f"config {where} must be an object, got {type(block).__name__}")
    body = block
    if "config_groups" in block:
        groups = [(name, g) for name, g in block["config_groups"].items()
                  if isinstance(g, dict) and g.get("algorithm") == "skip_softmax"]
        if len(groups) > 1:
            raise ValueError(f"config {where}: two skip_softmax groups")
        if not groups:
            return {}, []
        name, body = groups[0]
        where = f"{where}.config_groups.{name}"
    scales = {}
    tsf = body.get("threshold_scale_factor")
    if tsf is not None:
        if not isinstance(tsf, dict) or "".join(str(tsf.get("formula")).split()) != \
                _MODELOPT_FORMULA:
            raise ValueError(f"config {where}.threshold_scale_factor: the formula must be "
                             f"a * exp(b * target_sparsity)")
        targets = body.get("target_sparsity")
        for phase in PHASES:
            curve = tsf.get(phase, tsf.get("coefficients"))
            target = targets.get(phase) if isinstance(targets, dict) else targets
            if curve is None or target is None:
                continue
            a, b, t = float(curve["a"]), float(curve["b"]), float(target)
            if not (a > 0 and math.isfinite(b) and 0 <= t <= 1):
                raise ValueError(f"config {where}: {phase} needs a > 0, a finite b and a target "
                                 f"in [0, 1], got a={a}, b={b}, target={t}")
            scales[phase] = a * math.exp(b * t)
    ignore = body.get("ignore", [])
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise ValueError(f"config {where}.ignore must be a list of fnmatch patterns")
    return scales, ignore


def _ignored(patterns: list, layer) -> bool:
    if layer is None:
        return False
    names = [f"model.layers.{layer}.self_attn", f"layers.{layer}.self_attn",
             f"model.layers.{layer}.attention", f"layers.{layer}.attention"]
    return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names)


def _tables(config, layer) -> tuple:
    """(prefill table, decode table) of a layer: the engine's keys, else the ModelOpt block."""
    own = (_table(config, PREFILL_TABLE_KEY), _table(config, DECODE_TABLE_KEY))
    block = getattr(config, MODELOPT_KEY, None)
    if block is None or all(t is not None for t in own):
        return own
    scales, ignore = _modelopt_curves(block)
    if _ignored(ignore, layer):
        return own
    return tuple(t if t is not None else ([(1, scales[ph])] if ph in scales else None)
                 for t, ph in zip(own, PHASES))


def _add_stats(module: torch.nn.Module, phase: int, per_sequence: torch.Tensor) -> None:
    buf = getattr(module, "_skipsoftmax_stats", None)
    if buf is None or buf.device != per_sequence.device:
        # A normal tensor even under torch.inference_mode() (generate's), so that it can be read
        # and reset outside it.
        with torch.inference_mode(False):
            buf = torch.zeros(len(PHASES), 2, dtype=torch.int64, device=per_sequence.device)
        module._skipsoftmax_stats = buf
    buf[phase] += per_sequence.sum(0)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                      dropout: float = 0.0, scaling: Optional[float] = None,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs):
    """query [B, Hq, Sq, D], key and value [B, Hkv, Sk, D] (the cache included) -> ([B, Sq, Hq,
    D], None), as transformers' attention functions."""
    if attention_mask is not None and attention_mask.dim() != 2:
        raise NotImplementedError(
            f"skipsoftmax attention takes a 2-D padding mask, got shape "
            f"{tuple(attention_mask.shape)}")
    if softcap is not None:
        raise NotImplementedError("skipsoftmax attention has no logit soft-capping")
    if dropout and module.training:
        raise NotImplementedError("skipsoftmax attention is for inference: no dropout")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    config = getattr(module, "config", None)
    window = int(sliding_window) if sliding_window else None
    prefill_table, decode_table = (None, None) if window else \
        _tables(config, getattr(module, "layer_idx", None))

    q = query.transpose(1, 2)  # [B, Sq, Hq, D]
    k = key.transpose(1, 2)    # [B, Sk, Hkv, D]
    v = value.transpose(1, 2)
    batch, q_len, heads_q, _ = q.shape
    kv_len, heads_kv = k.shape[1], k.shape[2]
    stats = torch.zeros(batch, 2, dtype=torch.int64, device=q.device)
    if attention_mask is not None:
        return _padded(module, q, k, v, attention_mask.bool(), causal, scaling, window,
                       decode_table if q_len == 1 else prefill_table, stats), None
    if q_len == 1 and causal and heads_q // heads_kv <= _MAX_DECODE_ROWS:
        pages = -(-kv_len // PAGE_SIZE)
        k_pages = k.new_empty(batch * pages * PAGE_SIZE, heads_kv, k.shape[3])
        v_pages = torch.empty_like(k_pages)
        k_pages.view(batch, pages * PAGE_SIZE, heads_kv, -1)[:, :kv_len] = k
        v_pages.view(batch, pages * PAGE_SIZE, heads_kv, -1)[:, :kv_len] = v
        page_table = torch.arange(batch * pages, dtype=torch.int32,
                                  device=q.device).view(batch, pages)
        seq_lens = torch.full((batch,), kv_len, dtype=torch.int32, device=q.device)
        out = ops.decode(q, k_pages.view(-1, PAGE_SIZE, heads_kv, k.shape[3]),
                         v_pages.view(-1, PAGE_SIZE, heads_kv, k.shape[3]), page_table, seq_lens,
                         max_seq_len=kv_len, softmax_scale=scaling, window=window,
                         scale_table=decode_table, stats=stats)
        _add_stats(module, 1, stats)
    else:
        out = ops.prefill(q, k, v, causal=causal, softmax_scale=scaling, window=window,
                          scale_table=prefill_table, stats=stats)
        _add_stats(module, 0, stats)
    return out, None


def _padded(module, q, k, v, keep, causal, scaling, window, table, stats) -> torch.Tensor:
    """A padded batch (keep: [B, Sk], False at padding, as transformers' flash masks give it)
    through the varlen prefill kernel: its tokens packed, each sequence bottom-right aligned.
    The maximum lengths are read from the device (a host synchronisation, as in transformers'
    own flash-attention path); padded query rows come out zero."""
    batch, q_len = q.shape[:2]
    keep_q = keep[:, -q_len:]
    lens_q = keep_q.sum(1, dtype=torch.int32)
    lens_k = keep.sum(1, dtype=torch.int32)
    zero = lens_q.new_zeros(1)
    cu_q = torch.cat([zero, lens_q.cumsum(0, dtype=torch.int32)])
    cu_k = torch.cat([zero, lens_k.cumsum(0, dtype=torch.int32)])
    out_packed = ops.prefill(q[keep_q], k[keep], v[keep], cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                             max_seqlen_q=int(lens_q.max()), max_seqlen_k=int(lens_k.max()),
                             causal=causal, softmax_scale=scaling, window=window,
                             scale_table=table, stats=stats)
    out = q.new_zeros(q.shape)
    out[keep_q] = out_packed
    _add_stats(module, 1 if q_len == 1 else 0, stats)
    return out


def tile_stats(model: torch.nn.Module) -> dict:
    """Tiles visited and skipped by skip launches since the last reset, per layer and phase:
    {layer: {"prefill": (visited, skipped), "decode": (visited, skipped)}}. Dense launches (no
    table, a length below the first bin, sliding layers) count nothing. Reads the device."""
    out = {}
    for name, m in model.named_modules():
        buf = getattr(m, "_skipsoftmax_stats", None)
        if buf is None:
            continue
        layer = getattr(m, "layer_idx", name)
        counts = buf.tolist()
        out[layer] = {phase: (counts[i][0], counts[i][1]) for i, phase in enumerate(PHASES)}
    return out


def reset_tile_stats(model: torch.nn.Module) -> None:
    for m in model.modules():
        buf = getattr(m, "_skipsoftmax_stats", None)
        if buf is not None:
            buf.zero_()
