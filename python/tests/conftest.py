import pytest
import torch


def hopper_available() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


requires_hopper = pytest.mark.skipif(not hopper_available(), reason="needs a Hopper GPU (sm_90)")


def reference_attention(q, k, v, *, causal=True, scale=None, window=0):
    """Dense attention in float64, one sequence: q [Sq, Hq, D], k and v [Sk, Hkv, D]; causal is
    bottom-right aligned, window W keeps each query's last W keys."""
    q, k, v = q.double(), k.double(), v.double()
    sq, hq, d = q.shape
    sk, hkv = k.shape[:2]
    k = k.repeat_interleave(hq // hkv, 1)
    v = v.repeat_interleave(hq // hkv, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * (d ** -0.5 if scale is None else scale)
    if causal:
        pos = torch.arange(sq).unsqueeze(1) + (sk - sq)
        keys = torch.arange(sk).unsqueeze(0)
        mask = keys <= pos
        if window:
            mask &= keys > pos - window
        s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


def tolerance(dtype) -> float:
    # One rounding of outputs of magnitude <= 4 to the dtype, plus float32 accumulation.
    return 4 * 2.0 ** -8 if dtype == torch.bfloat16 else 4 * 2.0 ** -11


def sink_shaped(seq, heads_q, heads_kv, dim, dtype, *, sink=16, generator=None):
    """Q/K whose attention is A-shaped, as in trained models: every query attends strongly to the
    first `sink` keys and weakly elsewhere, so that far tiles fall below small lambdas."""
    g = generator
    u = torch.randn(dim, generator=g)
    u = u / u.norm()
    # Sink logits about 12 above the rest after the 1 / sqrt(dim) scale.
    a = (12.0 * dim ** 0.5) ** 0.5
    q = 0.5 * torch.randn(seq, heads_q, dim, generator=g) + a * u
    k = 0.5 * torch.randn(seq, heads_kv, dim, generator=g)
    k[:sink] += a * u
    v = torch.randn(seq, heads_kv, dim, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)
