#!/usr/bin/env python3
"""What a dense prefix would give the prefill voting loop: a CPU estimate. No GPU needed.

A kept tile costs the voting loop more than the dense loop (1.12 of a dense tile, fitted at 32k),
and sink-reverse visits the sink and the diagonal, the tiles most often kept, first. So a kernel
could run the first D positions of each slice's visit through the dense loop without a vote and
switch to the voting loop after them. The decisions after the prefix stay the rule's: a tile the
rule would skip has its maximum below m_run + ln(lambda) < m_run, so keeping it leaves m_run as it
was. The prefix only loses the skips the rule would have taken inside it.

This counts, per lambda, where the kept tiles lie (the share in each slice's leading run of kept
positions) and prices each slice in the fitted cost model, with fixed prefixes and with each
slice's own leading run (the best any rule for the prefix could do): a skipped voting tile `--skipped-cost`,
a kept one `--kept-cost`, a dense-loop tile 1, and `--switch-cost` for each slice that changes
loops. The speedup is over the dense kernel (every tile at 1), as the kernel benchmarks report it.

Inputs and options as certified_vote_study.py (beside it) takes them: the benchmarks'
real-structure recipe, or with --inputs a capture with its manifest.json, bf16-rounded. Writes
JSON with --json.

  python3 bench/studies/dense_prefix_study.py --length 32768 --lambdas 1e-3 3e-3 1e-2
  python3 bench/studies/dense_prefix_study.py --inputs CAPTURE_DIR --lambdas 1e-2 3e-2 1e-1
"""
import argparse
import itertools

import numpy as np

from certified_vote_study import add_study_options, exact_visits, study_inputs, write_study


def slice_verdicts(q, k, lam, rows, block_n, scale):
    """Per sampled 64-row slice, its verdicts (True: skipped) in sink-reverse visit order."""
    visits = exact_visits(q, k, lam, rows, block_n, scale)
    return [np.array([v[7] for v in group], bool)
            for _, group in itertools.groupby(visits, key=lambda v: v[0])]


def slice_cost(skipped, prefix, skipped_cost, kept_cost, switch_cost):
    """A slice's time in dense tiles with `prefix` positions run by the dense loop (0: none).
    The voting loop's first position is always kept (nothing to compare with yet)."""
    n = len(skipped)
    rest = skipped[prefix:]
    switch = switch_cost if 0 < prefix < n else 0.0
    return (min(prefix, n) + switch + skipped_cost * rest.sum()
            + kept_cost * (len(rest) - rest.sum()))


def leading_kept(skipped):
    """Kept positions before the slice's first skipped one."""
    return int(np.argmax(skipped)) if skipped.any() else len(skipped)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_options(p)
    p.add_argument("--prefixes", type=int, nargs="+", default=[2, 3, 4],
                   help="dense-prefix lengths to price (positions)")
    p.add_argument("--skipped-cost", type=float, default=0.45,
                   help="a skipped voting tile, in dense tiles (fits at 32k: 0.43-0.48)")
    p.add_argument("--kept-cost", type=float, default=1.12,
                   help="a kept voting tile, in dense tiles (fit at 32k, run 125)")
    p.add_argument("--switch-cost", type=float, default=0.3,
                   help="changing loops once a slice, in dense tiles (an assumption)")
    args = p.parse_args()
    if any(d < 1 for d in args.prefixes):
        p.error("--prefixes must be >= 1")
    costs = (args.skipped_cost, args.kept_cost, args.switch_cost)
    if any(c < 0 for c in costs):
        p.error("the costs must be >= 0")
    cases, source, rows, block_n = study_inputs(p, args)
    results = []
    for lam in args.lambdas:
        slices = [v for _, q, k, _, scale in cases
                  for v in slice_verdicts(q, k, lam, rows, block_n, scale)]
        visited = sum(len(v) for v in slices)
        skipped = sum(int(v.sum()) for v in slices)
        kept = visited - skipped
        lead = sum(leading_kept(v) for v in slices)
        now = sum(slice_cost(v, 0, *costs) for v in slices)
        # The best any prefix rule could do: each slice's own leading run, known in advance.
        oracle = sum(slice_cost(v, leading_kept(v), *costs) for v in slices)
        row = {"lambda": lam, "visited": visited, "skipped": skipped,
               "kept_in_leading_run": lead,
               "speedup_voting_loop": round(visited / now, 4),
               "speedup_leading_run_dense": round(visited / oracle, 4),
               "speedup_dense_prefix": {str(d): round(visited / sum(
                   slice_cost(v, d, *costs) for v in slices), 4) for d in args.prefixes}}
        results.append(row)
        prefix = ", ".join(f"D={d} {s:.3f}x" for d, s in row["speedup_dense_prefix"].items())
        print(f"  lambda {lam:g}: skip {100 * skipped / visited:.1f}%, kept tiles in the leading "
              f"run {100 * lead / max(kept, 1):.1f}% | model: voting loop {visited / now:.3f}x, "
              f"dense prefix {prefix}, each slice's leading run dense {visited / oracle:.3f}x")
    for row in results:
        row["costs"] = dict(zip(("skipped", "kept", "switch"), costs))
    write_study(args, cases, source, rows, block_n, results)


if __name__ == "__main__":
    main()
