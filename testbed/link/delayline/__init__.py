"""Userspace WAN delay line: NFQUEUE + raw nfnetlink, standard library only.

This kernel has no ``sch_netem``, so one-way delay, jitter, loss and reordering on the emulated WAN
come from this process. It runs inside the router (wire) namespace (``ip netns exec NS python -m
testbed.link.delayline --config FILE.json``, or forked into it by :mod:`.launch`), binds one
NFQUEUE per WAN direction, holds every queued packet *inside the kernel* and issues its verdict
when the packet is due. Rate limiting is
done by the kernel's HTB (with a bfifo leaf) on the router's egress, unless a queue is configured
as the bottleneck itself (``rate``, below).

What this package owns, module by module
    * :mod:`.config`: the JSON config, its defaults and validation;
    * :mod:`.rules`: the argv of the iptables rules that feed the line (:func:`iptables_rules`,
      :func:`iptables_delete_rules`) and the CE mark they agree on;
    * :mod:`.model`: the pure per-packet model of one direction (loss, reordering, delay and
      jitter, the emulated bottleneck queue and its marking law), no sockets;
    * :mod:`.nfqueue`: the nfnetlink_queue protocol (socket, bind/config requests, packet
      messages, verdicts), over the shared framing of :mod:`testbed.net.netlink`;
    * :mod:`.lateness`: the release-lateness histogram of a queue and its percentiles;
    * :mod:`.stats`: the stats file and queue trace records, the kernel's per-queue counters, and
      :func:`read_stats` for the supervisor;
    * :mod:`.loop`: the process itself (:class:`~.loop.DelayLine`: setup, hot path, main loop);
    * :mod:`.launch`: one start-up for many lines (fork one per wire namespace, ``setns``, relay
      each one's READY or failure);
    * ``__main__``: the entry point.
    It does not create namespaces, qdiscs or rules, and never touches interface offloads; the
    supervisor (:mod:`testbed.link.userspace`) and the plan do.

Config (JSON)::

    {"queues": [{"num": 1001, "name": "east->west", "delay": 0.025, "jitter": 0.0,
                 "loss": 0.0, "reorder": 0.0, "seed": 1}],
     "stats_file": "/run/.../stats.json", "stats_interval": 0.5}

    delay/jitter in seconds, loss/reorder as fractions 0..1, seed optional (None = random).
    Optional per queue: ``ge_p``, ``ge_r`` (Gilbert-Elliott burst loss, fractions: good -> bad and
    bad -> good per packet; every packet is lost in the bad state, ``loss`` applies in the good
    one; 0 = off).
    Optional per queue: ``maxlen`` (kernel queue length, default 262144), ``copy_mode``
    ("header", default, or "meta"); bottleneck emulation: ``rate`` (bit/s), ``buffer`` (bytes),
    ``aqm`` ({"kind": "droptail" | "red" (kmin, kmax, pmax) | "step" (k), "ecn", "at":
    "arrival" | "dequeue"}), ``ce_mark``, ``held``.
    Optional top level: ``rcvbuf`` (bytes, default 64 MiB), ``rt_priority`` (SCHED_FIFO priority,
    default 10, 0 = don't ask), ``flush_grace`` (s, default 1.0), ``release_gap`` (s, default
    0.0002, see below), ``trace_file`` and ``trace_interval`` (JSONL samples of the bottleneck
    queues). Unknown keys are rejected (exit 2).

Protocol with the supervisor
    1. start the process inside the namespace; wait for the single line ``READY`` on stdout
       (nothing else is ever written to stdout; diagnostics go to stderr). The userspace
       backend starts all its lines with one launcher instead (``--line NS CONFIG LOG ...``,
       :mod:`.launch`), which reports ``READY NS PID`` per line. Exit 2 before READY:
       bad config; exit 1: a queue could not be bound (e.g. EBUSY: that queue number is already
       bound in this namespace) or the socket setup failed.
    2. add the rules (:func:`iptables_rules`, run inside the namespace); only then is traffic
       queued. (With the launcher, ``--rules NS FILE`` has each line apply its own rules once
       bound, before it says READY.)
    Changing a running line: rewrite the config file and send SIGHUP. Each queue (by ``num``)
       takes the file's delay, jitter, loss, reorder, burst-loss and bottleneck settings for
       packets that arrive from then on; held packets keep their release times and the queue
       stays FIFO. The queue set, ``maxlen`` and ``copy_mode`` are fixed at bind time: a file
       that changes them, or an invalid one, is refused whole (an ``errors`` entry until a
       reload succeeds, old settings kept). The stats file is rewritten right after; its
       ``reloads`` count (SIGHUPs handled) is the acknowledgement, its ``errors`` say whether
       it was refused.
    3. to stop: delete the rules first (:func:`iptables_delete_rules`), then SIGTERM (or SIGINT).
       The process keeps delaying what it still holds (and what was queued before the rules went)
       until the deadlines, or accepts at once if a deadline is more than ``flush_grace`` away,
       writes the final stats (``"final": true``) and exits 0.
    If the process dies while the rules are installed, the kernel drops every packet for those
    queues (no ``--queue-bypass``, no fail-open): traffic stops instead of silently flowing
    undelayed.
    Loss applies per queued packet, and a queued packet can be a 64 KB GSO super-packet (up to
    ~45 wire packets). So when any direction has loss > 0, the plan makes the senders emit
    wire-sized packets: its rendered ``ip`` batch sets ``gso_max_segs 1`` on every host's
    interface (:mod:`testbed.plan.render`). Nothing runs ``ethtool``.

Design choices
    * Copy mode: no payload goes to userspace. The kernel reports a packet's length
      (``NFQA_CAP_LEN``) only when a copy range is set, so the default ``copy_mode: "header"`` is
      ``NFQNL_COPY_PACKET`` with a 1-byte copy range (2 bytes for a bottleneck, which reads the
      ECN bits of the TOS byte), which costs no more than META (benchmarks/RESULTS.md) but makes
      the bytes counter work. ``copy_mode: "meta"`` is true ``NFQNL_COPY_META`` (``bytes`` is
      then null).
    * ``NFQA_CFG_F_GSO`` is set and ``NFQA_CFG_F_FAIL_OPEN`` explicitly cleared: without GSO the
      kernel segments 64 KB super-packets before queueing and throughput collapses.
    * Kernel arrival timestamps (``NFQA_TIMESTAMP``): a dummy UDP socket with ``SO_TIMESTAMPNS``
      turns on kernel RX timestamping (a host-wide switch); a packet's deadline is
      arrival + delay, not recv time + delay. Falls back to recv time when absent
      (``timestamp_fallbacks`` counts it).
    * Order-preserving jitter: release = max(arrival + max(0, delay + N(0, jitter)), previous
      release of the same queue); never before arrival. The one-way delay distribution is
      therefore skewed upwards (std below ``jitter``, mean above ``delay``) when packets are closer
      together than a few jitter standard deviations; with sparse packets the std is ``jitter``.
    * Reordering only when ``reorder`` > 0: with that probability a packet skips the delay and is
      accepted at once (netem-like), overtaking the held ones.
    * Loss: ``NF_DROP`` at arrival with probability ``loss`` per *queued packet* (see above for
      why the plan makes that one wire packet); with ``ge_p`` a Gilbert-Elliott state machine
      first (the bad state drops every packet: ``dropped_burst``).
    * Each queue's deadlines are non-decreasing, so a queue is a FIFO (deque). Due packets are
      released with one ``NFQNL_MSG_VERDICT_BATCH`` ("accept all ids <= N") per queue per wakeup;
      per-packet verdicts only for drops and reordered packets (sent before any batch that covers
      their ids) and CE-marked ones (a batch up to the id before, then the marked one).
    * One netlink socket for all queues, 64 MiB receive buffer (``SO_RCVBUFFORCE``), queue maxlen
      262144. ``select`` with a microsecond timeout to the next deadline (learning the VM's timer
      oversleep and waking up that much earlier); all pending messages are read at every
      wakeup. While every queue holds packets, arrivals don't wake the process (a new packet is
      never due before its queue's head); idle queues and reordering ones do.
    * ``release_gap``: under load the process wakes (and sends verdicts) at most about every
      ``release_gap`` seconds. That cuts the CPU at multi-Gbit/s rates (benchmarks/RESULTS.md)
      and adds at most ``release_gap`` of lateness to packets closer together than that; sparse
      traffic is not affected. SCHED_FIFO if allowed; the garbage collector is frozen after setup.
    * Overflow is never silent: kernel ``queue_dropped``/``user_dropped`` (read from
      ``/proc/net/netfilter/nfnetlink_queue``, which is per namespace), ENOBUFS on the socket and
      rejected verdicts are reported in the stats' ``errors`` list and on stderr.

Stats file (JSON, replaced atomically every ``stats_interval`` s and at exit)::

    {"version": 1, "pid", "time" (unix), "uptime_s", "cpu_seconds", "cpu_user_seconds",
     "cpu_system_seconds", "cpu_percent" (since the previous write), "cpu_percent_avg",
     "sched_fifo", "rcvbuf", "enobufs", "wakeups", "verdict_sends", "reloads", "final",
     "errors": [str, ...],
     "queues": {"1001": {"num", "name", "delay", "jitter", "loss", "reorder", "ge_p", "ge_r",
                         "copy_mode", "packets", "bytes", "accepted", "dropped_loss",
                         "dropped_burst", "reordered", "held",
                         "max_held", "lateness_us": {"p50", "p99", "max", "count"},
                         "queue_dropped", "user_dropped", "verdict_errors",
                         "timestamp_fallbacks"}}}

    A bottleneck queue adds "rate", "buffer", "aqm", "wire_bytes", "ect_packets", "marked",
    "dropped_queue", "dropped_aqm", "backlog_bytes", "backlog_packets", "max_backlog_bytes".
    lateness = time the batch verdict was built - intended release time, over delayed packets
    (1 us resolution below 1 ms, 100 us above; quantiles as defined in
    :class:`~.stats.LatenessHistogram`). CPU includes the kernel's forwarding of released
    packets, which runs inside the verdict syscall (system time).
"""

from testbed.link.delayline.config import Config, ConfigError, QueueConfig
from testbed.link.delayline.rules import (
    DEFAULT_CE_MARK,
    deletions_of,
    iptables_delete_rules,
    iptables_rules,
    restore_command,
    restore_input,
)
from testbed.link.delayline.stats import read_stats

__all__ = [
    "DEFAULT_CE_MARK",
    "Config",
    "ConfigError",
    "QueueConfig",
    "deletions_of",
    "iptables_delete_rules",
    "iptables_rules",
    "read_stats",
    "restore_command",
    "restore_input",
]
