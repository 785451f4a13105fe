"""The ``testbed report`` and ``testbed compare`` verbs: thin printing over :mod:`analysis`.

Neither needs root or touches the network. Exit codes: 0 ok (compare: nothing regressed), 1
compare found a regression beyond the tolerance, 2 bad input (no such directory, not a results
directory, no matching runs, a bad tolerance, the same results on both sides of a compare),
printed as one line without a traceback. compare also writes its verdict to a file and warns
when the two sides' networks, backends or CPU flags differ.
``analysis`` (pandas, matplotlib) is imported inside the verbs so other verbs start fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from testbed.cli.console import make_console
from testbed.core.errors import TestbedError
from testbed.core.units import format_duration, format_percent, format_size, parse_percent

out = make_console()


class ReportError(TestbedError):
    """Bad input to report/compare: the message names the path or value and what was expected."""

    exit_code = 2


def register(sub: Any) -> None:
    """Register ``report`` and ``compare`` on the CLI's sub-parsers."""
    s = sub.add_parser(
        "report",
        help="write report.html (plots embedded), report.md and CSV summaries of results",
    )
    s.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="a results directory (testbed run's output), a directory of them, or several",
    )
    s.add_argument("--out", help="output directory (default: RESULTS/report)")
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser(
        "compare",
        help="compare collective or training step times (or a command workload's metrics) of "
        "two results sets; exit 1 when something regressed",
    )
    s.add_argument("base", metavar="BASE", help="results directory (or directory of them)")
    s.add_argument("new", metavar="NEW", help="results directory (or directory of them)")
    s.add_argument(
        "--tolerance",
        default="10%",
        help="allowed change of time p50 before a row counts as regressed/improved (default 10%%)",
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="print the comparison as JSON instead of the table (docs/json.md)",
    )
    s.add_argument(
        "--verdict",
        metavar="FILE",
        help="where the verdict is also written (a .json name: the JSON; default: NEW/compare.txt)",
    )
    s.set_defaults(fn=cmd_compare)


def _load(paths: Any) -> Any:
    from analysis.loader import ResultsError, load

    try:
        return load(paths)
    except ResultsError as exc:
        raise ReportError(str(exc)) from None


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.report import write_report

    res = _load(args.results)
    report = write_report(res, args.out)
    # Paths are printed unwrapped, so they can be copied from any terminal width.
    say: dict[str, Any] = {"highlight": False, "soft_wrap": True}
    _print_headlines(report.headlines)
    out.print(f"report: {report.html}", **say)
    out.print(f"        {report.markdown}", **say)
    names = f" ({', '.join(p.stem for p in report.pngs)})" if report.pngs else ""
    out.print(f"plots:  {len(report.pngs)} in {report.out / 'plots'}{names}", **say)
    out.print(f"tables: {', '.join(p.name for p in report.csvs)} in {report.out}", **say)
    if not report.warnings.empty:
        counts = report.warnings["kind"].value_counts()
        text = ", ".join(f"{n} {k}" for k, n in counts.items())
        out.print(f"[yellow]warnings:[/] {text} (listed in the report)", **say)
    return 0


def _print_headlines(headlines: list[Any]) -> None:
    """The answer first: per scenario its question, the expectations' verdict with a line each,
    and the main comparison (what the report's Overview opens with)."""
    colour = {True: "green", False: "bold red", None: ""}
    for h in headlines:
        out.print(f"[bold]{escape(h.scenario)}[/]", highlight=False)
        if h.question:
            out.print(f"  question: {escape(h.question)}", highlight=False)
        style = colour[h.ok]
        verdict = escape(h.verdict)
        out.print(f"  [{style}]{verdict}[/]" if style else f"  {verdict}", highlight=False)
        for line in [*h.checks, *h.findings]:
            out.print(f"    {escape(line)}", highlight=False)


VERDICT_STYLE = {
    "regressed": "bold red",
    "improved": "green",
    "same": "",
    "still failing": "yellow",
    "fixed": "green",
}


