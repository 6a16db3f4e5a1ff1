#!/usr/bin/env python3
"""Model check of the prefill kernel's barrier protocol (kernels/prefill/prefill_kernel.cuh).

The producer and the two consumer warpgroups are modelled as coroutines over mbarriers with the
hardware's parity-wait semantics (a wait for parity P returns once the barrier's current phase
parity differs from P, so a waiter two phases behind is fooled), named turn barriers, and TMA
copies that land after a random delay. Thousands of random interleavings, tile counts and skip
patterns are run for the two main loops: the dense loop (pingpong turns, each tile's Q K^T issued
with the previous tile's P V) and the voting loop (the next tile's Q K^T in flight during the vote
on this one, the one after next issued on a skipped tile before the next lands and on a kept tile
after its P V, which finishes in its own step; no turns), the latter with V always loaded and with
dropped V loads, for 2, 3 and 4 K stages (SKIPSOFTMAX_K_STAGES; the kernel ships 3; with 1 the
voting loop deadlocks, which the model finds and a static_assert refuses).
Fails on a deadlock, or when a consumer reads a K or V stage that does not hold its tile.
"""
import random
import sys

V_STAGES = 2
CONSUMER_WARPS = 8  # empty barriers count one arrival per consumer warp (4 per warpgroup)


class Barrier:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def arrive(self, n=1):
        self.pending -= n
        assert self.pending >= 0, "more arrivals than the barrier expects"
        self._complete()

    def arrive_expect_tx(self, nbytes):
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def parity_done(self, parity):
        return (self.phase & 1) != parity


