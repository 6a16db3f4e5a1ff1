#!/usr/bin/env python3
"""A CPU model of a one-wave decode skip launch: how much longer than a perfectly balanced one it
takes when its CTAs carry unequal work. No GPU needed.

The cache holds the real-structure inputs of the decode benchmark (bench/compare_sdpa.py's
`structured`: an attention sink, a rotary-like band, a Gaussian far field; same recipe, numpy's
random stream). For every (sequence, KV head, split) the vote is taken as reference_decode takes
it (tiles of 64 keys, forward order, every split after the first seeded by tile 0's row maxima),
and the CTA's work is counted in tile loads of 16 KB at head dim 128: its K tiles, the sink's K
once more, and the V of its kept tiles.

The launch is then played out: all CTAs start together (one wave), the active ones share the
bandwidth equally, and none goes faster than --rate-cap times its share in the full wave (a CTA
alone is bound by its own latency: run 101 timed a lone CTA at 0.98 us a dense tile and 0.60 us a
skipped one, about twice its share in a batch-1 wave). With --chunks F each split is cut into F
chunks of its own vote, and the (sequence, head)'s CTAs take chunks as they finish (--scope head)
or any CTA takes any chunk (--scope all), each chunk costing --chunk-cost tile loads more. With
--per-head proportional the launch's CTAs are shared out among the (sequence, head)s in
proportion to their loads at equal splits, as a launch could plan them from an earlier step's
statistics or a calibration's per-head sparsity (the model knows the loads exactly: a bound).

  python3 bench/studies/decode_balance_model.py --batch 2 --length 32768 --splits 16 --lambda 1e-3
"""
import argparse
import math

import numpy as np

TILE = 64


