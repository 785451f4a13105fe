"""The pure parts of steering a live testbed: ``testbed link``'s FIELD=VALUE settings and
``--direction``, ``launch``'s options after NAME, and the follower that streams a run
directory's logs (files written here, read as they grow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.text import Text

from testbed.cli import build_parser
from testbed.cli.steer import Follower, launch_argv
from testbed.config.loading import parse_scenario
from testbed.core.errors import UsageError
from testbed.experiment.steer import parse_settings, paths_of, which_directions


def test_settings_are_a_schedule_steps_fields_with_their_units():
    s = parse_settings(["rate=20mbit", "delay=30ms", "loss=1%"])
    assert (s.rate, s.delay, s.loss, s.jitter) == (20_000_000, pytest.approx(0.030), 0.01, None)
    for items, said in [
        (["speed=1"], "unknown field 'speed'; fields: rate, delay, jitter, loss, reorder, buffer"),
        (["delay"], "'delay': write FIELD=VALUE"),
        (["delay=fast"], "delay=fast: 'fast' is not a duration"),
        ([], "set what?"),
    ]:
        with pytest.raises(UsageError) as exc:
            parse_settings(items)
        assert said in str(exc.value)
        assert exc.value.exit_code == 2


def test_direction_names_a_direction_of_the_link():
    sc = parse_scenario(
        {"name": "t", "clusters": {"a": {"hosts": 1}, "b": {"hosts": 1}},
         "wan": [{"between": ["a", "b"], "rate": "1gbit"}]}
    )  # fmt: skip
    (path,) = paths_of(sc, "b-a")
    assert [which_directions(path, d) for d in (None, "a->b", "b->a", "both")] == [
        "both", "forward", "reverse", "both",
    ]  # fmt: skip
    with pytest.raises(UsageError, match="allowed: a->b, b->a, forward, reverse, both"):
        which_directions(path, "a->c")
    with pytest.raises(UsageError, match="LINK: no WAN link 'a-c'; links: a-b"):
        paths_of(sc, "a-c")


def test_launch_options_after_name_are_parsed_and_argv_is_what_follows_the_dashes():
    args = build_parser().parse_args(
        ["launch", "lab", "--per", "host", "--env", "A=1", "--", "torchrun", "--nnodes", "2"]
    )
    assert launch_argv(args) == ["torchrun", "--nnodes", "2"]
    assert (args.per, args.env, args.follow) == ("host", ["A=1"], "0")
    before = build_parser().parse_args(["launch", "--follow", "all", "lab", "--", "python", "-c"])
    assert launch_argv(before) == ["python", "-c"] and before.follow == "all"


def test_follower_prints_whole_lines_of_the_followed_rank_as_they_come(tmp_path: Path):
    got: list[str] = []
    log0, log1 = tmp_path / "rank-0.log", tmp_path / "rank-1.log"
    with Follower(tmp_path, "0", lambda t: got.append(t.plain)) as f:
        log0.write_bytes(b"first\nhalf")
        log1.write_bytes(b"not followed\n")
        f.poll()
        assert got == ["[rank-0] first"]
        with open(log0, "ab") as out:
            out.write(b" done\nlast, no newline")
    assert got == ["[rank-0] first", "[rank-0] half done", "[rank-0] last, no newline"]


def test_follower_of_a_rank_reads_its_hosts_log_when_one_process_runs_per_host(tmp_path: Path):
    spec = {"ranks": [{"rank": 0, "host": "east-h0"}, {"rank": 1, "host": "west-h0"}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "host-west-h0.log").write_text("worker up\n")
    (tmp_path / "host-east-h0.log").write_text("other\n")
    got: list[Text] = []
    with Follower(tmp_path, "1", got.append):
        pass
    assert [t.plain for t in got] == ["[host-west-h0] worker up"]
    everything: list[str] = []
    with Follower(tmp_path, "all", lambda t: everything.append(t.plain)):
        pass
    assert sorted(everything) == ["[host-east-h0] other", "[host-west-h0] worker up"]
    nothing: list[Text] = []
    with Follower(tmp_path, "none", nothing.append):
        pass
    assert not nothing


def test_a_kernel_backend_adopted_in_a_later_process_holds_what_the_last_one_left():
    """What `testbed link` keeps in steer.json of a kernel backend (its netems and bottlenecks)
    gives the next command's adopted backend the same view, e.g. a netem limit grown for a
    longer delay (so it never shrinks under traffic)."""
    import dataclasses

    from testbed.experiment.steer import SteerState, backend_state, restore_backend
    from testbed.link.kernel import KernelBackend
    from testbed.live.network import Network
    from testbed.net.registry import Record
    from testbed.plan.topology import build_plan

    sc = parse_scenario(
        {"name": "t", "clusters": {"a": {"hosts": 1}, "b": {"hosts": 1}},
         "wan": [{"between": ["a", "b"], "rate": "1gbit", "delay": "10ms"}]}
    )  # fmt: skip
    tb = Network(None, name="t")
    tb.plan = build_plan(sc, "mctb0000", 64)
    tb.record = Record("t", "mctb0000", 64, 1, None)
    first = KernelBackend()
    first.directions = {d.name: d for d in tb.plan.wan}
    restore_backend(first, tb, {})
    assert set(first.netem) == {"a->b", "b->a"}
    assert first.bottleneck["a->b"] == (1_000_000_000, tb.plan.wan[0].buffer)
    grown = dataclasses.replace(first.netem["a->b"], delay=0.2, netem_limit=99_999)
    first.netem["a->b"] = grown
    first.bottleneck["a->b"] = (10_000_000, 123_456)
    saved = SteerState(backend=backend_state(first))
    again = KernelBackend()
    again.directions = dict(first.directions)
    restore_backend(again, tb, SteerState(**json.loads(json.dumps(saved.__dict__))).backend)
    assert again.netem == first.netem and again.netem["a->b"] == grown
    assert again.bottleneck == first.bottleneck
