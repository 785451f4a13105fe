"""The ``testbed run`` verb: run a sweep with a progress line per point (and, with ``--follow``,
the output of the processes it names as it comes), then print the link self-check, the
collectives summary (measured beside predicted) and the expectations.

Exit codes: 0 every point ok and every expectation met, 1 a point failed or an expectation did
not hold, 130 interrupted (what was measured is kept; ``--resume`` continues).
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
from pathlib import Path
from typing import Any

from rich.table import Table

from testbed.cli.common import add_engine_option, add_selfcheck_option, add_set_option, need_root
from testbed.cli.console import escape, make_console
from testbed.cli.progress import Eta, PhaseWatch, counting, estimates
from testbed.cli.steer import Follower, follow_choice
from testbed.core.errors import ScenarioError, TestbedError

out = make_console()
err = make_console(stderr=True)


def register(sub: Any) -> None:
    """Register ``run`` on the CLI's sub-parsers."""
    s = sub.add_parser(
        "run",
        help="build each sweep point, self-check the links, run the workload, write results",
    )
    s.add_argument("file", help="the scenario file (YAML); its sweep and repeats are the runs")
    s.add_argument("--out", default="results", help="results root directory (default: %(default)s)")
    add_set_option(s)
    s.add_argument("--resume", metavar="DIR", help="continue an interrupted run in DIR")
    add_engine_option(s)
    add_selfcheck_option(s, "before each run")
    s.add_argument(
        "--point",
        type=int,
        metavar="K",
        help="run only the K-th run of the sweep (0-based, points x repeats; a SLURM array task)",
    )
    s.add_argument(
        "--emit-slurm-array",
        action="store_true",
        help="print a SLURM job-array script (one run per task, --point) and exit",
    )
    s.add_argument("--slurm-parallel", type=int, metavar="N", help="at most N array tasks at once")
    s.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the points on a Ray cluster (auto, or the head's HOST:PORT), one point at a "
        "time per machine that joined with `testbed ray-node`; a scenario with `placement:` "
        "spans that cluster's machines instead (docs/scale-out.md); `local`: a throwaway "
        "cluster of this machine, started for the run and stopped after it",
    )
    s.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the expectations as JUnit XML to FILE (a test case per expectation "
        "per run; failures give the measured value and the bound)",
    )
    s.add_argument(
        "--follow",
        type=follow_choice,
        metavar="all|RANK|none",
        help="print these processes' output as each run goes (default: rank 0 for workload "
        "kind command, else none; not with --ray)",
    )
    s.set_defaults(fn=cmd_run)
    n = sub.add_parser(
        "ray-node",
        help="join this machine to a Ray cluster as one that runs sweep points (ray start)",
    )
    n.add_argument("--head", action="store_true", help="start a new cluster here (its head)")
    n.add_argument("--address", help="the head's HOST:PORT to join (not with --head)")
    n.add_argument(
        "--port", type=int, default=6379, help="the head's port (with --head; default: %(default)s)"
    )
    n.add_argument(
        "--no-points",
        action="store_true",
        help="take no sweep points here (a head that only coordinates)",
    )
    n.add_argument(
        "--machine",
        help="this machine's name in scenarios' `placement.machines` (default: its address)",
    )
    n.add_argument(
        "--underlay",
        help="the IPv4 address other machines reach this one at for VXLAN cables "
        "(default: its Ray address)",
    )
    n.set_defaults(fn=cmd_ray_node)


def ray_start_argv(
    ray: str,
    head: bool,
    address: str | None,
    port: int,
    points: bool,
    machine: str | None = None,
    underlay: str | None = None,
) -> list[str]:
    """``ray start`` for a testbed machine: no CPUs for Ray's tasks (points take none and a
    measuring machine runs nothing else), the custom resource a point or a topology's part
    needs, no dashboard; its name and underlay address as node labels (testbed.live.spanned)."""
    from testbed.config.placement import MACHINE_NAME
    from testbed.live.spanned import MACHINE_LABEL, UNDERLAY_LABEL

    argv = [ray, "start", "--num-cpus", "0", "--disable-usage-stats"]
    argv += ["--head", "--port", str(port), "--include-dashboard", "false"] if head else []
    argv += ["--address", address] if address else []
    if points:
        argv += ["--resources", '{"testbed": 1}']
    labels = []
    if machine is not None:
        if not MACHINE_NAME.match(machine):
            raise ScenarioError(
                f"--machine {machine!r}: allowed: letters, digits and . _ : - (at most 63)"
            )
        labels.append(f"{MACHINE_LABEL}={machine}")
    if underlay is not None:
        try:
            labels.append(f"{UNDERLAY_LABEL}={ipaddress.IPv4Address(underlay)}")
        except ValueError:
            raise ScenarioError(f"--underlay {underlay!r}: not an IPv4 address") from None
    if labels:
        argv += ["--labels", ",".join(labels)]
    return argv


