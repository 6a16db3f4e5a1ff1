"""Order statistics of timed calls for the side-by-side benchmarks (no GPU or PyTorch needed)."""
import statistics


def quartiles(xs):
    """(first quartile, median, third quartile) of xs, interpolated between order statistics as
    numpy's default does; a single value is its own quartiles."""
    if not xs:
        raise ValueError("quartiles of no values")
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, median, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, median, q3


def paired_speedups(base_ms, arm_ms):
    """Quartiles of base / arm over calls timed in the same round (the lists are in timing order,
    one entry per call, as interleaved rounds give them): the spread of a speedup that clock drift
    between rounds does not widen."""
    if len(base_ms) != len(arm_ms):
        raise ValueError(f"paired_speedups: {len(base_ms)} base calls against {len(arm_ms)}")
    return quartiles([b / a for b, a in zip(base_ms, arm_ms)])


def across_processes(docs):
    """One row per (length, arm) of compare_sdpa.py's JSON docs, one doc a process: the median
    over the processes of each process's median ms and of its speedup over cuDNN, and that
    speedup's range. Every process must have timed the same arms (a missing one is an error: the
    summary would mix processes)."""
    if not docs:
        raise ValueError("across_processes: no processes")
    keys = [(r["length"], r["arm"]) for r in docs[0]["results"]]
    table = []
    for length, arm in keys:
        rows = []
        for i, doc in enumerate(docs):
            found = [r for r in doc["results"] if (r["length"], r["arm"]) == (length, arm)]
            if len(found) != 1:
                raise ValueError(f"across_processes: process {i + 1} has {len(found)} rows for "
                                 f"'{arm}' at length {length}")
            rows.append(found[0])
        ratios = [r["speedup_vs_cudnn"] for r in rows]
        has_ratio = all(x is not None for x in ratios)
        table.append({
            "length": length, "batch": rows[0].get("batch"), "arm": arm, "processes": len(rows),
            "ms": statistics.median(r["ms"] for r in rows),
            "tile_sparsity": statistics.median(r["tile_sparsity"] for r in rows),
            "speedup_vs_cudnn": statistics.median(ratios) if has_ratio else None,
            "speedup_vs_cudnn_range": [min(ratios), max(ratios)] if has_ratio else None,
        })
    return table
