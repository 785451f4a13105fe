"""Multipath WAN links in results (docs/multipath.md). PURE: pandas over loaded tables.

This module owns the numbers of a run's parallel paths:

* :func:`path_throughput`: per run, direction ``a->b/j`` and counter sample, the wire bit/s and
  packets/s the path's shaper sent (queues.parquet's cumulative counters, differenced);
* :func:`flow_paths`: per flow direction (5-tuple) of flowpaths.parquet, the path(s) it used in
  time order, when it moved, its bytes per path (estimated from the samples, and from the
  sender's tcp_info ``bytes_sent`` split at the move times where tcp.parquet has the socket);
* :func:`path_utilisation`: per run, window (the whole run, and each collective x algorithm x
  size) and link direction: bytes per path (shaper counters) and their shares, paths that
  carried at least CARRYING of them, and the distinct paths of the flows seen in the window;
* :func:`path_set_rates`: the rate each path direction was set to while the run went on (its
  own schedule steps and trace bins, events.parquet), for the per-path panels.

A direction of a multipath link is named ``east->west/j``; ``a->b`` is its ``base``.
"""

from __future__ import annotations

from typing import Any, SupportsFloat, SupportsInt, cast

import numpy as np
import pandas as pd

CARRYING = 0.05  # a path "carries" a direction when it has at least this share of its bytes
DATA_FLOW = 0.01  # a flow with less of a direction's bytes in a window carries no data there
RUN = ["results", "run_id"]


def split_direction(direction: pd.Series) -> tuple[pd.Series, pd.Series]:
    """``east->west/1`` -> (``east->west``, 1); a single-path direction has path <NA>."""
    parts = direction.astype(str).str.rsplit("/", n=1, expand=True)
    if parts.shape[1] < 2:
        return parts[0], pd.Series(pd.NA, index=direction.index, dtype="Int64")
    multi = parts[1].notna()
    base = parts[0].where(multi, direction.astype(str))
    return base, pd.to_numeric(parts[1], errors="coerce").astype("Int64")


def _run_keys(df: pd.DataFrame) -> pd.DataFrame:
    return df if "results" in df else df.assign(results="")


def multipath_queues(queues: pd.DataFrame) -> pd.DataFrame:
    """The counter samples of multipath directions, with ``base`` and ``path`` columns."""
    if queues.empty or "direction" not in queues:
        return pd.DataFrame()
    q = _run_keys(queues)
    q = q[q["direction"].astype(str).str.contains("/", regex=False)]
    if q.empty:
        return pd.DataFrame()
    base, path = split_direction(q["direction"])
    return q.assign(base=base, path=path)


def path_set_rates(events: pd.DataFrame) -> pd.DataFrame:
    """One row per ``set`` applied to a direction of a multipath link (a path's schedule step
    or trace bin; a burst loss sets the rate it had): ``time`` (applied, unix s), ``base``,
    ``path`` and ``rate_bps`` (0: a trace bin that holds the queue)."""
    cols = [*RUN, "base", "path", "time", "rate_bps"]
    need = {"action", "direction", "rate_bps"}
    if events.empty or not need <= set(events.columns):
        return pd.DataFrame(columns=cols)
    ev = _run_keys(events)
    ev = ev[(ev["action"] == "set") & ev["direction"].astype(str).str.contains("/", regex=False)]
    if "status" in ev:
        ev = ev[ev["status"] == "applied"]
    if ev.empty:
        return pd.DataFrame(columns=cols)
    base, path = split_direction(ev["direction"])
    applied = ev["applied_unix"] if "applied_unix" in ev else ev["scheduled_unix"]
    out = ev.assign(base=base, path=path, time=applied.astype(float))
    return out.sort_values("time")[cols].reset_index(drop=True)


def path_throughput(queues: pd.DataFrame) -> pd.DataFrame:
    """One row per run, multipath direction and counter sample after the first: ``time`` (end
    of the interval, unix s), ``base``, ``path``, ``bps`` (wire bit/s) and ``pps``. A counter
    that went backwards (a qdisc replaced) gives NaN for that interval."""
    q = multipath_queues(queues)
    cols = [*RUN, "direction", "base", "path", "time", "bps", "pps"]
    if q.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for _, g in q.sort_values("time").groupby([*RUN, "direction"], sort=False):
        dt = g["time"].diff()
        db, dp = g["bytes"].astype(float).diff(), g["packets"].astype(float).diff()
        ok = (dt > 0) & (db >= 0)
        out.append(
            g.assign(
                bps=(8 * db / dt).where(ok),
                pps=(dp / dt).where(ok),
            ).iloc[1:]
        )
    return pd.concat(out, ignore_index=True)[cols]


