#!/usr/bin/env python3
"""Model check of the decode kernel's barrier protocol (attention/decode/decode_mainloop.cuh).

Actors: the CTA's warps (4 key slices, 1 or 2 column groups) as coroutines running the split's
main loop, over mbarriers with the hardware's parity-wait semantics (a wait for parity P returns
once the barrier's current phase parity differs from P, so a waiter two phases behind is fooled),
one CTA barrier a tile (__syncthreads), and TMA copies that land after a random delay. Each warp's
lane 0 loads its slice's K (the first column group's warp, for both) and its own V; K of tile
t + ahead goes into the stage of tile t - 1, V of a kept tile into the stage the P V of tile
t - behind has just read; in a voting split after the first, the sink's K is loaded first, into
the stage of tile `ahead`. The warps publish their slices' row maxima in a buffer doubled by tile
parity and read all of them after the barrier.

Fails on a deadlock, when a warp reads a K or V stage or a row-maximum slot that does not hold its
tile, when a copy is issued into a buffer whose content some warp has still to read (or into which
a copy is still in flight), or when a copy is in flight as the epilogue reuses the stages.
The shipped protocol must pass every random run; each mutation that breaks one of its rules
(one K or V stage too few, no CTA barrier before the vote, V requested before the P V that
frees its stage) must fail in some.
"""
import random
import sys

from mbarrier_model import Barrier, run_interleaved, wait

SLICES = 4