def cmd_compare(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from analysis.compare import compare, comparison_json, differences, identical
    from analysis.loader import ResultsError

    try:
        tolerance = parse_percent(args.tolerance)
    except ValueError as exc:
        raise ReportError(f"--tolerance: {exc}") from None
    if Path(args.base).resolve() == Path(args.new).resolve():
        raise ReportError(
            f"BASE and NEW are the same directory ({args.base}): compare a results set with "
            "another run's"
        )
    base, new = _load(args.base), _load(args.new)
    if identical(base, new):
        raise ReportError(
            f"{args.base} and {args.new} hold identical results (equal manifest.json): a copy "
            "compared with itself says nothing; compare with another run's results"
        )
    try:
        cmp = compare(base, new, tolerance)
    except ResultsError as exc:
        raise ReportError(f"{args.base} vs {args.new}: {exc}") from None
    warnings = differences(base, new)
    verdict_path = Path(args.verdict) if args.verdict else Path(args.new) / "compare.txt"
    doc = comparison_json(cmp, warnings) | {"base": str(args.base), "new": str(args.new)}
    if args.json:
        print(json.dumps(doc, indent=2))
        _write_verdict(verdict_path, doc, None)
        return 1 if cmp.regressed else 0
    for w in warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    training = cmp.kind == "training"
    if cmp.kind == "command":
        return _print_command_comparison(args, cmp, doc, verdict_path, tolerance)
    what = "training step time p50" if training else "collective time p50"
    t = Table(title=f"{what}: NEW {args.new} vs BASE {args.base}")
    if training:
        columns = [*cmp.params, "algorithm", "base p50", "new p50", "change"]
        columns += ["base time to loss", "new time to loss", "verdict"]
    else:
        columns = [*cmp.params, "collective", "algorithm", "size", "base p50", "new p50"]
        columns += ["change", "base busbw", "new busbw", "verdict"]
    for col in columns:
        t.add_column(col, justify="left" if col in cmp.params else "right")
    for r in cmp.table.to_dict("records"):
        style = VERDICT_STYLE.get(r["verdict"], "")
        what_cells = (
            [r["algorithm"]]
            if training
            else [r["collective"], r["algorithm"], format_size(r["size"])]
        )
        second = (
            [_time(r["base_time_to_loss"]), _time(r["new_time_to_loss"])]
            if training
            else [_bw(r["base_busbw"]), _bw(r["new_busbw"])]
        )
        t.add_row(
            *(str(r[p]) for p in cmp.params),
            *what_cells,
            _time(r["base_time_p50"]),
            _time(r["new_time_p50"]),
            _change(r["ratio"]),
            *second,
            f"[{style}]{r['verdict']}[/]" if style else r["verdict"],
        )
    out.print(t)
    for label, rows in (("only in BASE", cmp.only_base), ("only in NEW", cmp.only_new)):
        for r in rows.to_dict("records"):
            where = ", ".join(f"{p}={r[p]}" for p in cmp.params if r.get(p) not in (None, ""))
            point = (
                r["algorithm"]
                if training
                else (f"{r['collective']} {r['algorithm']} {format_size(r['size'])}")
            )
            out.print(
                f"[yellow]unmatched[/] ({label}): {where + ' ' if where else ''}{point}",
                highlight=False,
            )
    worst = cmp.table.dropna(subset=["ratio"]).sort_values("ratio").tail(1)
    slowest = ""
    if not worst.empty:
        w = worst.iloc[0]
        where = ", ".join(f"{p}={w[p]}" for p in cmp.params if w[p] not in (None, ""))
        point = (
            w["algorithm"]
            if training
            else (f"{w['collective']} {w['algorithm']} {format_size(w['size'])}")
        )
        slowest = f"; worst {_change(w['ratio'])} ({point}{', ' + where if where else ''})"
    return _conclude(cmp, doc, verdict_path, tolerance, f"time p50{slowest}")


def _print_command_comparison(
    args: argparse.Namespace, cmp: Any, doc: dict[str, Any], verdict_path: Any, tolerance: float
) -> int:
    """``compare``'s table for a command workload: per sweep point and metric of its metric
    lines, the p50 on both sides (a higher one is regressed, as a time is)."""
    t = Table(title=f"command metric p50: NEW {args.new} vs BASE {args.base}")
    columns = [*cmp.params, "metric", "base p50", "new p50", "change", "base lines", "new lines"]
    for col in [*columns, "verdict"]:
        t.add_column(col, justify="left" if col in (*cmp.params, "metric") else "right")
    for r in cmp.table.to_dict("records"):
        style = VERDICT_STYLE.get(r["verdict"], "")
        t.add_row(
            *(str(r[p]) for p in cmp.params), str(r["metric"]),
            *("-" if _missing(r[c]) else f"{float(r[c]):.6g}" for c in ("base_p50", "new_p50")),
            _change(r["ratio"]),
            *("-" if _missing(r[c]) else str(int(r[c])) for c in ("base_samples", "new_samples")),
            f"[{style}]{r['verdict']}[/]" if style else r["verdict"],
        )  # fmt: skip
    out.print(t)
    for label, rows in (("only in BASE", cmp.only_base), ("only in NEW", cmp.only_new)):
        for r in rows.to_dict("records"):
            where = ", ".join(f"{p}={r[p]}" for p in cmp.params if r.get(p) not in (None, ""))
            out.print(f"[yellow]unmatched[/] ({label}): {where} {r['metric']}", highlight=False)
    return _conclude(cmp, doc, verdict_path, tolerance, "each metric's p50")


def _conclude(
    cmp: Any, doc: dict[str, Any], verdict_path: Any, tolerance: float, basis: str
) -> int:
    """``compare``'s last line (verdict, counts, unmatched, the tolerance on ``basis``), printed
    and written to ``verdict_path``; the exit code (1: regressed)."""
    counts = cmp.counts()
    order = ("regressed", "improved", "same", "still failing", "fixed")
    text = ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))
    unmatched = len(cmp.only_base) + len(cmp.only_new)
    verdict = "[bold red]REGRESSED[/]" if cmp.regressed else "[green]OK[/]"
    line = (
        f"{verdict}: {len(cmp.table)} matched ({text}); {unmatched} unmatched; tolerance "
        f"{format_percent(tolerance)} on {basis}"
    )
    out.print(line, highlight=False, soft_wrap=True)
    _write_verdict(verdict_path, doc, Text.from_markup(line).plain)
    out.print(f"verdict: {escape(str(verdict_path))}", highlight=False, soft_wrap=True)
    return 1 if cmp.regressed else 0


def _write_verdict(path: Any, doc: dict[str, Any], line: str | None) -> None:
    """The verdict in a file for a CI job to keep: the JSON for a ``.json`` name, else the
    verdict line, the warnings and both sides' paths as text."""
    import json

    if path.suffix == ".json":
        text = json.dumps(doc, indent=2) + "\n"
    else:
        head = line or f"{doc['verdict'].upper()}: {doc['matched']} matched"
        lines = [head, f"BASE: {doc['base']}", f"NEW:  {doc['new']}"]
        text = "\n".join([*lines, *(f"warning: {w}" for w in doc["warnings"])]) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise ReportError(f"--verdict {path}: {exc.strerror or exc}") from None


def _missing(x: Any) -> bool:
    return x is None or x != x  # NaN is not equal to itself


def _time(x: Any) -> str:
    return "-" if _missing(x) else format_duration(float(x))


def _bw(x: Any) -> str:
    return "-" if _missing(x) else f"{float(x) / 1e6:.4g} MB/s"


def _change(ratio: Any) -> str:
    return "-" if _missing(ratio) else f"{(float(ratio) - 1) * 100:+.1f}%"
