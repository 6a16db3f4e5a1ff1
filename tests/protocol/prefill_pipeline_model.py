#!/usr/bin/env python3
"""Model check of the prefill kernel's barrier protocol (kernels/prefill/prefill_kernel.cuh).

The kernel is persistent: each CTA runs a sequence of work tiles (query tile x head x sequence)
handed out by a scheduler. Actors: the K producer thread (which also fetches the CTA's work and
publishes it into a ring of two work slots), the V producer thread and the two consumer
warpgroups, as coroutines over mbarriers with the hardware's parity-wait semantics (a wait for
parity P returns once the barrier's current phase parity differs from P, so a waiter two phases
behind is fooled), named turn barriers, and TMA copies that land after a random delay. Every
stage, ring slot and parity is indexed by the CTA's running KV position (the positions of its
earlier work tiles included), so that the pipelines run on across work tiles. One Q buffer: the
K thread loads the next work tile's Q once both warpgroups have landed their last Q K^T.

Thousands of random interleavings, work sequences and skip patterns are run for the dense family
(every tile the dense loop: pingpong turns, each tile's Q K^T issued with the previous tile's
P V) and the skip family, where each work tile is either guarded (lambda = 0: the dense loop) or
voting (the next tile's Q K^T in flight during the vote on this one; the vote on the next tile
taken in this tile's step; on a skipped tile the one after next issued before the next lands, on
a kept tile after its P V).

In voting tiles a consumer that skips a tile never touches V: the V thread reads both verdicts of
a tile from a ring of verdict slots and arrives on the tile's empty V barrier for each warpgroup
that skipped it (for a work tile's last V stages at the end of that work tile), and it waits for
a copy to land before reusing its stage. The V copies complete on barriers indexed by position (a
ring deeper than the V stages), so that a consumer which skipped ahead never waits on a barrier
two phases behind. In the skip family the K thread loads K of position t only once the V thread
has finished with position t - slots (for a guarded tile's position the V thread completes the
verdict slot's phases itself), so a slot is never overwritten unread and no consumer runs a ring
ahead of the V copies. V is loaded for every tile (mode "load", SKIPSOFTMAX_PREFILL_DROP_V=0) or
only for tiles some warpgroup keeps ("drop", the default).
Fails on a deadlock, when a consumer reads a Q, K or V buffer that does not hold its tile, when
an actor reads a work slot that does not hold its work, or when the V thread reads a verdict slot
that was overwritten.
"""
import random
import sys

V_STAGES = 2
CONSUMER_WARPS = 8  # empty barriers count one arrival per consumer warp (4 per warpgroup)
WORK_SLOTS = 2


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


