"""skipsoftmax.prefill / skipsoftmax.decode: against float64 attention, the guard, statistics,
bad arguments, opcheck and torch.compile. On the CPU they run the library's reference; where a
Hopper GPU is present, the kernels against it."""

import math

import pytest
import torch

import skipsoftmax
from conftest import reference_attention, requires_hopper, sink_shaped, tolerance

DTYPES = [torch.bfloat16, torch.float16]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rand(*shape, dtype, g):
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [64, 128, 256])
def test_batched_dense_matches_float64(dtype, dim):
    g = gen(dim)
    b, s, hq, hkv = 2, 77, 4, 2  # GQA, a length no tile divides
    q, k, v = (rand(b, s, h, dim, dtype=dtype, g=g) for h in (hq, hkv, hkv))
    out = skipsoftmax.prefill(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype
    for i in range(b):
        ref = reference_attention(q[i], k[i], v[i])
        assert (out[i].double() - ref).abs().max() < tolerance(dtype)


def test_varlen_ragged_batch_non_causal_and_window():
    g = gen(1)
    dtype = torch.bfloat16
    q_lens, k_lens = [5, 130, 1, 64], [5, 300, 200, 64]
    q = rand(sum(q_lens), 8, 64, dtype=dtype, g=g)
    k = rand(sum(k_lens), 2, 64, dtype=dtype, g=g)
    v = rand(sum(k_lens), 2, 64, dtype=dtype, g=g)
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(k_lens).cumsum(0).tolist()], dtype=torch.int32)
    for causal, window in [(True, 0), (False, 0), (True, 50)]:
        out = skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                  max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens),
                                  causal=causal, window=window or None, softmax_scale=0.1)
        for i in range(len(q_lens)):
            ref = reference_attention(q[cu_q[i]:cu_q[i + 1]], k[cu_k[i]:cu_k[i + 1]],
                                      v[cu_k[i]:cu_k[i + 1]], causal=causal, scale=0.1,
                                      window=window)
            err = (out[cu_q[i]:cu_q[i + 1]].double() - ref).abs().max()
            assert err < tolerance(dtype), (causal, window, i)


