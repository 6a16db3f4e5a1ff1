#!/usr/bin/env python3
"""How many skip decisions a per-tile bound from K's channel extremes proves. No GPU needed.

The keys of a box (a run of consecutive keys) lie in [kmin, kmax], taken channel by channel, so
every row q has q . k <= q+ . kmax + q- . kmin for each of them (q+ = max(q, 0), q- = min(q, 0)):
one product of 2d per row and box, 1/64 of a 128-key tile's Q K^T. A tile is proven skipped when,
for every row of its 64-row slice, the largest bound of the boxes it holds lies below
m_run + ln(lambda), with m_run the exact running maximum that the kernels' sink-reverse visit
has at that tile. The exact rule skips every such tile, so a kernel could drop its Q K^T and keep
its decisions. This counts, per lambda and box size, the share of visited tiles that the bound
proves, beside the share that the exact rule skips.

Inputs and options as certified_vote_study.py (beside it) takes them: the benchmarks'
real-structure recipe, or with --inputs a capture with its manifest.json (`skipsoftmax capture`),
bf16-rounded. Writes JSON with --json.

  python3 bench/studies/box_bound_study.py --lambdas 1e-3 3e-3 1e-2
  python3 bench/studies/box_bound_study.py --inputs CAPTURE_DIR --layers 15 25 --lambdas 1e-2
"""
import argparse

import numpy as np

from certified_vote_study import (add_study_options, exact_visits, proves, study_inputs,
                                  write_study)

BOXES = (128, 64, 32, 16)


def box_bounds(q, k, box, scale):
    """[rows, boxes]: the largest score each row can have against the keys of each box."""
    n_boxes = (len(k) + box - 1) // box
    kmax = np.stack([k[b * box:(b + 1) * box].max(0) for b in range(n_boxes)])
    kmin = np.stack([k[b * box:(b + 1) * box].min(0) for b in range(n_boxes)])
    return (np.maximum(q, 0) @ kmax.T + np.minimum(q, 0) @ kmin.T) * scale


def count(q, k, lam, rows, block_n, scale, boxes=BOXES):
    """Visited tiles, exactly skipped, and per box size the tiles its bound proves skipped."""
    bounds = {b: box_bounds(q, k, b, scale) for b in boxes}
    visited = skipped = 0
    proven = {b: 0 for b in boxes}
    for r0, r1, t, seen, none, m, gap, skip in exact_visits(q, k, lam, rows, block_n, scale):
        k0, k1 = t * block_n, t * block_n + seen.shape[1]
        for b in boxes:
            hi = bounds[b][r0:r1, k0 // b:(k1 + b - 1) // b].max(1)
            proven[b] += proves(hi, m, gap, none, skip, f"boxes of {b}, rows {r0}-{r1}, tile {t}")
        visited += 1
        skipped += skip
    return visited, skipped, proven


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_options(p)
    args = p.parse_args()
    cases, source, rows, block_n = study_inputs(p, args)
    results = []
    for lam in args.lambdas:
        row = {"lambda": lam, "visited": 0, "skipped": 0, "proven": {str(b): 0 for b in BOXES}}
        for _, q, k, _, scale in cases:
            visited, skipped, proven = count(q, k, lam, rows, block_n, scale)
            row["visited"] += visited
            row["skipped"] += skipped
            for b in BOXES:
                row["proven"][str(b)] += proven[b]
        results.append(row)
        shares = ", ".join(f"boxes of {b} {100 * row['proven'][str(b)] / row['visited']:.1f}%"
                           for b in BOXES)
        print(f"  lambda {lam:g}: exact skip {100 * row['skipped'] / row['visited']:.1f}% | "
              f"proven: {shares}", flush=True)
    write_study(args, cases, source, rows, block_n, results)


if __name__ == "__main__":
    main()
