"""Tables as a reader sees them: values with units, "-" where there is none, ✓/✗. PURE.

``testbed run`` prints these in the terminal and ``testbed report`` shows the same frames in its
HTML and Markdown (its CSVs keep the raw SI values), so the two never disagree. A column without a
table of its own here is shown by :func:`format_value`, which reads the unit from its name.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from testbed.core.units import format_duration, format_rate, format_size

CHECK, CROSS = "✓", "✗"
MINUS = "−"  # a sign, never mistaken for the "-" of a missing value
# booleans: ✓ when true; these name what a true value means, and it is the bad case
BAD_WHEN_TRUE = {"cpu_saturated": "saturated", "dcqcn_lossy": "lossy", "lossy": "lossy"}
BOOLEANS = {"correct", "ok", "survived", "passed", *BAD_WHEN_TRUE}
# unit by name: checked in this order, on the lower-cased name
_RATIO = ("_over_", "meas/pred", "speedup", "stall/pred")
_SHARE = ("_ratio", "_share", "utilisation", "util", "wan_loss", "cpu_busy", "compute")
_BYTES_PER_S = ("algbw", "busbw")
_RATE = ("_bps", "rate")
_SIZE = ("bytes", "size", "backlog")
_DURATION = ("_s", "time", "_p50", "_p95", "_p99", "predicted", "per_step", "stall", "rtt")
_DURATION += ("detect", "recover", "delay", "duration")


def _signed(text: str) -> str:
    return MINUS + text[1:] if text.startswith("-") else text


def format_bool(value: Any, bad_when_true: str = "") -> str:
    """✓ / ✗ (``-`` when missing); a flag whose true value is the bad case (``bad_when_true``
    names it) reads ``✗ <name>`` when set and ✓ when not."""
    if _none(value):
        return "-"
    flag = bool(value)
    if bad_when_true:
        return f"{CROSS} {bad_when_true}" if flag else CHECK
    return CHECK if flag else CROSS


def format_number(value: Any, spec: str = ".4g") -> str:
    """A plain number: whole values as integers (thousands grouped), others with ``spec``
    significant digits; 1e5 and above grouped rather than in exponent form."""
    if _none(value):
        return "-"
    v = float(value)
    if math.isinf(v):
        return _signed(str(v))
    if v == int(v) or abs(v) >= 1e5:
        return _signed(f"{v:,.0f}")
    return _signed(format(v, spec))


def format_value(name: str, value: Any) -> str:
    """``value`` of the column or metric ``name`` with the unit its name says (``_s`` and times:
    a duration, ``_bps``: a rate, bytes and sizes: binary sizes, algbw/busbw: MB/s, ratios and
    shares: a ratio or a percentage, flags: ✓/✗), else a plain number; "-" when missing."""
    key = name.lower()
    if key in BOOLEANS or isinstance(value, bool):
        return format_bool(value, BAD_WHEN_TRUE.get(key, ""))
    if isinstance(value, str):
        return value
    if _none(value):
        return "-"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if any(k in key for k in _RATIO):
        return f"{v:.2f}" + ("×" if "speedup" in key else "")
    if any(k in key for k in _SHARE):
        return _signed(f"{v:.2%}" if abs(v) >= 0.999 and abs(v) < 1 else f"{v * 100:.4g}%")
    if key in _BYTES_PER_S:
        return _signed(f"{v / 1e6:.4g} MB/s")
    if key.endswith("_ms"):
        return _signed(f"{v:.4g} ms")
    if any(key.endswith(k) for k in _RATE):
        return _signed(format_rate(v)) if v >= 0 else MINUS + format_rate(-v)
    if any(k in key for k in _SIZE):
        return format_size(v) if v >= 0 else MINUS + format_size(-v)
    if any(key.endswith(k) or k in key for k in _DURATION):
        return _signed(format_duration(v)) if v else "0 s"
    return format_number(v)


def format_row_label(row: str) -> str:
    """An expectation's row as ``testbed run`` names it, its sizes in binary units
    ('p000-r0 all_reduce/flat/16777216 B' -> '... /16 MiB')."""
    return re.sub(r"\b(\d+) B\b", lambda m: format_size(int(m.group(1))), row)


def terms_display(terms: dict[str, Any], predicted: Any) -> tuple[dict[str, str], str]:
    """A prediction's terms and total in one unit (chosen by the total) to 0.1 of it, the first
    term as it is and the others signed (+/−), so that the shown terms add up to the shown total
    (within their rounding); missing terms "-"."""
    present = [float(v) for v in terms.values() if not _none(v)]
    scale_of = abs(float(predicted)) if not _none(predicted) else max(map(abs, present), default=0)
    unit, scale = ("s", 1.0) if scale_of >= 10 else ("ms", 1e3) if scale_of >= 1e-3 else ("us", 1e6)
    decimals = 3 if unit == "s" else 1
    shown: dict[str, str] = {}
    for i, (name, v) in enumerate(terms.items()):
        if _none(v):
            shown[name] = "-"
            continue
        value = round(float(v) * scale, decimals) + 0.0  # -0.0 reads as a cost taken off
        text = f"{value:{'+' if i else ''}.{decimals}f} {unit}"
        shown[name] = _signed(text)
    total = "-" if _none(predicted) else _signed(f"{float(predicted) * scale:.{decimals}f} {unit}")
    return shown, total


# -- the network of each run -------------------------------------------------------------------
NETWORK_COLUMNS = ["runs", "link", "direction", "rate", "RTT", "loss", "buffer", "queue"]
NETWORK_COLUMNS += ["backend"]


def _directions(link: dict[str, Any]) -> list[tuple[str, dict[str, Any], float]]:
    """(direction, settings, RTT) of a resolved WAN link (or path): forward as written, reverse
    with ``reverse`` applied; RTT = forward + reverse delay (as the plan sizes a BDP)."""
    a, b = (link.get("between") or ["?", "?"])[:2]
    fwd = {k: link.get(k) for k in ("rate", "delay", "jitter", "loss", "buffer", "aqm")}
    rev = {**fwd, **{k: v for k, v in (link.get("reverse") or {}).items() if v is not None}}
    rtt = float(fwd.get("delay") or 0) + float(rev.get("delay") or 0)
    return [(f"{a}->{b}", fwd, rtt), (f"{b}->{a}", rev, rtt)]


def _buffer(buffer: Any, rate: float, rtt: float) -> str:
    if not buffer:
        return "-"
    kind, amount = buffer[0], float(buffer[1])
    if kind == "bdp":
        return f"{amount:g} BDP ({format_size(math.ceil(amount * rate * rtt / 8))})"
    return format_size(amount)


def _rtt(rtt: float, jitter: float) -> str:
    text = format_duration(rtt) if rtt else "0 s"
    return text + (f" ±{format_duration(jitter)}" if jitter else "")


def _queue(aqm: Any) -> str:
    if not aqm:
        return "drop-tail"
    kind = str(aqm.get("kind", "?"))
    return kind + (" + ECN" if aqm.get("ecn") else "")


def _run_network(run: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for i, link in enumerate((run.get("resolved") or {}).get("wan") or []):
        paths = link.get("paths") or []
        parts = [({**link, **p, "between": link.get("between")}, f"/{j}") for j, p in
                 enumerate(paths)] or [(link, "")]  # fmt: skip
        for part, suffix in parts:
            for direction, d, rtt in _directions(part):
                rate = float(d.get("rate") or 0)
                rows.append(
                    {
                        "link": f"wan[{i}]{suffix}",
                        "direction": direction,
                        "rate": format_rate(rate) if rate else "-",
                        "RTT": _rtt(rtt, float(d.get("jitter") or 0)),
                        "loss": f"{float(d.get('loss') or 0) * 100:.3g}%",
                        "buffer": _buffer(d.get("buffer"), rate, rtt),
                        "queue": _queue(d.get("aqm")),
                        "backend": str(run.get("backend") or "-"),
                    }
                )
    return rows


def network_display(runs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The WAN each run had (manifest ``runs`` with their resolved scenarios), a row per link x
    direction: rate, RTT (forward + reverse delay), loss, buffer (with its bytes), queue and
    backend. Runs with the same network share their rows (``runs``: all, or the run ids)."""
    groups: dict[str, tuple[list[str], list[dict[str, str]]]] = {}
    for run_id, run in runs.items():
        rows = _run_network(run)
        if not rows:
            continue
        key = repr(rows)
        groups.setdefault(key, ([], rows))[0].append(run_id)
    out = []
    every = len(groups) == 1 and len(runs) > 0
    for ids, rows in groups.values():
        label = "all" if every else ", ".join(ids)
        out += [{"runs": label, **r} for r in rows]
    return pd.DataFrame(out, columns=NETWORK_COLUMNS)


