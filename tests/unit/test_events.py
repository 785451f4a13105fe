"""The event runner's clock and schedule (testbed.experiment.clock, testbed.experiment.events)
with real announcements on a real UNIX datagram socket (traffic.announce), and its pure parts;
what an event does to a live testbed is tests/live/test_events_runner.py's. The clock's time is a
ManualClock the test moves (testbed.core.clock): times and lateness are exact on any machine."""

from __future__ import annotations

import dataclasses
import os

import pytest

from testbed.core.clock import ManualClock
from testbed.core.errors import UnsupportedError
from testbed.core.vocab import LATE_S as LATE
from testbed.experiment.clock import Instant, OriginClock
from testbed.experiment.events import EventRunner, impairment_for
from testbed.plan.model import Impairment
from testbed.plan.timeline import Change, Event, Timeline
from traffic.announce import Announcer, format_end, format_start, parse

T0 = 1000.0  # the manual clock's start
SLOW = 0.05  # s: how long applying the blackhole takes in the runner test (more than LATE)


def event(at: float, action: str = "set", after: int | None = None, **kw) -> Event:
    fields = dict(
        at=at,
        after_iteration=after,
        action=action,
        source="fault" if action != "set" else "schedule",
        fault=None,
        link="east-west",
        cluster=None,
        directions=("east->west",),
        changes=(),
        what=f"{action} at {at}",
    )
    fields.update(kw)
    return Event(**fields)


def test_announcements_round_trip_and_strays_are_ignored() -> None:
    got = parse(format_start(7, 1700000000.123456, 12345.5))
    assert got is not None and (got.kind, got.iteration) == ("iteration", 7)
    assert got.unix == pytest.approx(1700000000.123456) and got.mono == pytest.approx(12345.5)
    end = parse(format_end(1.0, 2.0))
    assert end is not None and end.kind == "end" and end.iteration is None
    for stray in (b"", b"hello", b"iteration x start 1 2", b"\xff\xfe", b"end 1"):
        assert parse(stray) is None


def test_an_announcer_without_a_listener_never_fails(tmp_path) -> None:
    Announcer(None).start(0)  # no socket in the spec: nothing at all
    lonely = Announcer(str(tmp_path / "nobody"))
    lonely.start(0)
    lonely.end()
    assert Announcer.from_spec({"events_socket": "/x"}, rank=1).sock is None  # rank 0 only


def test_an_announcer_sends_its_clocks_instant() -> None:
    clock = ManualClock(T0)
    got = parse(_sent(lambda a: a.start(3), clock))
    assert got is not None and got.iteration == 3
    assert (got.unix, got.mono) == (pytest.approx(clock.wall()), pytest.approx(T0))


def _sent(do, clock: ManualClock) -> bytes:
    import socket
    import tempfile

    with tempfile.TemporaryDirectory() as d, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(os.path.join(d, "sock"))
        do(Announcer(os.path.join(d, "sock"), clock=clock))
        return s.recv(256)


def test_the_origin_is_the_first_announced_iteration_and_the_end_stops_every_wait() -> None:
    # autojump: a wait that nothing ends sooner ends at once, at its deadline on the clock
    time = ManualClock(T0, autojump=True)
    with OriginClock(clock=time) as clock:
        rank0 = Announcer(clock.path, clock=time)
        assert clock.wait_origin(timeout=0.05) is None  # nothing announced yet
        assert time.now() == T0 + 0.05  # the timeout ended that wait
        rank0.start(0)
        origin = clock.wait_origin()  # no timeout: the announcement ends the wait
        assert origin is not None  # the announced instant (to the message's microsecond):
        assert (origin.unix, origin.mono) == (pytest.approx(time.wall()), pytest.approx(T0 + 0.05))
        time.advance(1.0)
        rank0.start(1)
        one = clock.wait_iteration(1)
        assert one is not None and one.mono == pytest.approx(T0 + 1.05)
        assert clock.origin == origin  # later iterations do not move it
        rank0.end()
        # no timeout given: only the end can end this wait (no wait forever), and no time passed
        assert clock.wait_iteration(5) is None
        assert time.now() == T0 + 1.05
        directory = clock.dir
    assert not os.path.exists(directory)  # nothing left behind


