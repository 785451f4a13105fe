"""``testbed report``: one results set -> report.html (self-contained), report.md, PNGs and CSVs.

This module owns the files and their layout (docs/results.md lists them) and the one stylesheet;
the sections, their tables and figures come from :mod:`analysis.report_sections`. Figures are
PNGs at twice their size, embedded, each titled with what it was measured on. PURE: reads
results, writes only into ``out`` (default ``<results>/report``), never imports ``testbed``'s
emulation layers.
"""

from __future__ import annotations

import base64
import html
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import command_report as CR
from analysis import fault_plots as FP
from analysis import multipath_plots as MP
from analysis import plots as P
from analysis import training_plots as TP
from analysis.loader import Results, load
from analysis.report_sections import Headline, Section, plot_stamp, sections

CSV_NAMES = ("runs", "warnings", "links", "expectations", "summary", "training", "speedup")
CSV_NAMES += ("congestion", "model_terms", "faults", "fault_drops", "trace_replay")
CSV_NAMES += ("events_lateness", "dcqcn", "path_utilisation", "flow_paths", "command")
CSV_NAMES += ("command_processes",)


@dataclass
class Report:
    """What :func:`write_report` wrote: paths, section keys, figure names and the warnings."""

    out: Path
    html: Path
    markdown: Path
    csvs: list[Path]
    pngs: list[Path]
    sections: list[str]
    warnings: pd.DataFrame
    headlines: list[Headline] = field(default_factory=list)


def default_out(res: Results) -> Path:
    """``<results>/report`` for one results directory, else ``<common parent>/report``."""
    dirs = list(res.paths.values())
    if len(dirs) == 1:
        return dirs[0] / "report"
    parents = {d.resolve().parent for d in dirs}
    base = parents.pop() if len(parents) == 1 else Path.cwd()
    return base / "report"


def write_report(source: Results | str | Path | Iterable[str | Path], out: Path | None = None):
    """Build the report of ``source`` (loaded results or paths) into ``out``; return a
    :class:`Report`."""
    res = source if isinstance(source, Results) else load(source)
    out = Path(out) if out is not None else default_out(res)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    # A report written again into the same directory must not keep figures it no longer has.
    for name in (*P.PLOT_NAMES, *TP.PLOT_NAMES, *FP.PLOT_NAMES, *MP.PLOT_NAMES):
        (out / "plots" / f"{name}.png").unlink(missing_ok=True)
    for stale in (out / "plots").glob(f"{CR.TIMELINE}*.png"):
        stale.unlink()
    for stale in (out / "plots").glob(f"{CR.METRIC_PREFIX}*.png"):
        stale.unlink()
    for name in CSV_NAMES:
        (out / f"{name}.csv").unlink(missing_ok=True)
    secs, csv = sections(res)
    stamp = plot_stamp(res)
    pngs: dict[str, tuple[Path, bytes]] = {}
    for sec in secs:
        for plot in sec.plots:
            plot.stamp = plot.stamp or stamp
            data = plot.png()
            path = out / "plots" / f"{plot.name}.png"
            path.write_bytes(data)
            pngs[plot.name] = (path, data)
    csvs = []
    for name, df in csv.items():
        path = out / f"{name}.csv"
        df.to_csv(path, index=False)
        csvs.append(path)
    title = "Report: " + ", ".join(
        dict.fromkeys(
            str((m.get("scenario") or {}).get("name", "?")) for m in res.manifests.values()
        )
    )
    files = [p.name for p in csvs]
    html_path = out / "report.html"
    html_path.write_text(_html(title, secs, pngs, files))
    md_path = out / "report.md"
    md_path.write_text(_markdown(title, secs, files))
    return Report(
        out=out,
        html=html_path,
        markdown=md_path,
        csvs=csvs,
        pngs=[p for p, _ in pngs.values()],
        sections=[s.key for s in secs],
        warnings=csv["warnings"],
        headlines=[h for s in secs for h in s.headlines],
    )


