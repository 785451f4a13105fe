"""The shortest WAN path between clusters: fewest links, ties broken by the order the links are
written. PURE. The scenario checks reachability with it, the plan routes along it and the model
prices the directions it crosses: one search, one tie rule."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence


def first_hops(
    clusters: Iterable[str], links: Sequence[tuple[str, str]], src: str
) -> dict[str, str]:
    """Every cluster reachable from ``src`` -> the first cluster after ``src`` on a shortest
    path (breadth-first over ``links``, each usable both ways, neighbours in link order)."""
    neighbours: dict[str, list[str]] = {c: [] for c in clusters}
    for a, b in links:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    first: dict[str, str] = {}
    queue: deque[str] = deque()
    for n in neighbours.get(src, []):
        if n != src and n not in first:
            first[n] = n
            queue.append(n)
    while queue:
        here = queue.popleft()
        for n in neighbours[here]:
            if n != src and n not in first:
                first[n] = first[here]
                queue.append(n)
    return first


def next_hops(
    clusters: Sequence[str], links: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """(from cluster, to cluster) -> the next cluster on a shortest path, for every pair that
    is connected."""
    return {
        (src, dst): hop for src in clusters for dst, hop in first_hops(clusters, links, src).items()
    }


def path(
    clusters: Sequence[str], links: Sequence[tuple[str, str]], src: str, dst: str
) -> list[str]:
    """The clusters from ``src`` to ``dst`` on a shortest path, both ends included;
    ValueError when ``dst`` cannot be reached."""
    hops = next_hops(clusters, links)
    out = [src]
    while out[-1] != dst:
        if (out[-1], dst) not in hops:
            raise ValueError(f"no WAN path from cluster {src!r} to {dst!r}")
        out.append(hops[(out[-1], dst)])
    return out
