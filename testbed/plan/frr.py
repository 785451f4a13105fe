"""FRR's configuration files for ``routing.mode: bgp``, rendered from the plan (pure).

Each gateway runs its own zebra, bgpd and (with BFD) bfdd, each reading its own file from the
gateway's directory (``testbed.net.frr`` writes them there and starts the daemons). What the
files say and why (docs/multipath.md, "BGP and BFD in the gateways"): one eBGP session per path
between the two gateways' ports on it (``ebgp-multihop 2``, ``update-source`` the own port), so
a session and its BFD live and die with their path; ``maximum-paths`` so a link's paths make one
multipath route; updates sent at once (``advertisement-interval 0``), so what moves traffic after
a failure is the failure's detection (BFD, the hold timer, a port going down), not FRR's pacing;
plain multipath routes, not kernel nexthop objects, which FRR 8.4 did not restore after a path's
``link_down`` + ``link_up``; logs with microseconds and every session change logged, because the
run reads them into its routing events.
"""

from __future__ import annotations

from pathlib import Path

from testbed.plan.model import BgpPlan, BgpSpeaker

CONNECT_S = 2  # seconds between two attempts to open a failed session
BFD_PROFILE = "wan"


def daemons(bgp: BgpPlan) -> tuple[str, ...]:
    """The daemons each gateway runs, in their start order (zebra first: the others connect)."""
    return ("zebra", "bfdd", "bgpd") if bgp.bfd_interval_ms is not None else ("zebra", "bgpd")


def _head(speaker: BgpSpeaker, directory: Path, daemon: str) -> list[str]:
    return [
        f"hostname {speaker.gateway}",
        f"log file {directory / f'{daemon}.log'}",
        "log timestamp precision 6",
    ]


def zebra_conf(speaker: BgpSpeaker, directory: Path) -> str:
    return "\n".join([*_head(speaker, directory, "zebra"), "no zebra nexthop kernel enable"]) + "\n"


def bfdd_conf(bgp: BgpPlan, speaker: BgpSpeaker, directory: Path) -> str:
    ms = bgp.bfd_interval_ms
    lines = [
        *_head(speaker, directory, "bfdd"),
        "debug bfd peer",
        "bfd",
        f" profile {BFD_PROFILE}",
        f"  transmit-interval {ms}",
        f"  receive-interval {ms}",
        f"  detect-multiplier {bgp.bfd_multiplier}",
        " exit",
        "exit",
    ]
    return "\n".join(lines) + "\n"


def bgpd_conf(bgp: BgpPlan, speaker: BgpSpeaker, directory: Path) -> str:
    lines = [
        *_head(speaker, directory, "bgpd"),
        "debug bgp updates",
        f"router bgp {speaker.asn}",
        f" bgp router-id {speaker.router_id}",
        " bgp log-neighbor-changes",
        " no bgp ebgp-requires-policy",
        f" timers bgp {bgp.keepalive_s} {bgp.hold_s}",
    ]
    for n in speaker.neighbors:
        lines += [
            f" neighbor {n.address} remote-as {n.asn}",
            f" neighbor {n.address} description {n.link}",
            f" neighbor {n.address} ebgp-multihop 2",
            f" neighbor {n.address} disable-connected-check",
            f" neighbor {n.address} update-source {n.local}",
            f" neighbor {n.address} timers connect {CONNECT_S}",
            f" neighbor {n.address} advertisement-interval 0",
        ]
        if bgp.bfd_interval_ms is not None:
            lines.append(f" neighbor {n.address} bfd profile {BFD_PROFILE}")
    lines += [
        " address-family ipv4 unicast",
        f"  network {speaker.network}",
        f"  maximum-paths {bgp.maximum_paths}",
        " exit-address-family",
        "exit",
    ]
    return "\n".join(lines) + "\n"


def frr_configs(bgp: BgpPlan, speaker: BgpSpeaker, directory: Path) -> dict[str, str]:
    """File name -> text of one gateway's configuration, its logs in ``directory``."""
    out = {"zebra.conf": zebra_conf(speaker, directory)}
    if bgp.bfd_interval_ms is not None:
        out["bfdd.conf"] = bfdd_conf(bgp, speaker, directory)
    out["bgpd.conf"] = bgpd_conf(bgp, speaker, directory)
    return out
