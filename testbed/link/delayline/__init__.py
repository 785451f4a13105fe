"""Userspace WAN delay line: NFQUEUE + raw nfnetlink, standard library only.

On a kernel without ``sch_netem`` this process gives the emulated WAN its one-way delay, jitter,
loss, reordering and, where a queue is the bottleneck, its queue and marking. It runs inside the
router (wire) namespace, binds one NFQUEUE per WAN direction, holds every queued packet inside
the kernel and issues its verdict when the packet is due. The package is cut so the hot path
(:mod:`.loop`) stays separate from what can be tested without sockets: the config
(:mod:`.config`), the iptables rules (:mod:`.rules`), the per-packet model (:mod:`.model`), the
nfnetlink_queue protocol (:mod:`.nfqueue`), lateness and stats (:mod:`.lateness`,
:mod:`.stats`) and the launcher that forks one line per namespace (:mod:`.launch`). It imports
only ``testbed.core`` and the netlink framing because it is a process of its own. It does not
create namespaces, qdiscs or rules; the supervisor (:mod:`testbed.link.userspace`) does.
The config, the READY/SIGHUP/SIGTERM protocol, the design choices and the stats file:
docs/delayline.md.
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