def structured(rng, positions, heads, dim, role, sink=12.0, band=8.0, noise=0.75):
    """[len(positions), heads, dim] rows of the benchmark's real-structure recipe: a numpy copy of
    bench/compare_sdpa.py's `structured`, which draws with torch on the GPU (keep them alike)."""
    n = len(positions)
    pairs = max(1, dim // 8)
    first_noise = min(dim, 1 + 2 * pairs)
    root = math.sqrt(dim)
    x = np.empty((n, heads, dim), np.float32)
    noise_std = math.sqrt(noise * root / math.sqrt(max(1, dim - first_noise)))
    x[:, :, first_noise:] = noise_std * rng.standard_normal((n, heads, dim - first_noise),
                                                            dtype=np.float32)
    sink_amp = math.sqrt(sink * root)
    x[:, :, 0] = sink_amp if role == "q" else ((positions == 0) * sink_amp)[:, None]
    band_amp = math.sqrt(band * root / pairs)
    for f in range(pairs):
        if 2 + 2 * f >= first_noise:
            break
        phase = 2 * math.pi * positions / (64.0 * 64.0 ** (f / pairs))
        x[:, :, 1 + 2 * f] = band_amp * np.cos(phase)[:, None]
        x[:, :, 2 + 2 * f] = band_amp * np.sin(phase)[:, None]
    return x


def tile_maxima(args):
    """Per (sequence, KV head): the [g, n_tiles] row maxima of the scores' tiles."""
    rng = np.random.default_rng(args.seed)
    g = args.heads_q // args.heads_kv
    n_tiles = (args.length + TILE - 1) // TILE
    maxima = []
    for _ in range(args.batch):
        pos = np.arange(args.length)
        k = structured(rng, pos, args.heads_kv, args.head_dim, "k")
        q = structured(rng, np.array([args.length - 1]), args.heads_q, args.head_dim, "q")[0]
        for h in range(args.heads_kv):
            s = (k[:, h, :] @ q[h * g:(h + 1) * g].T).T / math.sqrt(args.head_dim)
            pad = n_tiles * TILE - args.length
            s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
            maxima.append(s.reshape(g, n_tiles, TILE).max(2))
    return maxima


def range_costs(tile_max, parts, gap):
    """The tile loads of each of `parts` vote ranges of one (sequence, KV head), in order."""
    g, n_tiles = tile_max.shape
    per = (n_tiles + parts - 1) // parts
    costs = []
    for c in range(parts):
        begin, end = min(per * c, n_tiles), min(per * c + per, n_tiles)
        m = tile_max[:, 0].copy() if begin > 0 else np.full(g, -np.inf)
        kept = 0
        for t in range(begin, end):
            mx = tile_max[:, t]
            skip = bool(np.all(mx - np.maximum(m, mx) < gap))
            m = np.maximum(m, mx)
            kept += not skip
        costs.append((end - begin) + kept + (1 if begin > 0 else 0))
    return costs


def proportional_splits(loads, n_ctas):
    """Splits per (sequence, head), at least one each, summing to n_ctas, in proportion to their
    loads (largest remainders)."""
    total = sum(loads)
    want = [max(1.0, n_ctas * x / total) for x in loads]
    splits = [int(w) for w in want]
    order = sorted(range(len(loads)), key=lambda i: want[i] - splits[i], reverse=True)
    for i in order[:max(0, n_ctas - sum(splits))]:
        splits[i] += 1
    return splits


def play(workers, queues, cap, chunk_cost):
    """Time until every chunk is done, in units of one tile load at a CTA's share of the full
    wave. workers: [(queue index, cost of its first chunk)]; queues: the chunk costs left."""
    total_rate = float(len(workers))  # tile loads per unit time, all CTAs together
    left = [cost for _, cost in workers]
    owner = [q for q, _ in workers]
    t = 0.0
    while left:
        rate = min(total_rate / len(left), cap)
        dt = min(left) / rate
        t += dt
        nl, no = [], []
        for x, q in zip(left, owner):
            x -= rate * dt
            if x <= 1e-9:
                if queues[q]:
                    nl.append(queues[q].pop(0) + chunk_cost)
                    no.append(q)
            else:
                nl.append(x)
                no.append(q)
        left, owner = nl, no
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=32768)
    p.add_argument("--heads-q", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--splits", type=int, default=16, help="CTAs per (sequence, KV head)")
    p.add_argument("--lambda", dest="lam", type=float, default=1e-3)
    p.add_argument("--rate-cap", type=float, nargs="+", default=[2.0, 4.0],
                   help="a lone CTA's speed over its share in the full wave")
    p.add_argument("--chunks", type=int, default=1, help="vote ranges per split (1: none)")
    p.add_argument("--scope", choices=["head", "all"], default="head")
    p.add_argument("--chunk-cost", type=float, default=1.0,
                   help="tile loads a chunk costs beyond its own (its partial output, drain)")
    p.add_argument("--per-head", choices=["equal", "proportional"], default="equal",
                   help="splits per (sequence, head): equal, or in proportion to its load")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not 0 < args.lam < 1:
        p.error("--lambda must lie in (0, 1)")
    gap = math.log(args.lam)
    maxima = tile_maxima(args)
    groups = [range_costs(m, args.splits * args.chunks, gap) for m in maxima]
    n_ctas = len(groups) * args.splits
    total = sum(map(sum, groups))
    print(f"{args.batch} x {args.length}, {args.splits} splits x {args.chunks} chunks, "
          f"lambda {args.lam:g}: {n_ctas} CTAs, {total} tile loads; per (sequence, head) the "
          f"most loaded carries {max(map(sum, groups)) / (total / len(groups)):.3f}x the mean")
    splits = [args.splits] * len(groups)
    if args.per_head == "proportional":
        # Each (sequence, head) gets splits in proportion to its load at equal splits, as a
        # launch could plan from an earlier step's statistics; the same CTAs in all.
        splits = proportional_splits([sum(c) for c in groups], n_ctas)
        groups = [range_costs(m, s * args.chunks, gap) for m, s in zip(maxima, splits)]
        total = sum(map(sum, groups))
        print(f"  splits per (sequence, head) in proportion to its load: {min(splits)} to "
              f"{max(splits)}, {total} tile loads")
    extra = args.chunk_cost if args.chunks > 1 else 0.0  # what each chunk costs beyond its loads
    for cap in args.rate_cap:
        if args.scope == "head":
            queues = [list(c) for c in groups]
            workers = [(qi, q.pop(0) + extra) for qi, q in enumerate(queues)
                       for _ in range(min(splits[qi], len(q)))]
        else:
            queues = [[c for costs in groups for c in costs]]
            workers = [(0, queues[0].pop(0) + extra)
                       for _ in range(min(n_ctas, len(queues[0])))]
        t = play(workers, queues, cap, extra)
        ideal = total / n_ctas
        print(f"  rate cap {cap:g}: {t:.1f} units against {ideal:.1f} balanced "
              f"({t / ideal:.3f}x)")


if __name__ == "__main__":
    main()
