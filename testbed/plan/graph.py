"""The topology as a picture's source (`testbed plan --graph mermaid|dot`). PURE.

One group per cluster (its hosts, up to :data:`HOSTS_SHOWN` of them, on the cluster's switch,
and its gateway), and one edge per WAN link or path between the gateways, labelled with each
direction's settings in the scenario's own syntax (rate, delay, jitter, loss, buffer, queue).
Mermaid renders in GitHub markdown; dot is Graphviz's (``dot -Tsvg``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.core.direction import Direction
from testbed.core.syntax import duration_text, percent_text, rate_text, size_text

if TYPE_CHECKING:
    from testbed.config.scenario import Scenario
    from testbed.plan.model import NetworkPlan, WanDirection

HOSTS_SHOWN = 4  # per cluster; the others are one "n more" node
GRAPHS = ("mermaid", "dot")


def direction_text(d: WanDirection) -> str:
    """``east->west: 100mbit 20ms, buffer 250KB`` (jitter, loss, reorder and a queue profile
    only when set)."""
    parts = [rate_text(d.rate), duration_text(d.delay)]
    if d.jitter:
        parts.append(f"jitter {duration_text(d.jitter)}")
    if d.loss:
        parts.append(f"loss {percent_text(d.loss)}")
    if d.reorder:
        parts.append(f"reorder {percent_text(d.reorder)}")
    parts.append(f"buffer {size_text(d.buffer)}")
    if d.aqm is not None and d.aqm.kind != "droptail":
        parts.append(d.aqm.kind + (" ecn" if d.aqm.ecn else ""))
    return f"{Direction.parse(d.name).src}->{Direction.parse(d.name).dst}: " + " ".join(parts)


def _links(plan: NetworkPlan) -> dict[tuple[str, str, str], list[WanDirection]]:
    """(one end's gateway, the other's, path) -> its directions, in the plan's order."""
    out: dict[tuple[str, str, str], list[WanDirection]] = {}
    for d in plan.wan:
        a, b = sorted((d.src, d.dst))
        path = d.name.partition("/")[2]
        out.setdefault((a, b, path), []).append(d)
    return out


def _hosts(sc: Scenario, cluster: str) -> tuple[list[str], int]:
    n = sc.clusters[cluster].hosts
    shown = [f"{cluster}-h{i}" for i in range(min(n, HOSTS_SHOWN))]
    return shown, n - len(shown)


def _path_name(sc: Scenario, a: str, b: str, path: str) -> str:
    """``path 1, weight 3`` of a multipath link's path."""
    for link in sc.wan:
        if {a, b} == set(link.between) and path.isdigit() and int(path) < len(link.paths):
            return f"path {path}, weight {link.paths[int(path)].weight}"
    return f"path {path}"


def _node(name: str) -> str:
    return name.replace("-", "_")


def mermaid(sc: Scenario, plan: NetworkPlan) -> str:
    lines = ["flowchart LR"]
    for cluster, spec in sc.clusters.items():
        hosts, more = _hosts(sc, cluster)
        lines.append(f'  subgraph {_node(cluster)}["{cluster} ({spec.hosts} hosts)"]')
        for h in hosts:
            lines.append(f'    {_node(h)}["{h}"]')
        if more:
            lines.append(f'    {_node(cluster)}_more["{more} more hosts"]')
        lines.append(f'    {_node(cluster)}_gw{{{{"{cluster}-gw"}}}}')
        lines.append("  end")
        for h in hosts + ([f"{cluster}_more"] if more else []):
            lines.append(f"  {_node(h)} --- {_node(cluster)}_gw")
    for (a, b, path), directions in _links(plan).items():
        label = "<br/>".join(direction_text(d) for d in directions)
        label = (f"{_path_name(sc, a, b, path)}<br/>" if path else "") + label
        lines.append(f'  {_node(a)}_gw ---|"{label}"| {_node(b)}_gw')
    return "\n".join(lines) + "\n"


def dot(sc: Scenario, plan: NetworkPlan) -> str:
    lines = [f'graph "{sc.name}" {{', "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for cluster, spec in sc.clusters.items():
        hosts, more = _hosts(sc, cluster)
        lines.append(f'  subgraph "cluster_{cluster}" {{')
        lines.append(f'    label="{cluster} ({spec.hosts} hosts)";')
        lines.append(f'    "{cluster}-gw" [shape=box, style=bold];')
        for h in hosts:
            lines.append(f'    "{h}" -- "{cluster}-gw";')
        if more:
            lines.append(f'    "{cluster} +{more}" [label="{more} more hosts", shape=plaintext];')
            lines.append(f'    "{cluster} +{more}" -- "{cluster}-gw";')
        lines.append("  }")
    for (a, b, path), directions in _links(plan).items():
        label = "\\n".join(direction_text(d) for d in directions)
        label = (f"{_path_name(sc, a, b, path)}\\n" if path else "") + label
        lines.append(f'  "{a}-gw" -- "{b}-gw" [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph(kind: str, sc: Scenario, plan: NetworkPlan) -> str:
    """The topology in ``kind`` (mermaid | dot)."""
    return mermaid(sc, plan) if kind == "mermaid" else dot(sc, plan)
