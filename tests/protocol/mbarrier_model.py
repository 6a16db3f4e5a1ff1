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
