"""The mbarrier the protocol models share: arrivals, transaction bytes and phases, with the
hardware's parity-wait semantics (a wait for parity P returns once the barrier's current phase
parity differs from P, so a waiter two phases behind is fooled)."""


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


def wait(barrier, parity):
    """A coroutine step: yields until the phase of parity `parity` has completed."""
    while not barrier.parity_done(parity):
        yield


def run_interleaved(actors, in_flight, land, rng, steps, land_p=0.3):
    """Runs the coroutines `actors` (name -> generator) one random step at a time; a copy of
    `in_flight` lands (land(copy)) with probability land_p a step. Returns None once every actor
    has finished, an assertion's message, or "deadlock" after `steps` steps."""
    finished = set()
    for _ in range(steps):
        if len(finished) == len(actors):
            return None
        if in_flight and rng.random() < land_p:
            land(in_flight.pop(rng.randrange(len(in_flight))))
            continue
        name = rng.choice([a for a in actors if a not in finished])
        try:
            next(actors[name])
        except StopIteration:
            finished.add(name)
        except AssertionError as e:
            return str(e)
    return "deadlock"