# -- HTML --------------------------------------------------------------------------------------
CSS = """
:root { --ok: #1a7f37; --bad: #c62828; --muted: #555; --line: #d0d7de; --head: #f3f5f7; }
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; color: #222;
       padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid var(--line); margin-top: 2em; }
h3 { font-size: 1em; margin: 1.2em 0 0.3em; }
nav { position: sticky; top: 0; background: #fff; padding: 0.4em 0;
      border-bottom: 1px solid var(--line); z-index: 1; }
nav a { margin-right: 1em; white-space: nowrap; }
.headline { border: 1px solid var(--line); border-left: 6px solid var(--muted);
            border-radius: 4px; padding: 0.6em 1em; margin: 1em 0; background: #fafbfc; }
.headline.ok { border-left-color: var(--ok); } .headline.bad { border-left-color: var(--bad); }
.headline h3 { margin-top: 0.2em; } .headline p { margin: 0.3em 0; }
.verdict { font-size: 1.15em; font-weight: 600; }
.ok .verdict, li.ok { color: var(--ok); } .bad .verdict, li.bad { color: var(--bad); }
.headline ul { margin: 0.3em 0; padding-left: 1.4em; }
.expected { white-space: pre-wrap; color: var(--muted); }
.scroll { overflow-x: auto; max-width: 100%; margin: 0.5em 0 1em; }
table { border-collapse: collapse; font-size: 0.85em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 2px 6px; text-align: right;
         vertical-align: top; white-space: nowrap; }
th { background: var(--head); } th.text, th.name { text-align: left; }
td.text { text-align: left; white-space: pre-wrap; min-width: 8em; max-width: 40em; }
td.name { text-align: left; }
tbody tr:nth-child(even) { background: #fafafa; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; }
dt { font-weight: bold; } dd { margin: 0; }
details > summary { cursor: pointer; color: var(--muted); }
figure { margin: 1em 0; } figcaption { font-size: 0.85em; color: var(--muted); max-width: 60em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
details.log pre { background: #f6f8fa; padding: 0.5em; overflow-x: auto; font-size: 0.8em;
                  max-height: 30em; }
"""
# prose: left-aligned and wrapped; names: left-aligned on one line; the rest (numbers) right
TEXT_COLUMNS = {"message", "reason", "problem", "label", "point", "verdict", "status"}
TEXT_COLUMNS |= {"predicted outcome", "expectation", "detail", "runs"}
NAME_COLUMNS = {"run_id", "kind", "direction", "link", "backend", "queue", "collective"}
NAME_COLUMNS |= {"algorithm", "cc", "results", "metric", "process", "host", "outcome"}