def test_wall_clock_origin_is_set_by_the_runner_and_announcements_do_not_move_it() -> None:
    time = ManualClock(T0)
    with OriginClock(from_iterations=False, clock=time) as clock:
        origin = clock.set_origin()
        assert origin == Instant(time.wall(), T0)  # now, on the clock
        Announcer(clock.path, clock=time).start(0)
        assert clock.wait_iteration(0) is not None
        assert clock.origin == origin


def test_events_apply_at_their_times_and_failures_do_not_stop_the_rest() -> None:
    time = ManualClock(T0)
    applied: list[tuple[str, float]] = []

    def apply(e: Event) -> str:
        applied.append((e.what, time.now()))
        if e.what == "broken":
            raise RuntimeError("no such qdisc")
        if e.what == "hole on":
            time.sleep(SLOW)  # applying it takes SLOW: it ends late by that much
        return f"did {e.what}"

    timeline = Timeline(
        (
            event(0.05, what="first"),
            event(0.10, what="broken"),
            event(0.15, "blackhole", what="hole on"),
            event(0.02, after=1, what="after iteration 1"),
            event(0.0, after=9, what="never"),
        ),
        "workload",
        None,
    )
    with OriginClock(clock=time) as clock:
        runner = EventRunner(timeline, None, clock, apply=apply).start()
        rank0 = Announcer(clock.path, clock=time)
        rank0.start(0)
        assert clock.wait_origin() is not None  # the runner's clock has it
        time.run_to(T0 + 0.3)
        rank0.start(1)
        assert clock.wait_iteration(1) is not None
        time.run_to(T0 + 0.5)
        clock.end()
        runner.stop()
    rows = {(r["what"], r["status"]): r for r in runner.rows}
    origin = clock.iterations[0]
    assert origin.mono == T0
    for what, at, late in (("first", 0.05, 0.0), ("hole on", 0.15, SLOW)):
        row = rows[(what, "applied")]
        assert row["scheduled_mono"] == origin.mono + at
        # never early: applied at its time exactly; late by what applying it took
        assert row["late_s"] == pytest.approx(late, abs=1e-9) and row["late"] == (late > LATE)
        assert row["apply_s"] == pytest.approx(late, abs=1e-9)
        assert row["operation"] == f"did {what}" and row["error"] is None
    assert rows[("hole on", "applied")]["late"] is True
    assert "no such qdisc" in rows[("broken", "failed")]["error"]
    anchored = rows[("after iteration 1", "applied")]
    assert anchored["scheduled_mono"] == pytest.approx(clock.iterations[1].mono + 0.02)
    assert clock.iterations[1].mono == pytest.approx(T0 + 0.3)
    assert rows[("never", "skipped")]["applied_unix"] is None
    # the blackhole was still on at the end: undone, after its own row
    undo = rows[("hole on: undone at end", "undone")]
    assert undo["action"] == "unblackhole" and undo["error"] is None
    # each applied at its planned time, in order (the failure did not stop the rest)
    assert applied == [
        ("first", T0 + 0.05),
        ("broken", T0 + 0.10),
        ("hole on", T0 + 0.15),
        ("after iteration 1", pytest.approx(T0 + 0.32)),
        ("hole on: undone at end", T0 + 0.5),
    ]


def test_a_fault_ended_by_its_own_event_is_not_undone_again() -> None:
    seen: list[str] = []
    timeline = Timeline(
        (event(0.0, "link_down", what="down"), event(0.05, "link_up", what="up")),
        "wall",
        None,
    )
    time = ManualClock(T0)
    with OriginClock(from_iterations=False, clock=time) as clock:
        runner = EventRunner(timeline, None, clock, apply=lambda e: seen.append(e.action) or "ok")
        runner.start()
        clock.set_origin()
        time.run_to(T0 + 0.3)
        runner.stop()
    assert seen == ["link_down", "link_up"]
    assert [r["status"] for r in runner.rows] == ["applied", "applied"]
    assert [r["late_s"] for r in runner.rows] == [0.0, 0.0]