def cmd_ray_node(args: argparse.Namespace) -> int:
    import os
    import shutil
    import sys

    need_root("ray-node")
    if args.head == bool(args.address):
        raise ScenarioError("testbed ray-node: give either --head or --address HOST:PORT")
    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray is None:
        raise TestbedError("ray-node needs Ray: pip install 'multicluster-testbed[ray]'")
    argv = ray_start_argv(
        ray, args.head, args.address, args.port, not args.no_points, args.machine, args.underlay
    )
    out.print(" ".join(argv), highlight=False)
    os.execv(ray, argv)
    return 0  # not reached


def cmd_run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from testbed.config.sweep import load_runs, parse_override
    from testbed.experiment.sweep import Experiment
    from testbed.plan.check import check_file

    overrides = [parse_override(s) for s in args.set]
    if args.engine:
        overrides.append(("engine", args.engine))
    checked = check_file(args.file, overrides)  # every problem before anything runs, at once
    if checked.problems:
        raise ScenarioError(checked.text())
    runs = load_runs(args.file, overrides)
    if args.emit_slurm_array:
        import sys

        from testbed.distributed.slurm import slurm_array

        sets = [*args.set, *([f"engine={args.engine}"] if args.engine else [])]
        me = Path(sys.argv[0]) if sys.argv else Path("testbed")
        testbed = str(me.resolve()) if me.name == "testbed" and me.exists() else "testbed"
        print(
            slurm_array(
                args.file, [r.run_id for r in runs], args.out, testbed, tuple(sets),
                args.slurm_parallel,
            ),
            end="",
        )  # fmt: skip
        return 0
    if args.point is not None:
        if not 0 <= args.point < len(runs):
            raise ScenarioError(
                f"--point {args.point}: {args.file} has {len(runs)} run(s): 0 to {len(runs) - 1}"
            )
        runs = [runs[args.point]]
    # a scenario placed on several machines: each run spans the Ray cluster's machines (one
    # run after the other); otherwise --ray spreads the runs over its machines
    spanned = any(r.scenario.placement is not None for r in runs)
    if spanned and not args.ray:
        raise ScenarioError(
            f"{args.file}: placement: its clusters are on several machines; run it with "
            "--ray ADDRESS (the Ray cluster of those machines, docs/scale-out.md)"
        )
    need_root("run")
    if args.ray == "local" and spanned:
        raise ScenarioError(
            f"{args.file}: placement: its clusters are on several machines; --ray local is "
            "this machine alone: give the Ray cluster of those machines (--ray ADDRESS)"
        )
    if args.ray == "local":
        from testbed.live.ray_common import require_ray

        require_ray()  # before a results directory is made; the cluster starts with the runs
    elif args.ray:
        from testbed.live.ray_common import connect_ray

        connect_ray(args.ray)  # before a results directory is made
    exp = Experiment(runs, args.file, args.resume or args.out, resume=bool(args.resume))
    if spanned:
        exp.ray_address = args.ray
    pending = [r for r in runs if not exp.done(r)]
    out.print(f"{len(runs)} run(s), {len(pending)} to do; results: {escape(exp.results.path)}")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    interrupted = False
    which = "none" if args.ray else (args.follow or default_follow(runs))
    following: list[Follower] = []
    # the phase of the run in progress and the ETA; a run on this machine only (a Ray
    # cluster's points run elsewhere, several at once)
    watched = not args.ray
    eta = Eta(estimates(pending, args.selfcheck) if watched else {})
    watch = PhaseWatch(out, eta, [r.run_id for r in pending], out.is_terminal)
    local: list[Any] = []  # the --ray local cluster while it runs: its processes recorded
    with Progress(*columns, console=out, transient=True) as progress, watch:
        task = progress.add_task("starting", total=len(pending))
        watch.show = lambda text: progress.update(task, description=escape(text))

        def on_start(spec) -> None:
            for cluster in local:
                cluster.snapshot()
            progress.update(task, description=escape(f"{spec.run_id} {spec.label()}"))
            if watched:
                run_dir = exp.results.path / "runs" / spec.run_id
                what = counting(spec.scenario.rank_workload, bool(spec.scenario.flows))
                watch.start_run(spec.run_id, spec.label(), run_dir, what, spec.scenario.name)
            if which != "none":
                run_dir = exp.results.path / "runs" / spec.run_id
                emit = lambda t: progress.console.print(t, soft_wrap=True)  # noqa: E731
                following.append(Follower(run_dir, which, emit).__enter__())

        def on_done(spec, result) -> None:
            while following:
                following.pop().stop()
            if watched:
                watch.end_run(spec.run_id)
            progress.advance(task)
            colour = {"ok": "green", "skipped": "yellow"}.get(result.status, "red")
            backend = result.info.get("backend") or "-"
            text = f"[{colour}]{result.status}[/] {escape(spec.run_id)} {escape(spec.label())} "
            text += f"(backend {escape(backend)})"
            if result.reason:
                text += f": {escape(result.reason)}"
            progress.console.print(text, highlight=False)

        try:
            if args.ray and not spanned:
                from testbed.distributed.ray_sweep import run_on_ray

                if args.ray == "local":
                    from testbed.cli.ray_local import LocalRay

                    with LocalRay() as cluster:
                        local.append(cluster)
                        ok = run_on_ray(exp, "local", args.selfcheck, on_start, on_done)
                else:
                    ok = run_on_ray(exp, args.ray, args.selfcheck, on_start, on_done)
            else:
                ok = exp.run(args.selfcheck, on_start, on_done)
        except KeyboardInterrupt:
            interrupted, ok = True, False
        finally:
            while following:
                following.pop().stop()
    print_summary(exp)
    checks = [] if interrupted else exp.check_expectations()
    for c in checks:
        colour = {"passed": "green", "failed": "red"}.get(c.status, "yellow")
        out.print(f"[{colour}]{escape(c.text())}[/]", highlight=False)
    failed_checks = [c for c in checks if c.status == "failed"]
    if checks:
        out.print(
            f"expectations: {sum(c.status == 'passed' for c in checks)} passed, "
            f"{len(failed_checks)} failed, {sum(c.status == 'unchecked' for c in checks)} unchecked"
        )
    if args.junit and not interrupted:
        from testbed.cli.junit import write_junit

        name = exp.runs[0].scenario.name if exp.runs else Path(args.file).stem
        junit = write_junit(args.junit, name, checks, watch.durations)
        out.print(f"junit: {escape(junit)}", highlight=False, soft_wrap=True)
    if interrupted:
        err.print(
            f"interrupted; what was measured is in {exp.results.path} "
            f"(continue with --resume {exp.results.path})"
        )
        return 130
    print_ending(exp.results.path)
    return 0 if ok and not failed_checks else 1


