"""The results directory's format: its version and its tables, declared once. PURE.

The runner writes these tables, ``analysis.load`` reads them, docs/results.md documents them (a
test checks that it documents every table and declared column here). ``FORMAT_VERSION`` is in
every ``manifest.json``; ``analysis.upgrade`` reads every older version (flent's resultset
versioning is the model).

Version history: 1 (no ``format_version`` key): summaries without a ``kind``, no network or ranks
tables, no model topology. 2: each summary row says its ``kind``; ``network.parquet`` holds each
run's resolved WAN per direction, ``ranks.parquet`` its rank slots, and the manifest each run's
model ``topology``.
"""

from __future__ import annotations

from dataclasses import dataclass

FORMAT_VERSION = 2


@dataclass(frozen=True)
class Table:
    """One Parquet table of a results directory: ``<name>.parquet``, one row per ``grain``;
    ``columns``: those every row has (a reader refuses a file that lacks one)."""

    name: str
    grain: str
    columns: tuple[str, ...] = ()


NETWORK_COLUMNS = (
    "run_id", "direction", "link", "path", "src", "dst", "rate_bps", "goodput_factor",
    "goodput_bps", "delay_s", "jitter_s", "loss", "reorder", "buffer_bytes", "bdp_bytes",
    "buffer", "aqm", "mtu", "rtt_s",
)  # fmt: skip
TABLES: tuple[Table, ...] = (
    Table("collectives", "rank x timed iteration (workload kind: collectives)"),
    Table("training", "rank x training step (workload kind: training)"),
    Table(
        "metrics",
        "stdout line of a user's process that is a JSON metric (workload kind: command)",
        ("run_id", "process", "host", "time", "metric", "value"),
    ),
    Table("links", "run x WAN direction: the link self-check"),
    Table(
        "network",
        "run x WAN direction: the network as built (rate, delay, buffer, MTU, RTT)",
        NETWORK_COLUMNS,
    ),
    Table("ranks", "run x rank: where each rank ran", ("run_id", "rank", "host", "cluster")),
    Table("delayline", "run x WAN direction: the delay line's counters (userspace backend)"),
    Table("tcp", "tcp_info sample of a ranks' host socket (trace.tcp_info)"),
    Table("queues", "WAN bottleneck sample: occupancy, drops, marks, bytes (trace.queues)"),
    Table("flows", "flow x time bin from the headers-only pcaps (trace.pcap)"),
    Table("flowpaths", "TCP flow x path of a multipath link it took, and when"),
    Table("routing", "FIB, BFD or BGP event in a gateway (multipath links, routing bgp)"),
    Table(
        "events",
        "schedule step, trace bin or fault: when it was due and applied, and how",
        ("run_id", "event", "source", "action", "scheduled_unix"),
    ),
    Table("flows_goodput", "traffic flow x 100 ms: its goodput"),
    Table("dcqcn", "DCQCN flow event: start, cut, increase, CNP, end"),
    Table("dcqcn_rx", "DCQCN flow x 100 ms: what its receiver got"),
)
TABLE_NAMES = tuple(t.name for t in TABLES)
BY_NAME = {t.name: t for t in TABLES}
# sampled alongside the workload (testbed.trace) / recorded around it (testbed.experiment.events,
# flows)
TRACE_TABLES = ("tcp", "queues", "flows", "flowpaths", "routing")
DYNAMICS_TABLES = ("events", "flows_goodput", "dcqcn", "dcqcn_rx", "clock_offsets")