def simulate(work, seed, family, mode, K_STAGES=3, SLOTS=8, READY=8):
    """work: the CTA's work tiles as (KV tiles, voting) pairs; family "dense" or "skip"."""
    rng = random.Random(seed)
    skip_family = family == "skip"
    full_q, empty_q = Barrier(1), Barrier(CONSUMER_WARPS)
    full_k = [Barrier(1) for _ in range(K_STAGES)]
    empty_k = [Barrier(CONSUMER_WARPS) for _ in range(K_STAGES)]
    v_ready = [Barrier(1) for _ in range(READY)]  # indexed by position, not by stage
    empty_v = [Barrier(CONSUMER_WARPS) for _ in range(V_STAGES)]
    voted = [Barrier(2) for _ in range(SLOTS)]
    slot_free = [Barrier(1) for _ in range(SLOTS)]
    work_full = [Barrier(1) for _ in range(WORK_SLOTS)]
    work_empty = [Barrier(CONSUMER_WARPS + 1) for _ in range(WORK_SLOTS)]  # + the V thread
    work_slot = [None] * WORK_SLOTS
    verdict = [[None, None] for _ in range(SLOTS)]
    q_holds, k_holds, v_holds = [None], [None] * K_STAGES, [None] * V_STAGES
    in_flight = []
    turn = [{"count": 0, "generation": 0} for _ in range(2)]
    bases = [sum(n for n, _ in work[:i]) for i in range(len(work))]
    p_skip = rng.choice([0.1, 0.5, 0.9])
    total = sum(n for n, _ in work)
    skips = [[rng.random() < p_skip for _ in range(total)] for _ in range(2)]
    END = len(work)  # the scheduler's "no more work"

    def turn_arrive(i):
        t = turn[i]
        t["count"] += 1
        if t["count"] == 2:
            t["count"], t["generation"] = 0, t["generation"] + 1

    def turn_sync(i):
        generation = turn[i]["generation"]
        turn_arrive(i)
        while turn[i]["generation"] == generation:
            blocked[0] += 1
            yield
        blocked[0] = 0

    blocked = [0]  # consecutive actor steps that only found a barrier not yet done

    def wait(barrier, parity):
        while not barrier.parity_done(parity):
            blocked[0] += 1
            yield
        blocked[0] = 0

    def take_work(j, arrivals):  # the j-th work tile of the CTA from its slot
        slot = j % WORK_SLOTS
        yield from wait(work_full[slot], (j // WORK_SLOTS) & 1)
        item = work_slot[slot]
        assert item == min(j, END), f"work slot {slot} holds {item}, not {j}"
        yield
        work_empty[slot].arrive(arrivals)
        return item

    def k_producer():
        for j in range(len(work) + 1):
            slot = j % WORK_SLOTS
            yield from wait(work_empty[slot], ((j // WORK_SLOTS) & 1) ^ 1)
            work_slot[slot] = min(j, END)
            work_full[slot].arrive()
            if j == END:
                return
            n, _ = work[j]

            def load_q():
                yield from wait(empty_q, (j & 1) ^ 1)
                full_q.arrive_expect_tx(1)
                in_flight.append(("q", 0, j))

            if n == 0:
                yield from load_q()
            for pos in range(n):
                g = bases[j] + pos
                stage = g % K_STAGES
                if skip_family and g >= SLOTS:
                    yield from wait(slot_free[g % SLOTS], ((g // SLOTS) - 1) & 1)
                yield from wait(empty_k[stage], ((g // K_STAGES) & 1) ^ 1)
                full_k[stage].arrive_expect_tx(1)
                in_flight.append(("k", stage, g))
                if pos == 0:
                    yield from load_q()

    def v_producer():
        j = 0
        while True:
            item = yield from take_work(j, 1)
            if item == END:
                return
            n, voting = work[j]
            base = bases[j]
            keepers = {}  # position -> the warpgroups that keep it, read once from its slot

            def kept_by(g):
                if g not in keepers:
                    slot = g % SLOTS
                    yield from wait(voted[slot], (g // SLOTS) & 1)
                    if voting:
                        assert verdict[slot] == [skips[0][g], skips[1][g]], \
                            "verdict slot overwritten"
                    keepers[g] = [wg for wg in (0, 1) if not (voting and verdict[slot][wg])]
                    slot_free[slot].arrive()
                return keepers[g]

            def release_skippers(g):
                kept = yield from kept_by(g)
                for wg in (0, 1):
                    if wg not in kept:
                        empty_v[g % V_STAGES].arrive(4)

            # In the skip family a guarded tile's positions are all kept: the consumers publish
            # each once its K landed, and this thread reads them a V stage late (its V copies do
            # not wait for them).
            late = skip_family
            for pos in range(n):
                g = base + pos
                stage = g % V_STAGES
                if late and pos >= V_STAGES:
                    # The warpgroups that skipped the stage's last tile release it through here.
                    yield from release_skippers(g - V_STAGES)
                yield from wait(empty_v[stage], ((g // V_STAGES) & 1) ^ 1)
                if g >= V_STAGES:  # no consumer may have waited for the stage's last copy
                    q = g - V_STAGES
                    yield from wait(v_ready[q % READY], (q // READY) & 1)
                needed = True
                if voting and mode == "drop":
                    needed = bool((yield from kept_by(g)))
                if needed:
                    v_ready[g % READY].arrive_expect_tx(1)
                    in_flight.append(("v", stage, g))
                else:
                    v_ready[g % READY].arrive()
            if late:
                for pos in range(max(0, n - V_STAGES), n):
                    yield from release_skippers(base + pos)
            j += 1

    def consumer(wg):
        # The dense loop's turns run on across work tiles: warpgroup 1 hands warpgroup 0 its first
        # turn once, and warpgroup 0 takes the turn it was handed last when the CTA ends.
        if wg == 1:
            turn_arrive(0)
        j = 0
        while True:
            item = yield from take_work(j, 4)
            if item == END:
                if wg == 0:
                    yield from turn_sync(0)
                return
            n, voting = work[j]
            yield from wait(full_q, j & 1)
            assert q_holds[0] == j, f"Q holds work {q_holds[0]}, not {j}"
            if n == 0:
                empty_q.arrive(4)
            elif voting:
                yield from vote_loop(wg, bases[j], n, j)
            else:
                yield from dense_loop(wg, bases[j], n, j)
            j += 1

    def check_q(j):
        assert q_holds[0] == j, f"Q reloaded while work {j} still reads it"

    def vote_loop(wg, base, n, j):
        def issue_qk(pos):  # wait for the tile's K; the product reads it until land_qk(pos)
            g = base + pos
            stage = g % K_STAGES
            yield from wait(full_k[stage], (g // K_STAGES) & 1)
            assert k_holds[stage] == g, f"K stage {stage} holds {k_holds[stage]}, not {g}"
            check_q(j)

        def land_qk(pos):
            yield
            check_q(j)
            empty_k[(base + pos) % K_STAGES].arrive(4)
            if pos == n - 1:  # the work tile's last Q K^T: Q is free
                empty_q.arrive(4)

        def publish(pos):  # the verdict on position g (the K thread saw slot g - SLOTS read)
            g = base + pos
            slot = g % SLOTS
            yield
            verdict[slot][wg] = skips[wg][g]
            voted[slot].arrive()

        yield from issue_qk(0)
        if n > 1:
            yield from issue_qk(1)
        yield from land_qk(0)
        yield from publish(0)
        for pos in range(n):
            g = base + pos
            v_stage, has_next, issue = g % V_STAGES, pos + 1 < n, pos + 2 < n
            yield
            if skips[wg][g]:
                if issue:
                    yield from issue_qk(pos + 2)
                if has_next:
                    yield from land_qk(pos + 1)
                    yield from publish(pos + 1)
            else:
                if has_next:
                    yield from land_qk(pos + 1)
                yield from wait(v_ready[g % READY], (g // READY) & 1)
                assert v_holds[v_stage] == g, \
                    f"warpgroup {wg}: V stage {v_stage} holds {v_holds[v_stage]}, not {g}"
                if has_next:  # the vote on the next tile while this P V runs
                    yield from publish(pos + 1)
                yield
                assert v_holds[v_stage] == g, "V stage overwritten during P V"
                empty_v[v_stage].arrive(4)
                if issue:
                    yield from issue_qk(pos + 2)

    def dense_loop(wg, base, n, j):
        pending, pending_stage = False, 0
        for pos in range(n):
            g = base + pos
            k_stage, v_stage = g % K_STAGES, g % V_STAGES
            yield from wait(full_k[k_stage], (g // K_STAGES) & 1)
            assert k_holds[k_stage] == g, f"K stage {k_stage} holds {k_holds[k_stage]}, not {g}"
            yield from turn_sync(wg)
            check_q(j)
            if pending:
                yield from wait(v_ready[(g - 1) % READY], ((g - 1) // READY) & 1)
                assert v_holds[pending_stage] == g - 1, \
                    f"warpgroup {wg}: V stage {pending_stage} holds {v_holds[pending_stage]}"
            turn_arrive(1 - wg)
            yield
            check_q(j)
            empty_k[k_stage].arrive(4)
            if skip_family:  # a guarded tile's position, kept by both (the K thread's gate)
                voted[g % SLOTS].arrive()
            yield
            if pending:
                empty_v[pending_stage].arrive(4)
            pending, pending_stage = True, v_stage
        empty_q.arrive(4)  # the last Q K^T has landed
        last = base + n - 1
        yield from wait(v_ready[last % READY], (last // READY) & 1)
        assert v_holds[pending_stage] == last
        yield
        empty_v[pending_stage].arrive(4)

    actors = {"k": k_producer(), "v": v_producer(), "wg0": consumer(0), "wg1": consumer(1)}
    finished = set()
    for _ in range(2000000):
        if len(finished) == len(actors):
            return None
        if in_flight and rng.random() < 0.3:
            kind, stage, what = in_flight.pop(rng.randrange(len(in_flight)))
            if kind == "q":
                q_holds[0] = what
                full_q.complete_tx(1)
            elif kind == "k":
                k_holds[stage] = what
                full_k[stage].complete_tx(1)
            else:
                v_holds[stage] = what
                v_ready[what % READY].complete_tx(1)
            continue
        if not in_flight and blocked[0] > 400:
            return "deadlock"
        name = rng.choice([a for a in actors if a not in finished])
        try:
            next(actors[name])
        except StopIteration:
            finished.add(name)
        except AssertionError as e:
            return str(e)
    return "deadlock"


def random_work(rng, family):
    count = rng.randint(1, 4)
    # Zero KV tiles lies outside the kernel's contract (kv_len < q_len, causal) but must not hang.
    return [(rng.choice([0] + [rng.randint(1, 14)] * 9), family == "skip" and rng.random() < 0.7)
            for _ in range(count)]


def main():
    failures, runs = 0, 0
    for k_stages in (2, 3, 4):
        for slots, ready in ((4, 8), (8, 8), (8, 4), (16, 8)):
            for family, mode in (("dense", "load"), ("skip", "load"), ("skip", "drop")):
                for seed in range(300):
                    work = random_work(random.Random(seed), family)
                    problem = simulate(work, seed, family, mode, k_stages, slots, ready)
                    runs += 1
                    if problem:
                        failures += 1
                        if failures <= 8:
                            print(f"{family}/{mode}, {k_stages} K stages, rings {slots}/{ready}, "
                                  f"work {work}, seed {seed}: {problem}")
    # The kernel ships 3 K stages and rings of 8; with 1 K stage the voting loop deadlocks (it holds
    # the next tile's K while waiting for the one after), which a static_assert refuses.
    print(f"{failures} failures in {runs} random runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
