"""analysis.training: step table, WAN bytes per step from counters, time to loss, summary."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.training import (
    predicted_comm,
    step_table,
    summarize_training,
    time_to_loss,
    wan_bytes,
)


def rows(n_steps: int = 4, ranks: int = 2) -> pd.DataFrame:
    out = []
    for r in range(ranks):
        for s in range(n_steps):
            out.append(
                {
                    "rank": r,
                    "algorithm": "ddp",
                    "step": s,
                    "start": 100.0 + s + 0.01 * r,
                    "end": 100.9 + s + 0.01 * r,
                    "wall_s": 0.9 + 0.01 * r,
                    "compute_s": 0.3,
                    "comm_s": 0.5,
                    "wait_s": 0.0,
                    "loss": 3.0 - s * 0.1 - r * 0.02,
                    "val_loss": (2.9 - s * 0.2) if s % 2 == 1 else math.nan,
                    "payload_bytes": 1000,
                }
            )
    return pd.DataFrame(out)


def test_step_table_takes_the_slowest_rank_and_mean_losses() -> None:
    st = step_table(rows())
    assert list(st["step"]) == [0, 1, 2, 3]
    assert st["wall"].iloc[0] == pytest.approx(0.91)
    assert st["start"].iloc[0] == pytest.approx(100.0) and st["end"].iloc[0] == pytest.approx(
        100.91
    )
    assert st["loss"].iloc[1] == pytest.approx(2.89)
    assert math.isnan(st["val_loss"].iloc[0]) and st["val_loss"].iloc[1] == pytest.approx(2.7)


def test_wan_bytes_interpolate_the_counters_at_step_boundaries() -> None:
    st = step_table(rows())
    # 1000 bytes/s on one direction, sampled every 0.5 s; nothing on the other
    q = pd.DataFrame(
        [{"time": 99.0 + 0.5 * i, "direction": "a->b", "bytes": 500.0 * i} for i in range(14)]
        + [{"time": 99.0 + i, "direction": "b->a", "bytes": 7.0} for i in range(7)]
    )
    wb = wan_bytes(st, q)
    a = wb[wb["direction"] == "a->b"]["bytes"].tolist()
    # steps start 1 s apart; the last ends at 103.91
    assert a == pytest.approx([1000.0, 1000.0, 1000.0, 910.0])
    assert wb[wb["direction"] == "b->a"]["bytes"].sum() == 0
    assert wan_bytes(st, pd.DataFrame()).empty


def test_time_to_loss_is_the_end_of_the_first_step_at_target() -> None:
    st = step_table(rows())
    assert time_to_loss(st, 2.7) == pytest.approx(101.91 - 100.0)
    assert time_to_loss(st, 2.3) == pytest.approx(103.91 - 100.0)
    assert time_to_loss(st, 1.0) is None
    assert time_to_loss(st, None) is None


def test_predicted_comm_sums_the_schedule() -> None:
    def predict(group: str, collective: str, payload: int) -> float | None:
        return {"world": 0.1, "leaders": 0.5}.get(group)

    assert predicted_comm([("world", "all_reduce", 8)] * 4, 4, predict) == pytest.approx(0.1)
    assert predicted_comm([("leaders", "all_reduce", 8)], 10, predict) == pytest.approx(0.05)
    assert predicted_comm([("cluster", "all_reduce", 8)], 10, predict) is None


def test_summary_of_a_run() -> None:
    q = pd.DataFrame(
        [{"time": 99.0 + i, "direction": "a->b", "bytes": 2000.0 * i} for i in range(7)]
    )
    s = summarize_training(rows(), q, target=2.7, predicted_comm_per_step=0.25)
    assert s["steps"] == 4 and s["algorithm"] == "ddp"
    assert s["final_loss"] == pytest.approx(2.3)
    assert s["wan_bytes_per_step"] == pytest.approx(2000.0 * 3.91 / 4)
    assert s["step_time_p50"] == pytest.approx(0.91)
    assert s["compute_utilisation"] == pytest.approx((0.3 / 0.9 + 0.3 / 0.91) / 2)
    assert s["comm_measured_over_predicted"] == pytest.approx(0.5 / 0.25)


def test_the_target_is_the_plain_ddp_runs_loss_whatever_the_order() -> None:
    from analysis.run_summary import fill_targets

    params = ["workload.algorithm", "workload.ddp.hook"]

    def summary(run_id: str, algorithm: str, hook: str | None, loss: float) -> dict:
        return {
            "run_id": run_id,
            "workload.algorithm": algorithm,
            "workload.ddp.hook": hook,
            "algorithm": algorithm,
            "final_loss": loss,
            "target_loss": None,
        }

    rows = [
        {
            "run_id": f"r{i}",
            "rank": 0,
            "algorithm": "x",
            "step": s,
            "start": 100.0 + s,
            "end": 101.0 + s,
            "wall_s": 1.0,
            "compute_s": 0.5,
            "comm_s": 0.5,
            "wait_s": 0.0,
            "loss": 3.0,
            "val_loss": 2.6 - 0.1 * s,
            "payload_bytes": 1,
        }
        for i in range(3)
        for s in range(4)
    ]
    summaries = [
        summary("r0", "ddp", "fp16", 2.5),
        summary("r1", "diloco", None, 2.4),
        summary("r2", "ddp", None, 2.35),  # the plain DDP run comes last
    ]
    for i in range(1, 4):  # as the runner calls it after each run
        fill_targets(summaries[:i], rows, params)
    assert [s["target_loss"] for s in summaries] == [2.35, 2.35, 2.35]
    assert summaries[1]["time_to_loss"] == pytest.approx(4.0)  # val 2.3 at step 3 ends at 104


def test_ddp_exposed_comm_is_its_backward_comm_minus_overlap_from_the_last_rows() -> None:
    r = rows()
    assert summarize_training(r, pd.DataFrame())["ddp_exposed_comm_per_step"] is None
    last = r["step"] == r["step"].max()
    r.loc[last, "ddp_backward_comm_s"] = [0.30, 0.40][: int(last.sum())]
    r.loc[last, "ddp_overlap_s"] = [0.10, 0.10][: int(last.sum())]
    want = float((r.loc[last, "ddp_backward_comm_s"] - r.loc[last, "ddp_overlap_s"]).mean())
    got = summarize_training(r, pd.DataFrame())["ddp_exposed_comm_per_step"]
    assert got == pytest.approx(want)