def paged(k, v, lens, page_size, g, *, poison=float("nan")):
    """Packed [total, H, D] K/V of sequences `lens` scattered over shuffled pages of a pool whose
    other slots (and two spare pages) hold `poison`; returns pools and the page table."""
    pages = [-(-n // page_size) for n in lens]
    num_pages = sum(pages) + 2
    order = torch.randperm(num_pages, generator=g)
    kp = torch.full((num_pages, page_size, *k.shape[1:]), poison, dtype=k.dtype)
    vp = torch.full_like(kp, poison)
    table = torch.full((len(lens), max(pages) + 1), int(order[-1]), dtype=torch.int32)
    at, used = 0, 0
    for b, n in enumerate(lens):
        for p in range(pages[b]):
            page = int(order[used])
            used += 1
            table[b, p] = page
            rows = min(page_size, n - p * page_size)
            kp[page, :rows] = k[at + p * page_size: at + p * page_size + rows]
            vp[page, :rows] = v[at + p * page_size: at + p * page_size + rows]
        at += n
    return kp, vp, table


def test_paged_prefill_equals_contiguous_with_poisoned_slots():
    g = gen(2)
    dtype = torch.float16
    q_lens, k_lens = [40, 1, 70], [100, 33, 70]  # chunks after histories
    q = rand(sum(q_lens), 4, 128, dtype=dtype, g=g)
    k = rand(sum(k_lens), 4, 128, dtype=dtype, g=g)
    v = rand(sum(k_lens), 4, 128, dtype=dtype, g=g)
    cu_q = torch.tensor([0, 40, 41, 111], dtype=torch.int32)
    cu_k = torch.tensor([0, 100, 133, 203], dtype=torch.int32)
    kp, vp, table = paged(k, v, k_lens, 16, g)
    common = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=70, max_seqlen_k=100)
    contiguous = skipsoftmax.prefill(q, k, v, **common)
    from_pages = skipsoftmax.prefill(q, kp, vp, page_table=table, **common)
    assert torch.isfinite(from_pages).all()
    assert torch.equal(contiguous, from_pages)


@pytest.mark.parametrize("q_len", [1, 2])
def test_decode_matches_float64_with_poisoned_pages(q_len):
    g = gen(3 + q_len)
    dtype = torch.bfloat16
    lens = [q_len, 200, 65, 129]
    k = rand(sum(lens), 2, 64, dtype=dtype, g=g)
    v = rand(sum(lens), 2, 64, dtype=dtype, g=g)
    kp, vp, table = paged(k, v, lens, 32, g)
    q = rand(len(lens), q_len, 8, 64, dtype=dtype, g=g)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    out = skipsoftmax.decode(q if q_len > 1 else q[:, 0], kp, vp, table, seq_lens)
    out = out if q_len > 1 else out.unsqueeze(1)
    assert torch.isfinite(out).all()
    at = 0
    for b, n in enumerate(lens):
        ref = reference_attention(q[b], k[at:at + n], v[at:at + n])
        assert (out[b].double() - ref).abs().max() < tolerance(dtype)
        at += n


def test_skip_on_a_shaped_attention_counts_tiles_and_stays_close():
    g = gen(4)
    dtype = torch.bfloat16
    q, k, v = sink_shaped(1500, 4, 2, 128, dtype, generator=g)
    ref = reference_attention(q, k, v)
    cu = torch.tensor([0, 1500], dtype=torch.int32)
    stats = torch.zeros(1, 2, dtype=torch.int64)
    out = skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=1500,
                              max_seqlen_k=1500, scale_table=[[1024, 3.0]], stats=stats)
    visited, skipped = stats[0].tolist()
    assert visited > 0 and skipped > visited // 4  # lambda = 3 / 1500: most far tiles go
    # Each skipped weight is below lambda times the row's maximum weight.
    assert (out.double() - ref).abs().max() < 0.05
    # Statistics accumulate over calls.
    skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=1500,
                        max_seqlen_k=1500, scale_table=[[1024, 3.0]], stats=stats)
    assert stats[0].tolist() == [2 * visited, 2 * skipped]


def test_guard_and_unreachable_tables_are_exactly_dense():
    g = gen(5)
    q, k, v = sink_shaped(700, 4, 4, 64, torch.float16, generator=g)
    q, k, v = q[None], k[None], v[None]
    dense = skipsoftmax.prefill(q, k, v)
    for table in ([[4096, 3.0]], [[512, 800.0]]):  # below the first bin; S >= L
        stats = torch.zeros(1, 2, dtype=torch.int64)
        assert torch.equal(skipsoftmax.prefill(q, k, v, scale_table=table, stats=stats), dense)
        assert stats.sum() == 0  # the dense kernel ran
    assert torch.equal(skipsoftmax.prefill(q, k, v, threshold=0.0), dense)


def test_decode_skip_counts_tiles_per_sequence():
    g = gen(6)
    dtype = torch.bfloat16
    q_all, k, v = sink_shaped(3000, 8, 1, 64, dtype, generator=g)
    lens = [3000, 100]  # the second lies below the first bin: guarded, dense
    k2 = torch.cat([k, k[:100]])
    v2 = torch.cat([v, v[:100]])
    kp, vp, table = paged(k2, v2, lens, 64, g)
    q = torch.stack([q_all[-1], q_all[99]])
    stats = torch.zeros(2, 2, dtype=torch.int64)
    out = skipsoftmax.decode(q, kp, vp, table, torch.tensor(lens, dtype=torch.int32),
                             scale_table=[[2048, 3.0]], stats=stats)
    assert stats[0, 1] > 0 and stats[1, 1] == 0
    ref = reference_attention(q[1:2].unsqueeze(0)[0], k[:100], v[:100])
    assert (out[1:2].double() - ref).abs().max() < tolerance(dtype)