def network_summary(runs: dict[str, dict[str, Any]]) -> str:
    """One line for a figure's title: per WAN link its rate, RTT, loss and buffer, the values a
    sweep took joined by ``|`` ('east↔west 50 | 200 Mbit/s, RTT 10 ms, loss 0%, 1 BDP')."""
    links: dict[str, dict[str, list[str]]] = {}
    for run in runs.values():
        for i, link in enumerate((run.get("resolved") or {}).get("wan") or []):
            a, b = (link.get("between") or ["?", "?"])[:2]
            name = f"{a}↔{b}" + (f" (wan[{i}])" if i else "")
            seen = links.setdefault(name, {"rate": [], "rtt": [], "loss": [], "buffer": []})
            for _direction, d, rtt in _directions(link):
                rate = float(d.get("rate") or 0)
                seen["rate"].append(format_rate(rate) if rate else "-")
                seen["rtt"].append(format_duration(rtt) if rtt else "0 s")
                seen["loss"].append(f"{float(d.get('loss') or 0) * 100:.3g}%")
                buf = d.get("buffer")
                seen["buffer"].append(
                    f"{float(buf[1]):g} BDP" if buf and buf[0] == "bdp" else _buffer(buf, 0, 0)
                )
    parts = []
    for name, seen in links.items():
        values = {k: list(dict.fromkeys(v)) for k, v in seen.items()}
        rates = values["rate"]
        units = {r.split(" ", 1)[-1] for r in rates}
        rate = (
            " | ".join(r.split(" ", 1)[0] for r in rates) + " " + units.pop()
            if len(units) == 1 and len(rates) > 1
            else " | ".join(rates)
        )
        parts.append(
            f"{name} {rate}, RTT {' | '.join(values['rtt'])}, loss {' | '.join(values['loss'])}, "
            + " | ".join(values["buffer"])
        )
    return "; ".join(parts) or "no WAN"


