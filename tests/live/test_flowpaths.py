"""Live test of flowpaths.parquet: a tiny multipath scenario through the real runner
(two hosts, two paths, an all-reduce over gloo); every cross-WAN flow that carried data is
named a path, and the bytes the table puts on each path match what the paths' shapers sent."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import scenario

from analysis import load
from analysis.multipath import path_utilisation
from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live


def test_every_cross_wan_flow_has_a_path_matching_the_shaper_counters(tmp_path):
    data = scenario(
        name="flowpaths",
        clusters={"east": {"hosts": 2}, "west": {"hosts": 2}},
        wan=[
            {
                "between": ["east", "west"],
                "paths": [{"rate": "100mbit", "delay": "2ms"}, {"rate": "100mbit", "delay": "2ms"}],
            }
        ],
        routing={"ecmp": {"hash": "l4"}},
        workload={
            "kind": "collectives",
            "collectives": ["all_reduce"],
            "algorithms": ["flat"],
            "sizes": ["4MiB"],
            "warmup": 1,
            "iterations": 2,
            "timeout": "60s",
        },
        trace={"queues": "50ms"},
    )
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    exp.run(selfcheck_seconds=0.5)
    res = load(exp.results.path)
    assert (res.runs["status"] == "ok").all(), res.runs[["status", "reason"]]
    fp = res.flowpaths
    assert not fp.empty
    assert set(fp["path"]) <= {0, 1}
    assert fp["direction"].str.fullmatch(r"(east->west|west->east)/[01]").all()
    # the ranks' data flows: both ends are testbed hosts in different clusters
    cross = fp[fp["src_host"].str[:4] != fp["dst_host"].str[:4]]
    per_flow = cross.groupby(["src", "sport", "dst", "dport"])["bytes"].sum()
    data_flows = per_flow[per_flow > 1_000_000]
    assert len(data_flows) >= 2, per_flow  # a ring over 4 ranks crosses both ways
    # Where the shapers saw the bytes of each direction is where the table put them: per
    # path, within 10% of the direction's bytes (sampling error and the store's and
    # self-check's traffic outside the flows) - the estimates are exact for packets larger
    # than the sample size, which most of the data is.
    util = path_utilisation(res.queues, fp)
    for _, row in util[util["window"] == "run"].iterrows():
        q = res.queues[res.queues["direction"].str.startswith(row["base"] + "/")]
        shaper = q.groupby("direction")["bytes"].agg(lambda s: s.max() - s.min())
        flows = fp[fp["direction"].str.startswith(row["base"] + "/")]
        flows = flows[
            (flows["time_from"] >= q["time"].min()) & (flows["time_to"] <= q["time"].max())
        ]
        table = flows.groupby("direction")["bytes"].sum().reindex(shaper.index, fill_value=0)
        total = shaper.sum()
        assert total > 4_000_000, shaper
        assert ((table - shaper).abs() <= 0.1 * total).all(), pd.DataFrame(
            {"shaper": shaper, "table": table}
        )
