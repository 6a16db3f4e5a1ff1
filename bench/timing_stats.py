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
