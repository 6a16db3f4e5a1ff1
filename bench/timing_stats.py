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
    """One row per arm of the side-by-side benchmarks' JSON docs (compare_sdpa.py,
    decode_sdpa.py), one doc a process, keyed by (batch, length, q_len, arm) and the arm's rank
    among rows of the same name in its process (a --splits count equal to the automatic one, or
    --lambdas 0 beside the guard, names two arms alike). Per row: the processes that timed it
    (an arm a process could not time, as cuDNN where it is unavailable, is absent there), the
    median over them of each process's median ms and tile sparsity, and of each ratio of RATIOS
    the row has, with that ratio's range, over the processes where it is known (None where it is
    known in none)."""
    if not docs:
        raise ValueError("across_processes: no processes")
    order, rows_of = [], {}
    for doc in docs:
        seen = {}
        for r in doc["results"]:
            name = (r.get("batch"), r["length"], r.get("q_len"), r["arm"])
            seen[name] = seen.get(name, 0) + 1
            key = name + (seen[name],)
            if key not in rows_of:
                order.append(key)
                rows_of[key] = []
            rows_of[key].append(r)
    table = []
    for key in order:
        rows = rows_of[key]
        entry = {"batch": key[0], "length": key[1], "arm": key[3], "processes": len(rows),
                 "ms": statistics.median(r["ms"] for r in rows),
                 "tile_sparsity": statistics.median(r["tile_sparsity"] for r in rows)}
        if key[2] is not None:
            entry["q_len"] = key[2]
        for field in RATIOS:
            if not any(field in r for r in rows):
                continue
            known = [r[field] for r in rows if r.get(field) is not None]
            entry[field] = statistics.median(known) if known else None
            entry[field + "_range"] = [min(known), max(known)] if known else None
        table.append(entry)
    return table