def test_bad_arguments_are_named():
    g = gen(7)
    q = rand(1, 64, 2, 64, dtype=torch.bfloat16, g=g)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="head_dim"):
        skipsoftmax.prefill(*(rand(1, 64, 2, 96, dtype=torch.bfloat16, g=g) for _ in range(3)))
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        skipsoftmax.prefill(q.float(), q.float(), q.float())
    with pytest.raises(TypeError, match="k is torch.float16"):
        skipsoftmax.prefill(q, q.half(), q)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="strictly increasing"):
        skipsoftmax.prefill(q, q, q, scale_table=[[4096, 1.0], [2048, 2.0]])
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="finite"):
        skipsoftmax.prefill(q, q, q, scale_table=[[4096, math.nan]])
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="lambda"):
        skipsoftmax.prefill(q, q, q, threshold=1.5)
    with pytest.raises(ValueError, match="not both"):
        skipsoftmax.prefill(q, q, q, threshold=0.1, scale_table=[[1, 1.0]])
    with pytest.raises(ValueError, match="kv_order"):
        skipsoftmax.prefill(q, q, q, kv_order="sideways")
    with pytest.raises(TypeError, match="stats must be torch.int64"):
        skipsoftmax.prefill(q, q, q, stats=torch.zeros(1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"\[1, 2\]"):
        skipsoftmax.prefill(q, q, q, stats=torch.zeros(2, 2, dtype=torch.int64))
    packed = q[0]
    cu = torch.tensor([0, 40, 30, 64], dtype=torch.int32)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="decreases"):
        skipsoftmax.prefill(packed, packed, packed, cu_seqlens_q=cu, cu_seqlens_k=cu,
                            max_seqlen_q=40, max_seqlen_k=40)
    cu = torch.tensor([0, 40, 64], dtype=torch.int32)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="longest"):
        skipsoftmax.prefill(packed, packed, packed, cu_seqlens_q=cu, cu_seqlens_k=cu,
                            max_seqlen_q=40, max_seqlen_k=30)
    kp = rand(4, 16, 2, 64, dtype=torch.bfloat16, g=g)
    table = torch.tensor([[0, 1], [2, 7]], dtype=torch.int32)
    lens = torch.tensor([20, 30], dtype=torch.int32)
    qd = rand(2, 2, 64, dtype=torch.bfloat16, g=g)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="outside the cache"):
        skipsoftmax.decode(qd, kp, kp, table, lens)
    with pytest.raises(skipsoftmax.SkipSoftmaxError, match="not the longest"):
        skipsoftmax.decode(qd, kp, kp, table.clamp(max=3), lens, max_seq_len=31)
    with pytest.raises(TypeError, match="seq_lens must be torch.int32"):
        skipsoftmax.decode(qd, kp, kp, table, lens.long())
    # Shapes the library would read past: caught before it is called.
    with pytest.raises(ValueError, match="k and v differ"):
        skipsoftmax.prefill(q, q, q[:, :32])
    with pytest.raises(ValueError, match="head dim 32, q 64"):
        skipsoftmax.prefill(packed, packed[..., :32], packed[..., :32], cu_seqlens_q=cu,
                            cu_seqlens_k=cu, max_seqlen_q=40, max_seqlen_k=40)
    with pytest.raises(ValueError, match="k_cache and v_cache differ"):
        skipsoftmax.decode(qd, kp, kp[:3], table, lens)
    with pytest.raises(ValueError, match="k_cache has head dim 32"):
        skipsoftmax.decode(qd, kp[..., :32].contiguous(), kp[..., :32].contiguous(), table, lens)
    with pytest.raises(ValueError, match="k_cache must be contiguous"):
        skipsoftmax.decode(qd, kp.transpose(0, 1), kp.transpose(0, 1), table, lens)
    with pytest.raises(ValueError, match="empty"):
        skipsoftmax.prefill(q[:, :0], q[:, :0], q[:, :0])


