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


# The ratios a benchmark row may carry, summarized over processes by their median and range.
RATIOS = ("speedup_vs_cudnn", "speedup_vs_ours_dense", "fraction_of_copy")


def across_processes(docs):
    """One row per (batch, length, q_len, arm) of the side-by-side benchmarks' JSON docs
    (compare_sdpa.py, decode_sdpa.py), one doc a process: the median over the processes of each
    process's median ms and tile sparsity, and of each ratio of RATIOS the row has, with that
    ratio's range (None where some process had none). Every process must have timed the same arms
    (a missing one is an error: the summary would mix processes)."""
    if not docs:
        raise ValueError("across_processes: no processes")

    def key(r):
        return r.get("batch"), r["length"], r.get("q_len"), r["arm"]

    table = []
    for k in [key(r) for r in docs[0]["results"]]:
        rows = []
        for i, doc in enumerate(docs):
            found = [r for r in doc["results"] if key(r) == k]
            if len(found) != 1:
                raise ValueError(f"across_processes: process {i + 1} has {len(found)} rows for "
                                 f"'{k[3]}' at length {k[1]}")
            rows.append(found[0])
        entry = {"batch": k[0], "length": k[1], "arm": k[3], "processes": len(rows),
                 "ms": statistics.median(r["ms"] for r in rows),
                 "tile_sparsity": statistics.median(r["tile_sparsity"] for r in rows)}
        if k[2] is not None:
            entry["q_len"] = k[2]
        for field in RATIOS:
            if field not in rows[0]:
                continue
            values = [r.get(field) for r in rows]
            known = all(v is not None for v in values)
            entry[field] = statistics.median(values) if known else None
            entry[field + "_range"] = [min(values), max(values)] if known else None
        table.append(entry)
    return table