def _html_table(df: pd.DataFrame) -> str:
    esc = html.escape
    classes = [_column_class(str(c)) for c in df.columns]
    head = "".join(
        f"<th{cls}>{esc(str(c))}</th>" for c, cls in zip(df.columns, classes, strict=True)
    )
    rows = []
    for values in df.itertuples(index=False):
        cells = []
        for cls, v in zip(classes, values, strict=True):
            cells.append(f"<td{cls}>{esc('' if pd.isna(v) else str(v))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _column_class(column: str) -> str:
    if column in TEXT_COLUMNS:
        return ' class="text"'
    return ' class="name"' if column in NAME_COLUMNS else ""


def _png_width(data: bytes) -> int:
    """Pixel width of a PNG (its IHDR chunk)."""
    return struct.unpack(">I", data[16:20])[0]


def _html_headline(h: Headline) -> str:
    esc = html.escape
    cls = {True: "ok", False: "bad", None: "none"}[h.ok]
    parts = [f'<div class="headline {cls}"><h3>{esc(h.scenario)}</h3>']
    if h.question:
        parts.append(f"<p><b>Question:</b> {esc(h.question)}</p>")
    parts.append(f'<p class="verdict">{esc(h.verdict)}</p>')
    if h.checks:
        items = "".join(
            f'<li class="{"ok" if c.startswith("✓") else "bad" if c.startswith("✗") else ""}">'
            f"{esc(c)}</li>"
            for c in h.checks
        )
        parts.append(f"<ul>{items}</ul>")
    if h.findings:
        parts.append("<ul>" + "".join(f"<li>{esc(f)}</li>" for f in h.findings) + "</ul>")
    if h.expected:
        parts.append(f'<p class="expected"><b>Expected:</b> {esc(h.expected)}</p>')
    parts.append("</div>")
    return "".join(parts)


def _html(
    title: str, secs: list[Section], pngs: dict[str, tuple[Path, bytes]], files: list[str]
) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        "<nav>" + "".join(f'<a href="#{s.key}">{esc(s.title)}</a>' for s in secs) + "</nav>",
    ]
    for sec in secs:
        parts.append(f'<section id="{sec.key}"><h2>{esc(sec.title)}</h2>')
        parts += [_html_headline(h) for h in sec.headlines]
        if sec.text:
            parts.append(f"<p>{esc(sec.text)}</p>")
        if sec.pairs:
            items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in sec.pairs)
            parts.append(f"<dl>{items}</dl>")
        tables = []
        for caption, df in sec.tables:
            if caption:
                tables.append(f"<h3>{esc(caption)}</h3>")
            tables.append(_html_table(df))
        if sec.folded and tables:
            rows = sum(len(df) for _, df in sec.tables)
            tables = [f"<details><summary>Show all {rows} rows</summary>", *tables, "</details>"]
        parts += tables
        for summary, text in sec.logs:
            parts.append(
                f'<details class="log"><summary>{esc(summary)}</summary>'
                f"<pre>{esc(text)}</pre></details>"
            )
        for plot in sec.plots:
            path, data = pngs[plot.name]
            b64 = base64.b64encode(data).decode()
            width = _png_width(data) // 2  # drawn at twice the size: shown at half its pixels
            parts.append(
                f'<figure id="fig-{plot.name}"><img src="data:image/png;base64,{b64}" '
                f'width="{width}" alt="{esc(plot.full_title())}" data-file="plots/{path.name}">'
                f"<figcaption><b>{esc(plot.title)}</b> (plots/{esc(path.name)}). "
                f"{esc(plot.caption)}</figcaption></figure>"
            )
        parts.append("</section>")
    parts.append(
        '<section id="files"><h2>Files</h2><p>'
        + esc(", ".join([*files, "report.md", "plots/*.png"]))
        + "</p></section></body></html>"
    )
    return "\n".join(parts)


# -- Markdown ----------------------------------------------------------------------------------
def _md_cell(v: object) -> str:
    text = "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(_md_cell(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def _md_headline(h: Headline) -> list[str]:
    lines = [f"### {h.scenario}", ""]
    if h.question:
        lines += [f"**Question:** {h.question}", ""]
    lines += [f"**{h.verdict}**", ""]
    lines += [f"- {c}" for c in h.checks] + ([""] if h.checks else [])
    lines += [f"- {f}" for f in h.findings] + ([""] if h.findings else [])
    if h.expected:
        lines += ["**Expected:** " + h.expected.replace("\n", "  \n"), ""]
    return lines


def _markdown(title: str, secs: list[Section], files: list[str]) -> str:
    lines = [f"# {title}", ""]
    for sec in secs:
        lines += [f"## {sec.title}", ""]
        for h in sec.headlines:
            lines += _md_headline(h)
        if sec.text:
            lines += [sec.text, ""]
        for k, v in sec.pairs:
            lines.append(f"- **{k}**: {v}")
        if sec.pairs:
            lines.append("")
        for caption, df in sec.tables:
            if caption:
                lines += [f"### {caption}", ""]
            lines += [_md_table(df), ""]
        for summary, text in sec.logs:
            runs = [len(r) for r in re.findall("`+", text)]
            fence = "`" * max(3, max(runs, default=0) + 1)  # longer than any run inside
            lines += [f"<details><summary>{_md_cell(summary)}</summary>", "", f"{fence}text",
                      text, fence, "", "</details>", ""]  # fmt: skip
        for plot in sec.plots:
            lines += [f"![{plot.title}](plots/{plot.name}.png)", "", f"*{plot.caption}*", ""]
    lines += ["## Files", "", ", ".join([*files, "report.html", "plots/*.png"]), ""]
    return "\n".join(lines)