def test_strided_index_tensors_are_read_as_their_values():
    g = gen(12)
    q = rand(64, 2, 64, dtype=torch.bfloat16, g=g)
    cu = torch.tensor([[0, 9], [40, 9], [64, 9]], dtype=torch.int32)[:, 0]  # a strided view
    assert not cu.is_contiguous()
    out = skipsoftmax.prefill(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=40,
                              max_seqlen_k=40)
    dense = skipsoftmax.prefill(q, q, q, cu_seqlens_q=cu.contiguous(),
                                cu_seqlens_k=cu.contiguous(), max_seqlen_q=40, max_seqlen_k=40)
    assert torch.equal(out, dense)


def _prefill_args(g, per_sequence):
    q, k, v = (rand(70, h, 64, dtype=torch.bfloat16, g=g) for h in (4, 2, 2))
    cu = torch.tensor([0, 30, 70], dtype=torch.int32)
    stats = torch.zeros(2, 2, dtype=torch.int64)
    lse = torch.empty(70, 4)
    if per_sequence:
        threshold = ([], [], 0.0, torch.tensor([0.3, 0.0]))
    else:
        threshold = ([16], [2.0], 0.0, None)
    return (q, k, v, cu, cu, 40, 40, True, 0.0, 0, 2, *threshold, stats, lse)


@pytest.mark.parametrize("per_sequence", [False, True])
def test_opcheck(per_sequence):
    g = gen(8)
    torch.library.opcheck(torch.ops.skipsoftmax.prefill.default, _prefill_args(g, per_sequence))
    k = rand(70, 2, 64, dtype=torch.bfloat16, g=g)
    kp, vp, table = paged(k, k, [30, 40], 16, g)
    q, _, _, cu_q, _, *rest = _prefill_args(g, per_sequence)
    torch.library.opcheck(torch.ops.skipsoftmax.prefill_paged.default,
                          (q, kp, vp, table, cu_q, torch.tensor([0, 30, 70], dtype=torch.int32),
                           *rest))
    qd = rand(2, 1, 4, 64, dtype=torch.bfloat16, g=g)
    threshold = rest[-6:-2]
    torch.library.opcheck(torch.ops.skipsoftmax.decode.default,
                          (qd, kp, vp, table, torch.tensor([30, 40], dtype=torch.int32), 40, 0.0,
                           0, *threshold, 0, torch.zeros(2, 2, dtype=torch.int64),
                           torch.empty(2, 1, 4)))


