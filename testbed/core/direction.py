"""One WAN direction's name: ``east->west`` (a link's direction) or ``east->west/1`` (one path of
a multipath link). PURE. The one parser and formatter of that text, which crosses every layer
(plan, link backends, faults, the results tables and the analysis)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Direction:
    """``src`` -> ``dst`` between two clusters' gateways, on path ``path`` (None: a link with
    one path)."""

    src: str
    dst: str
    path: int | None = None

    @classmethod
    def parse(cls, text: str) -> Direction:
        """``a->b`` or ``a->b/<path>``; ValueError naming the text otherwise."""
        name, slash, path = str(text).partition("/")
        src, arrow, dst = name.partition("->")
        if not arrow or not src or not dst or (slash and not path.isdigit()):
            raise ValueError(f"{text!r} is not a WAN direction (like east->west or east->west/1)")
        return cls(src, dst, int(path) if slash else None)

    def __str__(self) -> str:
        return f"{self.src}->{self.dst}" + (f"/{self.path}" if self.path is not None else "")

    @property
    def multipath(self) -> bool:
        """One path of a multipath link (the gateways hash flows onto it)."""
        return self.path is not None

    def reverse(self) -> Direction:
        """The other direction of the same link (or path)."""
        return Direction(self.dst, self.src, self.path)

    @property
    def base(self) -> Direction:
        """The link's direction this path belongs to (itself for a link with one path)."""
        return Direction(self.src, self.dst)

    @property
    def link(self) -> str:
        """The link both directions share, clusters sorted: ``east-west`` (``east-west/1``)."""
        name = "-".join(sorted((self.src, self.dst)))
        return name + (f"/{self.path}" if self.path is not None else "")

    def touches(self, cluster: str) -> bool:
        return cluster in (self.src, self.dst)