SELFCHECK_COLUMNS = [
    "direction", "RTT conf", "RTT p50", "RTT p99", "floor", "capacity", "goodput conf",
    "goodput", "ratio", "cc", "status",
]  # fmt: skip


def _none(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _flag(value: Any) -> bool:
    return not _none(value) and bool(value)


def _cross(problem: Any) -> str:
    return CROSS if _none(problem) or not problem else f"{CROSS} {problem}"


def _duration(value: Any) -> str:
    return "-" if _none(value) else format_duration(float(value))


def _share(value: Any) -> str:
    return "-" if _none(value) else f"{float(value):.1%}"


def selfcheck_display(links: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
    """The link self-check (links.parquet rows), a row per run x direction: configured and
    measured RTT, the floor taken off at bring-up ("-": not compensated, or an older file),
    capacity and goodput against the configured ceiling, the congestion control, and ``ok`` or
    what is wrong."""
    frame = pd.DataFrame(links)
    out = []
    for r in frame.to_dict("records"):
        good = r.get("goodput_bps")
        out.append(
            {
                "direction": r["direction"],
                "RTT conf": _duration(r.get("rtt_configured_s")),
                "RTT p50": _duration(r.get("rtt_median_s")),
                "RTT p99": _duration(r.get("rtt_p99_s")),
                "floor": _duration(r.get("floor_s")),
                "capacity": _share(r.get("capacity_ratio")),
                "goodput conf": format_rate(float(r["goodput_configured_bps"])),
                "goodput": "-" if _none(good) or not good else format_rate(float(good)),
                "ratio": "-" if not r.get("goodput_ratio") else _share(r["goodput_ratio"]),
                "cc": r.get("congestion"),
                "status": CHECK if _flag(r.get("ok")) else _cross(r.get("problem")),
            }
        )
    return pd.DataFrame(out, columns=SELFCHECK_COLUMNS)


COLLECTIVES_COLUMNS = [
    "collective", "algorithm", "size", "n", "p50", "p95", "algbw", "busbw", "predicted",
    "meas/pred", "flags",
]  # fmt: skip


def collectives_display(
    summary: pd.DataFrame | list[dict[str, Any]], params: list[str]
) -> pd.DataFrame:
    """The collectives summary (nccl-tests conventions: time = the slowest rank per iteration),
    a row per run x collective x algorithm x size, the sweep ``params`` in front: p50/p95,
    algbw/busbw, the α-β prediction and measured/predicted, flags (CPU-saturated, WRONG,
    loss-unpriced: the WAN retransmitted where the model priced no loss)."""
    frame = pd.DataFrame(summary)
    out = []
    for s in frame.to_dict("records"):
        if _none(s.get("collective")):  # a run whose every operation failed: faults only
            continue
        flags = []
        if _flag(s.get("cpu_saturated")):
            flags.append("CPU-saturated")
        if not _none(s.get("correct")) and not s.get("correct"):
            flags.append("WRONG")
        if not _none(s.get("wan_retransmits")) and s["wan_retransmits"] and not s.get("model_loss"):
            # the WAN lost segments the model priced no loss for (a slow-start overshoot, a
            # loss in a minority of the steps): the prediction is a floor
            flags.append("loss-unpriced")
        pred, ratio = s.get("predicted"), s.get("measured_over_predicted")
        out.append(
            {
                **{p: "" if _none(s.get(p)) else str(s.get(p)) for p in params},
                "collective": str(s["collective"]),
                "algorithm": str(s["algorithm"]),
                "size": format_size(float(s["size"])),
                "n": str(int(s["ranks"])),
                "p50": format_duration(float(s["time_p50"])),
                "p95": format_duration(float(s["time_p95"])),
                "algbw": f"{float(s['algbw']) / 1e6:.1f} MB/s",
                "busbw": f"{float(s['busbw']) / 1e6:.1f} MB/s",
                "predicted": "-" if _none(pred) or not pred else format_duration(float(pred)),
                "meas/pred": "-" if _none(ratio) or not ratio else f"{float(ratio):.2f}",
                "flags": " ".join(flags),
            }
        )
    return pd.DataFrame(out, columns=[*params, *COLLECTIVES_COLUMNS])


TRAINING_COLUMNS = [
    "algorithm", "steps", "final loss", "target", "time to loss", "step p50", "step p95",
    "WAN/step", "comm/step", "predicted", "meas/pred", "compute", "flags",
]  # fmt: skip


def training_display(
    summary: pd.DataFrame | list[dict[str, Any]], params: list[str]
) -> pd.DataFrame:
    """The training summary, a row per run (step time = the slowest rank's; WAN bytes = both
    directions' counters), the sweep ``params`` in front (``workload.algorithm`` is the
    ``algorithm`` column)."""
    frame = pd.DataFrame(summary)
    params = [p for p in params if p != "workload.algorithm"]

    def num(v: Any, fmt: str) -> str:
        return "-" if _none(v) else format(float(v), fmt)

    out = []
    for s in frame.to_dict("records"):
        if "final_loss" not in s:  # a run whose every operation failed: faults only
            continue
        target = num(s.get("target_loss"), ".3f")
        if s.get("target_from") == "ddp":
            target += " (ddp)"
        wan = s.get("wan_bytes_per_step")
        out.append(
            {
                **{p: "-" if _none(s.get(p)) else str(s.get(p)) for p in params},
                "algorithm": str(s.get("algorithm")),
                "steps": str(s.get("steps") if _none(s.get("steps")) else int(s["steps"])),
                "final loss": num(s.get("final_loss"), ".3f"),
                "target": target,
                "time to loss": "-"
                if _none(s.get("target_loss"))
                else _duration(s.get("time_to_loss")),
                "step p50": _duration(s.get("step_time_p50")),
                "step p95": _duration(s.get("step_time_p95")),
                "WAN/step": _value(wan, lambda v: format_size(round(float(v)))),
                "comm/step": _duration(s.get("comm_per_step")),
                "predicted": _duration(s.get("predicted_comm_per_step")),
                "meas/pred": num(s.get("comm_measured_over_predicted"), ".2f"),
                "compute": num(s.get("compute_utilisation"), ".0%"),
                "flags": "CPU-saturated" if _flag(s.get("cpu_saturated")) else "",
            }
        )
    return pd.DataFrame(out, columns=[*params, *TRAINING_COLUMNS])


def _value(v: Any, fmt: Any) -> str:
    return "-" if _none(v) else fmt(v)


def dynamics_display(
    runs: dict[str, dict[str, Any]], summary: list[dict[str, Any]], params: list[str]
) -> pd.DataFrame:
    """Per run with a changing WAN (manifest ``runs``, in order): its events applied, late and
    failed, and the worst of its faults (the summary's ``fault_*`` metrics)."""
    worst = {s["run_id"]: s for s in summary if "fault_detect" in s}
    columns = [*params, "events", "late", "failed", "detect", "stall", "stall/pred", "recover"]
    columns += ["survived", "trace corr"]
    out = []
    for run_id, info in runs.items():
        ev = info.get("events") or {}
        if not ev:
            continue
        s = worst.get(run_id, {})
        stall = s.get("fault_stall")
        survived = s.get("fault_survived")
        given = info.get("params") or {}
        out.append(
            [
                *(str(given.get(p, "")) for p in params),
                str(ev.get("applied", 0)),
                str(ev.get("late", 0)),
                str(ev.get("failed", 0)),
                _duration(s.get("fault_detect")),
                _duration(stall if stall is not None else s.get("fault_flow_stall")),
                _value(s.get("fault_stall_over_predicted"), lambda v: f"{v:.2f}"),
                _duration(s.get("fault_recover")),
                format_bool(survived),
                _value(s.get("trace_correlation"), lambda v: f"{v:.3f}"),
            ]
        )
    return pd.DataFrame(out, columns=columns)


def dcqcn_display(summary: list[dict[str, Any]], params: list[str]) -> pd.DataFrame:
    """Per run with DCQCN flows: measured over the settled half, each beside DCQCN's fluid
    model (dilated units); the queue and the cuts also beside the model of discrete marks
    (``discrete``: analysis.dcqcn_marks)."""
    columns = [*params, "flows", "rate", "Jain", "util", "model", "queue mean", "model"]
    columns += ["discrete", "cut every", "model", "discrete", "cut by", "model", "discrete"]
    columns += ["converge", "model", "lost"]
    out = []
    for s in summary:
        if "dcqcn_flows" not in s:
            continue
        lost = s.get("dcqcn_lost") or 0
        out.append(
            [
                *(str(s.get(p, "")) for p in params),
                f"{s['dcqcn_flows']:.0f}",
                _value(s.get("dcqcn_rate_mean_bps"), format_rate),
                _value(s.get("dcqcn_jain"), lambda v: f"{v:.3f}"),
                _value(s.get("dcqcn_utilisation"), lambda v: f"{v:.1%}"),
                _value(s.get("dcqcn_pred_utilisation"), lambda v: f"{v:.1%}"),
                _value(s.get("dcqcn_queue_mean_bytes"), format_size),
                _value(s.get("dcqcn_pred_queue_mean_bytes"), format_size),
                _value(s.get("dcqcn_pred_discrete_queue_mean_bytes"), format_size),
                _duration(s.get("dcqcn_cut_interval_s")),
                _duration(s.get("dcqcn_pred_cut_interval_s")),
                _duration(s.get("dcqcn_pred_discrete_cut_interval_s")),
                _value(s.get("dcqcn_cut_depth_bps"), format_rate),
                _value(s.get("dcqcn_pred_cut_depth_bps"), format_rate),
                _value(s.get("dcqcn_pred_discrete_cut_depth_bps"), format_rate),
                _duration(s.get("dcqcn_convergence_s")),
                _duration(s.get("dcqcn_pred_convergence_s")),
                f"{lost:.0f} LOSSY" if s.get("dcqcn_lossy") else "0",
            ]
        )
    return pd.DataFrame(out, columns=columns)
