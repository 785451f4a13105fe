"""The iptables rules that feed the delay line, as argv lists (the supervisor runs them).

This module owns the rule text and the CE mark the line and the rules agree on: packets the line
releases with ``ce_mark`` get CE in their ECN bits on the way out.
"""

from __future__ import annotations

from typing import Any

DEFAULT_CE_MARK = 0x1
CE_TARGET = ("-j", "TOS", "--set-tos", "0x03/0x03")  # clear the ECN bits, then set 11 (CE)


def iptables_rules(
    in_iface: str,
    queue_num: int,
    *,
    iptables: str = "iptables",
    ce_iface: str | None = None,
    ce_mark: int = DEFAULT_CE_MARK,
) -> list[list[str]]:
    """argv lists that send every packet entering ``in_iface`` to NFQUEUE ``queue_num``.

    Run them inside the router namespace. No ``--queue-bypass``: without a listener the kernel
    drops the packets instead of forwarding them undelayed. Pass ``iptables="ip6tables"`` for IPv6.
    With ``ce_iface`` (a bottleneck queue that marks), packets the line released with ``ce_mark``
    get CE in their ECN bits on leaving through ``ce_iface``: the TOS target (mask 0x03) rewrites
    the IP header and its checksum, in POSTROUTING because an NFQUEUE verdict resumes at the next
    hook, not at the next rule. No payload goes through userspace.
    """
    mangle = [iptables, "-w", "-t", "mangle", "-A"]
    rules = [
        [*mangle, "PREROUTING", "-i", in_iface, "-j", "NFQUEUE", "--queue-num", str(int(queue_num))]
    ]
    if ce_iface is not None:
        mark = f"{int(ce_mark):#x}/{int(ce_mark):#x}"
        rules.append(
            [*mangle, "POSTROUTING", "-o", ce_iface, "-m", "mark", "--mark", mark, *CE_TARGET]
        )
    return rules


def iptables_delete_rules(in_iface: str, queue_num: int, **options: Any) -> list[list[str]]:
    """argv lists deleting the rules of :func:`iptables_rules` (same arguments)."""
    rules = iptables_rules(in_iface, queue_num, **options)
    return [[("-D" if a == "-A" else a) for a in rule] for rule in rules]