def simulate(n_tiles, seed, vote, split_seed, col_groups, ahead=3, behind=3, mutation=None):
    rng = random.Random(seed)
    k_stages = ahead + 1 - (mutation == "one K stage too few")
    v_stages = behind - (mutation == "one V stage too few")
    warps = [(s, c) for c in range(col_groups) for s in range(SLICES)]
    k_full = [[Barrier(1) for _ in range(SLICES)] for _ in range(k_stages)]
    v_full = [[Barrier(1) for _ in warps] for _ in range(v_stages)]
    k_buf = [[None] * SLICES for _ in range(k_stages)]
    k_readers = [[set() for _ in range(SLICES)] for _ in range(k_stages)]
    v_buf = [[None] * len(warps) for _ in range(v_stages)]
    v_readers = [[set() for _ in warps] for _ in range(v_stages)]
    row_max = [[None] * SLICES for _ in range(2)]
    row_max_readers = [[set() for _ in range(SLICES)] for _ in range(2)]
    in_flight = []
    cta = {"count": 0, "generation": 0}
    p_skip = rng.choice([0.0, 0.3, 0.75, 0.95])
    skips = [vote and rng.random() < p_skip for _ in range(n_tiles)]
    seeded = vote and split_seed and n_tiles > 0

    def syncthreads():
        generation = cta["generation"]
        cta["count"] += 1
        if cta["count"] == len(warps):
            cta["count"], cta["generation"] = 0, generation + 1
        while cta["generation"] == generation:
            yield

    def issue(kind, stage, index, tile):
        readers = (k_readers if kind == "k" else v_readers)[stage][index]
        assert not readers, f"{kind.upper()} stage {stage}/{index} reloaded with tile {tile} " \
                            f"while warps {sorted(readers)} have still to read it"
        assert not any(f[:3] == (kind, stage, index) for f in in_flight), \
            f"two copies in flight into {kind.upper()} stage {stage}/{index}"
        (k_full if kind == "k" else v_full)[stage][index].arrive_expect_tx(1)
        in_flight.append((kind, stage, index, tile))

    def warp(w):
        s, c = warps[w]
        k_phase, v_phase = [0] * k_stages, [0] * v_stages

        def load_k(stage, tile):
            if c == 0:
                issue("k", stage, s, tile)

        def read_k(stage, tile):
            yield from wait(k_full[stage][s], k_phase[stage])
            k_phase[stage] ^= 1
            assert k_buf[stage][s] == tile, f"K stage {stage}/{s} holds {k_buf[stage][s]}, not {tile}"
            yield  # the scores' ldmatrix reads
            assert k_buf[stage][s] == tile, "K stage overwritten during the scores"
            k_readers[stage][s].discard(w)

        def publish_max(buf, tile):
            if c == 0:
                assert not row_max_readers[buf][s], \
                    f"row maxima of slice {s} overwritten before warps {row_max_readers[buf][s]} read them"
                row_max[buf][s] = tile
                row_max_readers[buf][s] = set(range(len(warps)))
            yield

        def vote_on(buf, tile):
            for t in range(SLICES):
                assert row_max[buf][t] == tile, \
                    f"warp {w} reads slice {t}'s maxima of {row_max[buf][t]}, not {tile}"
                row_max_readers[buf][t].discard(w)
            yield

        def accumulate(stage, tile):
            yield from wait(v_full[stage][w], v_phase[stage])
            v_phase[stage] ^= 1
            assert v_buf[stage][w] == tile, f"V stage {stage}/{w} holds {v_buf[stage][w]}, not {tile}"
            yield  # the P V reads
            assert v_buf[stage][w] == tile, "V stage overwritten during P V"
            v_readers[stage][w].discard(w)

        if seeded:
            load_k(ahead % k_stages, "sink")
        for j in range(ahead):
            if j < n_tiles:
                load_k(j % k_stages, j)
        if seeded:
            yield from read_k(ahead % k_stages, "sink")
            yield from publish_max(1, "sink")
            yield from syncthreads()
            yield from vote_on(1, "sink")
        history = 0
        for t in range(n_tiles + behind):
            yield
            if t + ahead < n_tiles:
                load_k((t + ahead) % k_stages, t + ahead)
            skip = False
            if t < n_tiles:
                yield from read_k(t % k_stages, t)
                yield from publish_max(t & 1, t)
                if mutation != "no barrier before the vote":
                    yield from syncthreads()
                yield from vote_on(t & 1, t)
                skip = skips[t]
            history = (history << 1) | skip
            v_stage = t % v_stages
            if mutation == "V before the P V" and t < n_tiles and not skip:
                issue("v", v_stage, w, t)
            if t >= behind and not (history >> behind) & 1:
                yield from accumulate(v_stage, t - behind)
            if mutation != "V before the P V" and t < n_tiles and not skip:
                issue("v", v_stage, w, t)
        yield from syncthreads()  # store(): every warp is done with the stages
        assert not in_flight, f"copies {in_flight} in flight as the epilogue reuses the stages"

    def land(copy):
        kind, stage, index, tile = copy
        if kind == "k":
            k_buf[stage][index] = tile
            k_readers[stage][index] = {w for w, (s, _) in enumerate(warps) if s == index}
            k_full[stage][index].complete_tx(1)
        else:
            v_buf[stage][index] = tile
            v_readers[stage][index] = {index}
            v_full[stage][index].complete_tx(1)

    actors = {w: warp(w) for w in range(len(warps))}
    return run_interleaved(actors, in_flight, land, rng, 400000)


def runs(mutation=None, count=40):
    """(failures, runs, first failure) over random tile counts, skip patterns and shapes."""
    failures, total, first = 0, 0, None
    for col_groups in (1, 2):
        for vote, split_seed in ((False, False), (True, False), (True, True)):
            for seed in range(count):
                n = random.Random(seed).randint(0, 20)
                problem = simulate(n, seed, vote, split_seed, col_groups, mutation=mutation)
                total += 1
                if problem:
                    failures += 1
                    first = first or f"{col_groups} column groups, vote {vote}, sink seed " \
                                     f"{split_seed}, {n} tiles, seed {seed}: {problem}"
    return failures, total, first


def main():
    status = 0
    failures, total, first = runs(count=100)
    print(f"shipped protocol: {failures} failures in {total} random runs")
    if failures:
        print("  first:", first)
        status = 1
    for mutation in ("one K stage too few", "one V stage too few", "no barrier before the vote",
                     "V before the P V"):
        failures, total, first = runs(mutation)
        print(f"mutation '{mutation}': {failures} of {total} runs fail"
              + (f" (first: {first})" if first else ""))
        if not failures:
            print("  the model no longer catches this mutation")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