def reference_lse(q, k, *, causal=True):
    """Natural log-sum-exp of each row and head in float64, one sequence: [Sq, Hq]."""
    q, k = q.double(), k.double()
    sq, hq, d = q.shape
    sk, hkv = k.shape[:2]
    s = torch.einsum("qhd,khd->qhk", q, k.repeat_interleave(hq // hkv, 1)) * d ** -0.5
    if causal:
        keys = torch.arange(sk)
        s = s.masked_fill(keys > torch.arange(sq)[:, None, None] + (sk - sq), float("-inf"))
    return torch.logsumexp(s, -1)


def test_lse_is_the_float64_log_sum_exp_and_merges_split_kv():
    g = gen(13)
    dtype = torch.bfloat16
    q, k, v = (rand(1, n, h, 64, dtype=dtype, g=g) for n, h in ((50, 4), (300, 2), (300, 2)))
    out, lse = skipsoftmax.prefill(q, k, v, return_lse=True)
    assert lse.shape == (1, 50, 4) and lse.dtype == torch.float32
    assert (lse[0].double() - reference_lse(q[0], k[0])).abs().max() < 1e-5
    # Keys [0, 128) and [128, 300) attended apart (non-causal) merge into the whole.
    whole, lse_whole = skipsoftmax.prefill(q, k, v, causal=False, return_lse=True)
    a, lse_a = skipsoftmax.prefill(q, k[:, :128], v[:, :128], causal=False, return_lse=True)
    b, lse_b = skipsoftmax.prefill(q, k[:, 128:], v[:, 128:], causal=False, return_lse=True)
    merged_lse = torch.logaddexp(lse_a, lse_b)
    merged = (torch.exp(lse_a - merged_lse)[..., None] * a.float()
              + torch.exp(lse_b - merged_lse)[..., None] * b.float())
    assert (merged_lse - lse_whole).abs().max() < 1e-5
    assert (merged - whole.float()).abs().max() < tolerance(dtype)
    # Decode: the splits' combine gives the whole row's.
    lens = [300, 77]
    kk = torch.cat([k[0], k[0, :77]])
    kp, vp, table = paged(kk, kk, lens, 32, g)
    qd = torch.stack([q[0, -1], q[0, 5]])
    for splits in (1, 3):
        _, lse_d = skipsoftmax.decode(qd, kp, vp, table, torch.tensor(lens, dtype=torch.int32),
                                      num_splits=splits, return_lse=True)
        assert lse_d.shape == (2, 4)
        for i, n in enumerate(lens):
            ref = reference_lse(qd[i:i + 1], kk[:n] if i == 0 else kk[300:300 + n])
            assert (lse_d[i].double() - ref[0]).abs().max() < 1e-5


def test_a_threshold_tensor_gives_each_sequence_its_lambda():
    g = gen(14)
    dtype = torch.bfloat16
    qs, ks, vs = zip(*(sink_shaped(n, 4, 2, 64, dtype, generator=g) for n in (1500, 900, 700)))
    cu = torch.tensor([0, 1500, 2400, 3100], dtype=torch.int32)
    q, k, v = torch.cat(qs), torch.cat(ks), torch.cat(vs)
    lambdas = torch.tensor([0.01, 0.0, float("nan")])
    stats = torch.zeros(3, 2, dtype=torch.int64)
    out = skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, threshold=lambdas,
                              stats=stats)
    assert stats[0, 1] > 0 and stats[1:, 1].sum() == 0
    for i, lam in enumerate(lambdas.tolist()):
        alone = skipsoftmax.prefill(qs[i][None], ks[i][None], vs[i][None],
                                    threshold=lam if i == 0 else None)
        assert torch.equal(out[cu[i]:cu[i + 1]], alone[0])
    # Decode takes the same tensor: one lambda per request.
    lens = [1500, 900]
    kp, vp, table = paged(torch.cat(ks[:2]), torch.cat(vs[:2]), lens, 64, g)
    qd = torch.stack([qs[0][-1], qs[1][-1]])
    dstats = torch.zeros(2, 2, dtype=torch.int64)
    skipsoftmax.decode(qd, kp, vp, table, torch.tensor(lens, dtype=torch.int32),
                       threshold=torch.tensor([0.0, 0.05]), stats=dstats)
    assert dstats[0, 1] == 0 and dstats[1, 1] > 0
    with pytest.raises(ValueError, match=r"float32 \[batch\] = \[3\]"):
        skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, threshold=lambdas[:2])
    with pytest.raises(TypeError, match="threshold must be torch.float32"):
        skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, threshold=lambdas.double())
    with pytest.raises(ValueError, match="not both"):
        skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, threshold=lambdas,
                            scale_table=[[1, 1.0]])


def test_compiles_without_graph_breaks():
    g = gen(9)
    q, k, v = sink_shaped(600, 4, 2, 64, torch.bfloat16, generator=g)
    q, k, v = q[None], k[None], v[None]

    def attend(q, k, v, stats):
        return skipsoftmax.prefill(q, k, v, scale_table=[[256, 2.0]], stats=stats) * 2

    eager_stats = torch.zeros(1, 2, dtype=torch.int64)
    compiled_stats = torch.zeros(1, 2, dtype=torch.int64)
    eager = attend(q, k, v, eager_stats)
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")(q, k, v, compiled_stats)
    assert torch.equal(eager, compiled)
    assert torch.equal(eager_stats, compiled_stats) and eager_stats[0, 1] > 0


