"""The stand-in machines the live tests across machines share (tests/live/test_spanned*.py, the
sweep on Ray): one pair (testbed.testing.machines: two namespaces on a veth underlay and a Ray
cluster with a node for each) for the whole session, since starting Ray's processes takes 5-30 s
on a busy host. ``machines`` hands it to a test clean and checks that the test left it so: no
driver connected, nothing beyond the underlay in either namespace, no part of a topology recorded
on either machine. A test that leaves something fails at its teardown, what it left is removed
with the pair, and the next test gets a new pair; a pair whose Ray processes died is replaced.
A test that takes a machine down (a node's death) starts a cluster of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

STAND_INS = ("node-a", "node-b")


class SharedStandIns:
    """The session's pair of stand-in machines, started when a test first asks for it."""

    def __init__(self) -> None:
        self.current = None

    def get(self):  # -> testbed.testing.machines.StandInMachines
        from testbed.testing.machines import StandInMachines

        if self.current is not None and (dead := self.current.dead()):
            print(f"stand-in machines replaced: {', '.join(dead)} no longer running")
            self.close()
        if self.current is None:
            self.current = StandInMachines(STAND_INS).start()
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture(scope="session")
def shared_stand_ins() -> Iterator[SharedStandIns]:
    shared = SharedStandIns()
    yield shared
    shared.close()


@pytest.fixture
def machines(root: None, shared_stand_ins: SharedStandIns) -> Iterator[tuple[str, list[str]]]:
    """Two stand-in machines, ``STAND_INS``: the Ray cluster's address and their namespaces
    (shared by the session's tests; clean before and after each)."""
    import ray

    from testbed.net import build, registry

    pair = shared_stand_ins.get()
    yield pair.address, list(pair.spaces)
    ray.shutdown()  # the test's driver: its job, and any actor of it still alive, ends
    left = pair.leftovers()
    # parts on another pair (another test session's: the same machine names) are not ours
    parts = [r for r in registry.records() if r.machine_netns in pair.spaces]
    if left or parts:
        # what each record says of itself, while its owner (an agent) may still run
        left += [f"record {r.key} ({r.name}, {r.phase}, owner {r.owner_pid} "
                 f"{'alive' if r.live() else 'gone'})" for r in parts]  # fmt: skip
        shared_stand_ins.close()  # Ray's processes first: no part has a live owner after
        for rec in parts:
            build.destroy(rec)
        pytest.fail(f"the test left this on the shared stand-in machines: {left}")
