"""The iptables rules that feed the delay line, as argv lists, and the same rules as
``iptables-restore`` input (the supervisor applies a namespace's rules in one restore run).

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
    bridged: bool = False,
) -> list[list[str]]:
    """argv lists that send every packet entering ``in_iface`` to NFQUEUE ``queue_num``.

    Run them inside the router namespace. No ``--queue-bypass``: without a listener the kernel
    drops the packets instead of forwarding them undelayed. Pass ``iptables="ip6tables"`` for IPv6.
    With ``ce_iface`` (a bottleneck queue that marks), packets the line released with ``ce_mark``
    get CE in their ECN bits on leaving through ``ce_iface``: the TOS target (mask 0x03) rewrites
    the IP header and its checksum, in POSTROUTING because an NFQUEUE verdict resumes at the next
    hook, not at the next rule. No payload goes through userspace.

    ``bridged``: the interfaces are ports of a bridge (a wire that forwards at layer 2, with
    ``net.bridge.bridge-nf-call-iptables`` on): iptables sees the bridge as the packet's
    interface, so the rules match the port with ``-m physdev`` instead of ``-i``/``-o``.
    """
    mangle = [iptables, "-w", "-t", "mangle", "-A"]
    into = ["-m", "physdev", "--physdev-in", in_iface] if bridged else ["-i", in_iface]
    rules = [[*mangle, "PREROUTING", *into, "-j", "NFQUEUE", "--queue-num", str(int(queue_num))]]
    if ce_iface is not None:
        mark = f"{int(ce_mark):#x}/{int(ce_mark):#x}"
        out = ["-m", "physdev", "--physdev-out", ce_iface] if bridged else ["-o", ce_iface]
        rules.append([*mangle, "POSTROUTING", *out, "-m", "mark", "--mark", mark, *CE_TARGET])
    return rules


def deletions_of(rules: list[list[str]]) -> list[list[str]]:
    """argv lists deleting ``rules`` (argv lists of :func:`iptables_rules`)."""
    return [[("-D" if a == "-A" else a) for a in rule] for rule in rules]


def iptables_delete_rules(in_iface: str, queue_num: int, **options: Any) -> list[list[str]]:
    """argv lists deleting the rules of :func:`iptables_rules` (same arguments)."""
    return deletions_of(iptables_rules(in_iface, queue_num, **options))


def restore_command(iptables: str = "iptables") -> list[str]:
    """argv applying :func:`restore_input` in one process: rules are added (or, for ``-D``
    lines, deleted) next to the existing ones (``--noflush``), one table at a time, all or none.
    One process and one wait for the xtables lock per namespace instead of one per rule."""
    return [f"{iptables}-restore", "--noflush", "-w"]


def restore_input(rules: list[list[str]]) -> str:
    """The argv lists of :func:`iptables_rules` or :func:`iptables_delete_rules` as
    ``iptables-restore`` input: one ``*table`` ... ``COMMIT`` block per table, in rule order."""
    by_table: dict[str, list[str]] = {}
    for argv in rules:
        rest = [a for a in argv[1:] if a != "-w"]  # the binary and the lock wait are restore's
        at = rest.index("-t")
        table = rest[at + 1]
        del rest[at : at + 2]
        by_table.setdefault(table, []).append(" ".join(rest))
    return "".join(
        f"*{t}\n" + "".join(f"{r}\n" for r in rs) + "COMMIT\n" for t, rs in by_table.items()
    )