@requires_hopper
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_prefill_makes_the_reference_decisions(dtype):
    g = gen(10)
    q, k, v = sink_shaped(5000, 8, 2, 128, dtype, generator=g)
    cu = torch.tensor([0, 5000], dtype=torch.int32)
    args = dict(max_seqlen_q=5000, max_seqlen_k=5000, scale_table=[[4096, 8.0]])
    cpu_stats = torch.zeros(1, 2, dtype=torch.int64)
    cpu = skipsoftmax.prefill(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, stats=cpu_stats, **args)
    gpu_stats = cpu_stats.new_zeros(1, 2).cuda()
    gpu = skipsoftmax.prefill(q.cuda(), k.cuda(), v.cuda(), cu_seqlens_q=cu.cuda(),
                              cu_seqlens_k=cu.cuda(), stats=gpu_stats, **args)
    assert gpu_stats[0, 0].item() == cpu_stats[0, 0].item()
    assert abs(gpu_stats[0, 1].item() - cpu_stats[0, 1].item()) <= max(1, cpu_stats[0, 0] // 200)
    assert (gpu.cpu().double() - cpu.double()).abs().max() < 2 * tolerance(dtype)


@requires_hopper
def test_gpu_decode_in_a_cuda_graph_replays_new_inputs():
    g = gen(11)
    dtype = torch.bfloat16
    q_all, k, v = sink_shaped(4096, 8, 2, 128, dtype, generator=g)
    kp, vp, table = paged(k, v, [4096], 64, g)
    kp, vp, table = kp.cuda(), vp.cuda(), table.cuda()
    lens = torch.tensor([4096], dtype=torch.int32, device="cuda")
    q = q_all[-1:].cuda().clone()
    stats = torch.zeros(1, 2, dtype=torch.int64, device="cuda")
    call = lambda: skipsoftmax.decode(q, kp, vp, table, lens, max_seq_len=4096, num_splits=4,
                                      scale_table=[[2048, 3.0]], stats=stats)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        call()  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    q.copy_(q_all[-2:-1].cuda())
    stats.zero_()
    graph.replay()
    torch.cuda.synchronize()
    eager = skipsoftmax.decode(q, kp, vp, table, lens, max_seq_len=4096, num_splits=4,
                               scale_table=[[2048, 3.0]])
    assert torch.equal(out, eager)
    assert stats[0, 1].item() > 0


@requires_hopper
def test_gpu_lse_and_per_request_lambdas_replay_in_a_cuda_graph():
    g = gen(15)
    dtype = torch.bfloat16
    q_all, k, v = sink_shaped(4096, 8, 2, 128, dtype, generator=g)
    kp, vp, table = paged(torch.cat([k, k]), torch.cat([v, v]), [4096, 4096], 64, g)
    kp, vp, table = kp.cuda(), vp.cuda(), table.cuda()
    lens = torch.tensor([4096, 4096], dtype=torch.int32, device="cuda")
    q = q_all[-2:].cuda().clone()
    lambdas = torch.tensor([0.0, 0.0], device="cuda")
    stats = torch.zeros(2, 2, dtype=torch.int64, device="cuda")
    call = lambda: skipsoftmax.decode(q, kp, vp, table, lens, max_seq_len=4096, num_splits=4,
                                      threshold=lambdas, stats=stats, return_lse=True)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = call()
    for new in ([0.0, 0.0], [0.02, 0.0], [0.0, 0.02]):
        lambdas.copy_(torch.tensor(new))
        stats.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert [s > 0 for s in stats[:, 1].tolist()] == [x > 0 for x in new]
        cpu_out, cpu_lse = skipsoftmax.decode(q.cpu(), kp.cpu(), vp.cpu(), table.cpu(), lens.cpu(),
                                              num_splits=4, threshold=lambdas.cpu(),
                                              return_lse=True)
        assert (out.cpu().double() - cpu_out.double()).abs().max() < 2 * tolerance(dtype)
        assert (lse.cpu() - cpu_lse).abs().max() < 1e-3