def test_trace_bins_that_never_came_are_counted_not_tabled() -> None:
    bins = tuple(event(10.0 + k, source="trace", what=f"bin {k}") for k in range(1000))
    with OriginClock(from_iterations=False, clock=ManualClock(T0)) as clock:
        runner = EventRunner(
            Timeline((event(5.0, what="step"), *bins), "wall", None), None, clock, apply=str
        ).start()
        clock.set_origin()
        runner.stop()
    assert [r["what"] for r in runner.rows] == ["step"] and runner.skipped_trace == 1000


def test_nothing_waits_when_the_workload_ends_before_the_origin() -> None:
    time = ManualClock(T0)
    with OriginClock(clock=time) as clock:
        runner = EventRunner(
            Timeline((event(1.0),), "workload", None), None, clock, apply=lambda e: "x"
        ).start()
        clock.end()
        # stop() joins the thread with no timeout: it returns because the end woke the thread,
        # with none of the clock's time passed (nothing moves it here)
        runner.stop()
        assert time.now() == T0 and time.waiting() == 0
    assert [r["status"] for r in runner.rows] == ["skipped"]


def test_impairment_for_subtracts_the_compensation_and_refuses_what_it_cannot_carry() -> None:
    imp = Impairment("ns", "in", "out", 0.010, 0.0, 0.0, 0.0, 1000)
    d = type("D", (), {"impairment": imp})()
    c = Change("east->west", 100_000_000, 125_000, 0.030, 0.001, 0.01, 0.0)
    got = impairment_for(d, c, compensation_s=0.0002)  # type: ignore[arg-type]
    assert got.delay == pytest.approx(0.0298) and got.jitter == 0.001 and got.loss == 0.01
    assert got.ns == "ns" and got.netem_limit == 1000
    assert impairment_for(d, dataclasses.replace(c, delay=0.0), 0.0002).delay == 0.0  # type: ignore[arg-type]
    has_ge = {f.name for f in dataclasses.fields(Impairment)} >= {"ge_p", "ge_r"}
    burst = dataclasses.replace(c, ge_p=0.01, ge_r=0.25)
    if has_ge:
        assert impairment_for(d, burst, 0.0).ge_p == 0.01  # type: ignore[arg-type]
    else:
        with pytest.raises(UnsupportedError):
            impairment_for(d, burst, 0.0)  # type: ignore[arg-type]


def test_a_burst_loss_set_says_its_gilbert_elliott_parameters() -> None:
    """events.parquet's operation text: a burst loss's `set` names p and r (it read "loss 0
    reorder 0" alone, as if nothing had changed)."""
    from types import SimpleNamespace

    from testbed.experiment.events import EventTarget

    imp = Impairment("ns", "in", "out", 0.010, 0.0, 0.0, 0.0, 1000)
    d = SimpleNamespace(name="east->west", rate=100_000_000, buffer=125_000, delay=0.010,
                        jitter=0.0, loss=0.0, reorder=0.0, impairment=imp)  # fmt: skip
    applied: list[dict] = []
    backend = SimpleNamespace(set_rate=applied.append, set_impairments=applied.append)
    tb = SimpleNamespace(
        plan=SimpleNamespace(wan=[d]), backend=backend, compensation_of=lambda name: None
    )
    target = EventTarget(tb)  # type: ignore[arg-type]
    c = Change("east->west", 100_000_000, 125_000, 0.010, 0.0, 0.0, 0.0, ge_p=0.01, ge_r=0.25)
    text = target.set([c])
    assert text.endswith("loss 0 reorder 0 burst loss p 0.01 r 0.25"), text
    assert applied[0]["east->west"].ge_p == 0.01
    assert "burst" not in target.set([dataclasses.replace(c, ge_p=0.0, ge_r=0.0)])