def default_follow(runs: list[Any]) -> str:
    """Rank 0's output when the runs are a user's own program (workload kind command), else
    none (the built-in rank modules' logs are the testbed's own)."""
    kinds = {getattr(r.scenario.rank_workload, "kind", None) for r in runs}
    return "0" if "command" in kinds else "none"


def print_ending(results: Path) -> None:
    """A run's last lines: where its results are and the command that makes their report."""
    say: dict[str, Any] = {"highlight": False, "soft_wrap": True}  # copyable at any width
    out.print(f"results: {escape(results)}", **say)
    out.print(f"report:  testbed report {escape(shlex.quote(str(results)))}", **say)


def print_summary(exp) -> None:
    from analysis.display import dcqcn_display, dynamics_display
    from testbed.experiment.workloads import kind_of

    links = exp.tables.get("links") or []
    if links:
        print_checks(links)
    workloads = [r.scenario.rank_workload for r in exp.runs]
    kinds = dict.fromkeys(kind_of(w) for w in workloads if w is not None)
    for kind in kinds:
        shown = kind.table(exp.summaries, list(exp.runs[0].params))
        if shown is not None and not shown[1].empty:
            print_frame(*shown)
    params = list(exp.runs[0].params)
    runs = {
        r.run_id: exp.manifest["runs"][r.run_id]
        for r in exp.runs
        if r.run_id in exp.manifest["runs"]
    }
    tables = [
        ("WAN dynamics and faults (per run: the worst over its faults)",
         dynamics_display(runs, exp.summaries, params)),
        ("DCQCN flows (settled half; model = DCQCN's fluid model, discrete = its discrete"
         " marks; dilated units)",
         dcqcn_display(exp.summaries, params)),
    ]  # fmt: skip
    for title, frame in tables:
        if not frame.empty:
            print_frame(title, frame)
    for run_id, info in exp.manifest["runs"].items():
        if info["status"] != "ok":
            colour = "yellow" if info["status"] == "skipped" else "red"
            out.print(
                f"[{colour}]{info['status']}[/] {escape(run_id)}: {escape(info['reason'])}",
                highlight=False,
            )
        for skip in info.get("skipped_combinations") or []:
            out.print(
                f"[yellow]not run[/] {escape(run_id)} {escape(skip.get('collective'))} "
                f"{escape(skip.get('algorithm'))}: {escape(skip.get('skipped'))}",
                highlight=False,
            )


def print_frame(title: str, frame: Any) -> None:
    """A table of analysis.display (text cells) in the terminal, right-aligned; a ``status``
    column in green where it says ok, else red."""
    t = Table(title=title)
    for col in frame.columns:
        t.add_column(str(col), justify="right")
    status = list(frame.columns).index("status") if "status" in frame.columns else None
    for row in frame.itertuples(index=False):
        cells = [escape(str(v)) for v in row]
        if status is not None:
            colour = "green" if row[status] == "ok" else "red"
            cells[status] = f"[{colour}]{cells[status]}[/]"
        t.add_row(*cells)
    out.print(t)


def print_checks(links: list[dict]) -> None:
    """The link self-check (links.parquet rows) as analysis.display shows it in the report."""
    from analysis.display import selfcheck_display

    print_frame("link self-check", selfcheck_display(links))