def _bytes_at(times: np.ndarray, counter: np.ndarray, at: float) -> float:
    """A cumulative counter at ``at`` (linear between samples, clamped at the ends)."""
    return float(np.interp(at, times, counter))


def flow_paths(flowpaths: pd.DataFrame, tcp: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run and flow direction of flowpaths.parquet: ``src_host``, ``src``,
    ``sport``, ``dst_host``, ``dst``, ``dport``, ``link``, ``base``; ``paths`` (the paths in
    time order, ``1`` or ``0>1>0``), ``moves`` and ``moved_at`` (unix s of each move: midway
    between the last sample on the old path and the first on the new), ``first``, ``last``;
    ``bytes`` (estimated from the samples) and ``bytes_by_path`` (``0: 1.2e6, 1: 3e3``);
    ``tcp_bytes_by_path``: the sender socket's ``bytes_sent`` (tcp.parquet, where it was traced)
    split at the move times, else None."""
    cols = [*RUN, "src_host", "src", "sport", "dst_host", "dst", "dport", "link", "base"]
    more = ["paths", "moves", "moved_at", "first", "last", "bytes", "bytes_by_path"]
    if flowpaths.empty:
        return pd.DataFrame(columns=[*cols, *more, "tcp_bytes_by_path"])
    fp = _run_keys(flowpaths)
    base, _ = split_direction(fp["direction"])
    fp = fp.assign(base=base).sort_values("time_from", kind="stable")
    sent = _tcp_sent(tcp)
    rows = []
    for key, g in fp.groupby(cols, sort=False, dropna=False):
        row: dict[str, Any] = dict(zip(cols, key, strict=True))
        paths = g["path"].astype(int).tolist()
        moved_at = [
            (a + b) / 2
            for a, b in zip(g["time_to"].iloc[:-1], g["time_from"].iloc[1:], strict=True)
        ]
        by_path = g.groupby("path")["bytes"].sum()
        row.update(
            paths=">".join(str(p) for p in paths),
            moves=len(paths) - 1,
            moved_at=moved_at,
            first=float(g["time_from"].min()),
            last=float(g["time_to"].max()),
            bytes=int(g["bytes"].sum()),
            bytes_by_path=_by_path_text(cast(dict[int, float], by_path.to_dict())),
            tcp_bytes_by_path=None,
        )
        series = sent.get((row["results"], row["run_id"], f"{row['src']}:{row['sport']}",
                           f"{row['dst']}:{row['dport']}"))  # fmt: skip
        if series is not None:
            times, counter = series
            edges = [-np.inf, *moved_at, np.inf]
            split: dict[int, float] = {}
            for p, a, b in zip(paths, edges[:-1], edges[1:], strict=True):
                lo = 0.0 if a == -np.inf else _bytes_at(times, counter, a)
                hi = counter[-1] if b == np.inf else _bytes_at(times, counter, b)
                split[p] = split.get(p, 0.0) + max(0.0, hi - lo)
            row["tcp_bytes_by_path"] = _by_path_text(split)
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.sort_values([*RUN, "bytes"], ascending=[True, True, False], ignore_index=True)


def _by_path_text(by_path: dict[int, float]) -> str:
    return ", ".join(f"{int(p)}: {v:.3g}" for p, v in sorted(by_path.items()))


def _tcp_sent(tcp: pd.DataFrame | None) -> dict[tuple[str, str, str, str], tuple]:
    """(results, run_id, local, peer) -> (times, bytes_sent) of each traced socket."""
    if tcp is None or tcp.empty or "bytes_sent" not in tcp:
        return {}
    t = _run_keys(tcp).dropna(subset=["bytes_sent"]).sort_values("time")
    return {
        cast(tuple[str, str, str, str], key): (
            g["time"].to_numpy(float),
            g["bytes_sent"].to_numpy(float),
        )
        for key, g in t.groupby([*RUN, "local", "peer"], sort=False)
    }


def operation_windows(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per run and (collective, algorithm, size): ``start`` and ``end`` (unix s) of its timed
    iterations, from collectives.parquet (``start`` and ``seconds`` per rank)."""
    need = {"start", "seconds", "collective", "algorithm", "size"}
    cols = [*RUN, "collective", "algorithm", "size", "start", "end"]
    if collectives.empty or not need <= set(collectives.columns):
        return pd.DataFrame(columns=cols)
    c = _run_keys(collectives).assign(end=lambda d: d["start"] + d["seconds"])
    keys = [*RUN, "collective", "algorithm", "size"]
    w = c.groupby(keys, sort=False).agg(start=("start", "min"), end=("end", "max")).reset_index()
    return w[cols]


def path_utilisation(
    queues: pd.DataFrame,
    flowpaths: pd.DataFrame | None = None,
    windows: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per run, window and multipath link direction (``base``): ``window`` (``run``,
    or ``all_reduce flat 16777216``), ``start``/``end``; ``bytes`` (all paths, shaper
    counters), ``bytes_by_path`` and ``share_by_path`` (``0: 51%, 1: 49%``), ``paths``
    (configured paths), ``paths_carrying`` (paths with at least CARRYING of the bytes);
    ``flows`` and ``flow_paths_used``: flow directions of flowpaths.parquet seen in the window
    with at least DATA_FLOW of its bytes (not just the ACKs of the other way's data), and the
    distinct paths they were seen on."""
    q = multipath_queues(queues)
    cols = [*RUN, "window", "base", "start", "end", "bytes", "bytes_by_path", "share_by_path"]
    cols += ["paths", "paths_carrying", "flows", "flow_paths_used"]
    if q.empty:
        return pd.DataFrame(columns=cols)
    fp = _run_keys(flowpaths) if flowpaths is not None and not flowpaths.empty else None
    if fp is not None:
        fp = fp.assign(base=split_direction(fp["direction"])[0])
    spans: list[tuple[str, str, str, float, float]] = []
    for key, g in q.groupby(RUN, sort=False):
        results, run_id = cast(tuple[str, str], key)
        spans.append((results, run_id, "run", float(g["time"].min()), float(g["time"].max())))
    if windows is not None and not windows.empty:
        for w in _run_keys(windows).itertuples(index=False):
            name = f"{w.collective} {w.algorithm} {w.size}"
            results, run_id = cast(str, w.results), cast(str, w.run_id)
            start, end = cast(SupportsFloat, w.start), cast(SupportsFloat, w.end)
            spans.append((results, run_id, name, float(start), float(end)))
    rows = []
    for results, run_id, name, start, end in spans:
        run_q = q[(q["results"] == results) & (q["run_id"] == run_id)]
        for base, g in run_q.groupby("base", sort=True):
            per_path: dict[int, float] = {}
            for path, s in g.sort_values("time").groupby("path"):
                times, counter = s["time"].to_numpy(float), s["bytes"].to_numpy(float)
                got = _bytes_at(times, counter, end) - _bytes_at(times, counter, start)
                per_path[int(cast(SupportsInt, path))] = max(0.0, got)
            total = sum(per_path.values())
            shares = {p: (b / total if total else 0.0) for p, b in per_path.items()}
            row = {
                "results": results,
                "run_id": run_id,
                "window": name,
                "base": base,
                "start": start,
                "end": end,
                "bytes": total,
                "bytes_by_path": _by_path_text(per_path),
                "share_by_path": ", ".join(f"{p}: {v:.0%}" for p, v in sorted(shares.items())),
                "paths": len(per_path),
                "paths_carrying": sum(v >= CARRYING for v in shares.values()),
                "flows": 0,
                "flow_paths_used": 0,
            }
            if fp is not None:
                f = fp[
                    (fp["results"] == results)
                    & (fp["run_id"] == run_id)
                    & (fp["base"] == base)
                    & (fp["time_to"] >= start)
                    & (fp["time_from"] <= end)
                ]
                # ACK-only directions of the other way's data flows are flows too: count those
                # that carried data
                per_flow = f.groupby(["src", "sport", "dst", "dport"])["bytes"].transform("sum")
                f = f[per_flow >= DATA_FLOW * max(total, 1.0)]
                row["flows"] = int(f.groupby(["src", "sport", "dst", "dport"]).ngroups)
                row["flow_paths_used"] = int(f["path"].nunique())
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)
