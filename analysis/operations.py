"""A run's operations: every rank's row of one collective iteration or training step, and the
operation they make together. PURE (pandas).

An operation is all ranks' rows of one iteration (collective, algorithm, size) or training step:
it starts at the earliest rank's start, ends at the latest rank's end, and its outcome is
``timeout`` if a rank timed out, else ``error`` if a rank failed, else ``ok``. Its arm is what it
is compared with (a fault's baseline): the collective, algorithm and size; a training step's
algorithm, ``/local`` added where the step synchronised nothing (:func:`training_arm`). The
fault verdicts (analysis.faults), the report's tables and the WAN timeline figure read operations
this way.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

OUTCOMES = ("ok", "error", "timeout")
OP_COLUMNS = ["results", "run_id", "arm", "op", "rank", "start", "end", "outcome", "error_type"]
OP_COLUMNS += ["error"]


def operations(res: Any) -> pd.DataFrame:
    """One row per rank and operation (``results``, ``run_id``, ``arm``, ``op``, ``rank``,
    ``start``, ``end``, ``outcome``, ``error_type``, ``error``) from a loaded
    :class:`analysis.loader.Results` (collectives, else training rows)."""
    return rank_operations(res.collectives, res.training)


def rank_operations(c: pd.DataFrame, t: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`operations` from collectives.parquet rows ``c`` and training.parquet rows ``t``."""
    t = pd.DataFrame() if t is None else t
    parts = []
    if not c.empty and "start" in c:
        arm = c["collective"].astype(str) + "/" + c["algorithm"].astype(str) + "/"
        arm = arm + c["size"].astype(str)
        parts.append(c.assign(arm=arm, op=c["iteration"]))
    if not t.empty and "start" in t:
        parts.append(t.assign(arm=training_arm(t), op=t["step"]))
    if not parts:
        return pd.DataFrame(columns=OP_COLUMNS)
    return pd.concat([_op_rows(p) for p in parts], ignore_index=True)


def training_arm(t: pd.DataFrame) -> pd.Series:
    """Each training step's arm: its algorithm ("training" without one), and
    ``<algorithm>/local`` for a step that sent no payload (DiLoCo's and local SGD's inner steps:
    the schedule's syncs are the same on every rank, so all ranks agree). A run of such an
    algorithm has two kinds of step, which a fault's baseline must not mix: a DiLoCo run with a
    sync every 2 steps measured 3-25 ms for its inner steps and 0.2-0.9 s for its sync steps on a
    loaded 2-core host, and one median over both (0.2-0.5 s, by which kind had the middle
    value) put the stall of a blackhole that met only a sync step up to 0.3 s too high."""
    arm = (
        t["algorithm"].astype(str)
        if "algorithm" in t
        else pd.Series("training", index=t.index, dtype=object)
    )
    if "payload_bytes" not in t:
        return arm
    return arm.where(t["payload_bytes"].ne(0), arm + "/local")


def _op_rows(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    if "end" not in df:
        df["end"] = df["start"] + df["seconds"]
    elif "seconds" in df:
        df["end"] = df["end"].fillna(df["start"] + df["seconds"])
    if "outcome" not in df:
        df["outcome"] = "ok"
    df["outcome"] = df["outcome"].fillna("ok")
    for col in ("error_type", "error"):
        if col not in df:
            df[col] = None
    if "results" not in df:
        df["results"] = ""
    return df[OP_COLUMNS]


def operation_table(ops: pd.DataFrame) -> pd.DataFrame:
    """All ranks' rows of an operation folded: earliest start, latest end, worst outcome, the
    first failing rank's error; ``duration`` = end − start."""
    if ops.empty:
        return pd.DataFrame(columns=[*OP_COLUMNS, "duration"]).drop(columns="rank")
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    ops = ops.assign(_rank=ops["outcome"].map(rank).fillna(1))
    keys = ["results", "run_id", "arm", "op"]
    g = ops.groupby(keys, sort=False)
    out = g.agg(start=("start", "min"), end=("end", "max"), _rank=("_rank", "max")).reset_index()
    out["outcome"] = [OUTCOMES[int(r)] for r in out["_rank"]]
    failed = ops[ops["outcome"] != "ok"].sort_values("end")
    first = failed.groupby(keys, sort=False)[["error_type", "error"]].first()
    out = out.drop(columns="_rank").merge(first.reset_index(), on=keys, how="left")
    out["duration"] = out["end"] - out["start"]
    return out.sort_values(["results", "run_id", "start"], kind="stable").reset_index(drop=True)