def simulate(n_tiles, seed, mode, K_STAGES=3):
    rng = random.Random(seed)
    vote = mode != "dense"
    drop_v = mode == "skip-drop-v"
    full_k = [Barrier(1) for _ in range(K_STAGES)]
    empty_k = [Barrier(CONSUMER_WARPS) for _ in range(K_STAGES)]
    full_v = [Barrier(1) for _ in range(V_STAGES)]
    empty_v = [Barrier(CONSUMER_WARPS) for _ in range(V_STAGES)]
    voted = [Barrier(2) for _ in range(K_STAGES)]
    verdict = [[False, False] for _ in range(K_STAGES)]
    k_holds, v_holds = [None] * K_STAGES, [None] * V_STAGES
    in_flight = []
    turn = [{"count": 0, "generation": 0} for _ in range(2)]
    skips = [[vote and rng.random() < 0.6 for _ in range(n_tiles)] for _ in range(2)]

    def turn_arrive(i):
        t = turn[i]
        t["count"] += 1
        if t["count"] == 2:
            t["count"], t["generation"] = 0, t["generation"] + 1

    def turn_sync(i):
        generation = turn[i]["generation"]
        turn_arrive(i)
        while turn[i]["generation"] == generation:
            yield

    def wait(barrier, parity):
        while not barrier.parity_done(parity):
            yield

    def producer():
        def load_k(pos):
            stage = pos % K_STAGES
            yield from wait(empty_k[stage], ((pos // K_STAGES) & 1) ^ 1)
            full_k[stage].arrive_expect_tx(1)
            in_flight.append(("k", stage, pos))

        def load_v(pos):
            stage, needed = pos % V_STAGES, True
            if drop_v:
                slot = pos % K_STAGES
                yield from wait(voted[slot], (pos // K_STAGES) & 1)
                needed = not (verdict[slot][0] and verdict[slot][1])
            yield from wait(empty_v[stage], ((pos // V_STAGES) & 1) ^ 1)
            if not needed:
                full_v[stage].arrive()
                return
            full_v[stage].arrive_expect_tx(1)
            in_flight.append(("v", stage, pos))

        ahead = K_STAGES - 1
        for pos in range(min(ahead, n_tiles)):
            yield from load_k(pos)
        for pos in range(n_tiles):
            if pos + ahead < n_tiles:
                yield from load_k(pos + ahead)
            yield from load_v(pos)

    def consumer(wg):
        yield from (vote_loop(wg) if vote else dense_loop(wg))

    def vote_loop(wg):
        owed = 0

        def issue_qk(pos):  # wait for the tile's K; the product reads it until land_qk(pos)
            stage = pos % K_STAGES
            yield from wait(full_k[stage], (pos // K_STAGES) & 1)
            assert k_holds[stage] == pos, f"K stage {stage} holds {k_holds[stage]}, not {pos}"

        def land_qk(pos):
            yield
            empty_k[pos % K_STAGES].arrive(4)

        def finish_pv(pos, v_stage):
            yield from wait(full_v[v_stage], (pos // V_STAGES) & 1)
            assert v_holds[v_stage] == pos, \
                f"warpgroup {wg}: V stage {v_stage} holds {v_holds[v_stage]}, not {pos}"
            yield
            empty_v[v_stage].arrive(4)

        # Two Q K^T in flight: the next tile's before the vote on this one, and on a skipped
        # tile the one after next before the next lands.
        yield from issue_qk(0)
        if n_tiles > 1:
            yield from issue_qk(1)
        yield from land_qk(0)
        for pos in range(n_tiles):
            v_stage, has_next, issue = pos % V_STAGES, pos + 1 < n_tiles, pos + 2 < n_tiles
            yield
            skip = skips[wg][pos]
            if drop_v:
                if owed & (1 << v_stage):
                    yield from wait(full_v[v_stage], ((pos - V_STAGES) // V_STAGES) & 1)
                    empty_v[v_stage].arrive(4)
                    owed &= ~(1 << v_stage)
                slot = pos % K_STAGES
                verdict[slot][wg] = skip
                voted[slot].arrive()
            if skip:
                if issue:
                    yield from issue_qk(pos + 2)
                if drop_v:
                    owed |= 1 << v_stage
                else:
                    yield from wait(full_v[v_stage], (pos // V_STAGES) & 1)
                    empty_v[v_stage].arrive(4)
                if has_next:
                    yield from land_qk(pos + 1)
            else:
                if has_next:
                    yield from land_qk(pos + 1)
                yield from finish_pv(pos, v_stage)
                if issue:
                    yield from issue_qk(pos + 2)

    def dense_loop(wg):
        pending, pending_stage = False, 0
        if wg == 1:
            turn_arrive(0)
        for pos in range(n_tiles):
            k_stage, v_stage = pos % K_STAGES, pos % V_STAGES
            yield from wait(full_k[k_stage], (pos // K_STAGES) & 1)
            assert k_holds[k_stage] == pos, f"K stage {k_stage} holds {k_holds[k_stage]}, not {pos}"
            yield from turn_sync(wg)
            if pending:
                yield from wait(full_v[pending_stage], ((pos - 1) // V_STAGES) & 1)
                assert v_holds[pending_stage] == pos - 1, \
                    f"warpgroup {wg}: V stage {pending_stage} holds {v_holds[pending_stage]}"
            turn_arrive(1 - wg)
            yield
            empty_k[k_stage].arrive(4)
            yield
            if pending:
                empty_v[pending_stage].arrive(4)
            pending, pending_stage = True, v_stage
        if pending:
            yield from wait(full_v[pending_stage], ((n_tiles - 1) // V_STAGES) & 1)
            assert v_holds[pending_stage] == n_tiles - 1
            empty_v[pending_stage].arrive(4)
        if wg == 0:
            yield from turn_sync(0)

    actors = {"producer": producer(), "wg0": consumer(0), "wg1": consumer(1)}
    finished = set()
    for _ in range(500000):
        if len(finished) == len(actors):
            return None
        if in_flight and rng.random() < 0.3:
            kind, stage, tile = in_flight.pop(rng.randrange(len(in_flight)))
            if kind == "k":
                k_holds[stage] = tile
                full_k[stage].complete_tx(1)
            else:
                v_holds[stage] = tile
                full_v[stage].complete_tx(1)
            continue
        name = rng.choice([a for a in actors if a not in finished])
        try:
            next(actors[name])
        except StopIteration:
            finished.add(name)
        except AssertionError as e:
            return str(e)
    return "deadlock"


def main():
    failures, runs = 0, 0
    for k_stages in (2, 3, 4):
        for mode in ("dense", "skip", "skip-drop-v"):
            for seed in range(1000):
                n = random.Random(seed).randint(1, 12)
                problem = simulate(n, seed, mode, k_stages)
                runs += 1
                if problem:
                    failures += 1
                    if failures <= 5:
                        print(f"{mode}, {k_stages} K stages, {n} tiles, seed {seed}: {problem}")
    print(f"{failures} failures in {runs} random runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
