"""A trace replay whose bins cover no whole second (a short run, or every second inside a fault)
still gives its row of the trace table: no seconds compared, no means. A composed test's sweep
ended on a KeyError here (an empty frame without its columns)."""

import pandas as pd

from analysis.trace_replay import per_second, trace_table


def bins(end: float) -> pd.DataFrame:
    return pd.DataFrame(
        {"results": ["r"], "run_id": ["p000-r0"], "direction": ["east->west"], "start": [10.0],
         "end": [end], "target_bps": [20e6], "achieved_bps": [19e6]}
    )  # fmt: skip


def test_bins_shorter_than_a_second_compare_no_second() -> None:
    assert list(per_second(bins(10.6)).columns) == ["second", "target_bps", "achieved_bps"]
    (row,) = trace_table(bins(10.6)).to_dict("records")
    assert row["bins"] == 1 and row["seconds"] == 0 and row["correlation"] is None


def test_a_whole_second_is_compared() -> None:
    (row,) = trace_table(bins(11.0)).to_dict("records")
    assert row["seconds"] == 1 and row["achieved_over_target"] == 0.95
