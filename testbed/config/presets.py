"""Named WAN presets (a WAN link's ``preset:``): measured real paths to start a link from, each with
its source, and how a preset fills the link's fields the user did not write. PURE (the shipped
data files are read once, on first use).

Three families, their sources and which direction gets what: docs/faults.md, "## Presets".
``pantheon/<path>``: Pantheon's calibrated emulators (Yan et al., USENIX ATC'18); its uplink is
the link's forward direction (between[0] -> between[1]). ``cloud/<src>--<dst>``: the Skyplane
inter-region grid (NSDI'23, Apache-2.0; data/NOTICE). ``dtfm/<a>--<b>``: DT-FM's 10-region
geo-distributed matrix (NeurIPS'22, MIT; data/NOTICE), symmetric, so both orders exist.

``scale`` multiplies what the preset gives for rates and byte buffers (so a buffer stays the same
fraction of the BDP) when this machine cannot carry the real rate; fields the user writes are
taken as written.
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from testbed.core.frames import FRAME_BYTES

PANTHEON_SOURCE = (
    "Pantheon calibrated emulator, result {rid} (pantheon.stanford.edu/result/{rid}); "
    "StanfordSNR/pantheon @ 10488e0 test/run_indigo_in_{kind}_emu.sh"
)
SKYPLANE_SOURCE = (
    "Skyplane inter-region grid (Apache-2.0): min RTT from profiles/latency.csv @ 945dca27, "
    "throughput from skyplane/data/throughput.csv @ 0513671c~1 (iperf3, 64 streams, per VM pair)"
)
DTFM_SOURCE = (
    "DT-FM geo-distributed matrix (Yuan et al., NeurIPS'22, arXiv 2206.01288; MIT): "
    "delay_bandwidth_dict in DS3Lab/DT-FM @ cda948f scheduler/generate_sim_com_matrices.py "
    "(netem delay and rate on each sender's egress)"
)


@dataclass(frozen=True)
class Preset:
    """What a named real path sets on a WAN link (SI units; None: the link's own value)."""

    name: str
    rate: int  # bit/s, forward
    delay: float  # s, one way, both directions
    loss: float  # forward (the uplink)
    buffer: int | None  # bytes, forward drop-tail queue
    reverse_rate: int | None  # bit/s when the reverse differs
    source: str  # where the numbers come from (shown by `testbed plan`, recorded in results)
    note: str = ""

    def describe(self, scale: float = 1.0) -> str:
        return f"{self.name}{f' x {scale:g}' if scale != 1 else ''}: {self.source}" + (
            f"; {self.note}" if self.note else ""
        )


# name, real path, result id, Mbit/s, trace kind, one-way ms, uplink drop-tail packets,
# uplink loss: the six rows of the calibrated emulators (test/run_indigo_in_*_emu.sh).
_PANTHEON = (
    ("nepal-aws-india", "Nepal to AWS India (wireless)", 188, 0.57, "cellular", 28, 14, 0.0477),
    (
        "mexico-aws-california",
        "Mexico cellular to AWS California",
        196,
        2.64,
        "cellular",
        88,
        130,
        0,
    ),
    ("aws-brazil-colombia", "AWS Brazil to Colombia cellular", 339, 3.04, "cellular", 130, 426, 0),
    ("india-aws-india", "India to AWS India (wired)", 251, 100.42, "wired", 27, 173, 0),
    ("aws-korea-china", "AWS Korea to China (wired)", 361, 77.72, "wired", 51, 94, 0.0006),
    ("aws-california-mexico", "AWS California to Mexico (wired)", 353, 114.68, "wired", 45, 450, 0),
)


def _pantheon() -> dict[str, Preset]:
    out = {}
    for name, path, rid, mbit, kind, ms, packets, loss in _PANTHEON:
        note = f"{path}; drop-tail {packets} packets and loss on the uplink (forward)"
        if kind == "cellular":
            note += "; Pantheon's Poisson opportunity trace replaced by its mean rate"
        out[f"pantheon/{name}"] = Preset(
            f"pantheon/{name}",
            round(mbit * 1e6),
            ms / 1e3,
            loss,
            packets * FRAME_BYTES,
            None,
            PANTHEON_SOURCE.format(rid=rid, kind=kind),
            note,
        )
    return out


def _cloud() -> dict[str, Preset]:
    data = resources.files("testbed.config").joinpath("data/skyplane-interregion.csv")
    with data.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    tput = {(r["src"], r["dst"]): float(r["tput_recv_gbps"]) for r in rows}
    out = {}
    for r in rows:
        src, dst = r["src"], r["dst"]
        rate = round(tput[(src, dst)] * 1e9)
        back = tput.get((dst, src))
        reverse = round(back * 1e9) if back is not None else None
        name = f"cloud/{src}--{dst}"
        out[name] = Preset(
            name,
            rate,
            float(r["min_rtt_ms"]) / 2e3,
            0.0,
            None,
            reverse if reverse != rate else None,
            SKYPLANE_SOURCE,
            f"min RTT {float(r['min_rtt_ms']):g} ms; {tput[(src, dst)]:g} Gbit/s forward"
            + (f", {back:g} Gbit/s reverse" if back is not None else ""),
        )
    return out


def _dtfm() -> dict[str, Preset]:
    data = resources.files("testbed.config").joinpath("data/dtfm-geo.csv")
    with data.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for r in rows:
        ms, gbps = float(r["delay_ms"]), float(r["bandwidth_gbps"])
        a, b = r["region_a"].lower(), r["region_b"].lower()
        for src, dst in ((a, b), (b, a)):
            name = f"dtfm/{src}--{dst}"
            out[name] = Preset(
                name,
                round(gbps * 1e9),
                ms / 1e3,
                0.0,
                None,
                None,
                DTFM_SOURCE,
                f"{ms:g} ms one way, {gbps:g} Gbit/s, the same both ways",
            )
    return out


@cache
def presets() -> dict[str, Preset]:
    """Every preset by name."""
    return {**_pantheon(), **_cloud(), **_dtfm()}


def _regions(known: dict[str, Preset], family: str) -> str:
    return ", ".join(
        sorted({n.split("/", 1)[1].split("--")[0] for n in known if n.startswith(family + "/")})
    )


def find(name: str) -> Preset:
    """The preset ``name``; ValueError listing close names when there is none."""
    known = presets()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = (
        f"close names: {', '.join(close)}"
        if close
        else (
            f"pantheon presets: {', '.join(n for n in known if n.startswith('pantheon/'))}; "
            f"cloud presets are cloud/<src>--<dst> with regions {_regions(known, 'cloud')}; "
            f"dtfm presets are dtfm/<src>--<dst> with regions {_regions(known, 'dtfm')}"
        )
    )
    raise ValueError(f"unknown preset {name!r}; {hint}")


PRESET_FIELDS = ("rate", "delay", "loss", "buffer")


def fill_link(data: dict[str, Any]) -> dict[str, Any]:
    """A WAN link's raw fields with its preset's values under those the user did not write."""
    name = data.get("preset")
    if name is None:
        return data
    if not isinstance(name, str):
        raise ValueError(f"{name!r} is not a preset name; e.g. pantheon/aws-korea-china")
    p = find(name)
    scale = data.get("scale", 1.0)  # checked by the schema
    given = {
        "rate": round(p.rate * scale),
        "delay": f"{p.delay * 1e3:.6g}ms",
        "loss": f"{p.loss * 100:.6g}%",
    }
    if p.buffer is not None:
        given["buffer"] = f"{round(p.buffer * scale)}B"
    out = {**given, **data}
    reverse: dict[str, Any] = {}
    if p.reverse_rate is not None and "rate" not in data:
        reverse["rate"] = round(p.reverse_rate * scale)
    # The preset's loss and buffer are the uplink's: the reverse keeps the link's defaults unless
    # the user wrote the field (then it means both directions, as without a preset).
    if p.loss and "loss" not in data:
        reverse["loss"] = "0%"
    if p.buffer is not None and "buffer" not in data:
        reverse["buffer"] = "1bdp"
    if reverse:
        written = data.get("reverse")
        if written is None:
            out["reverse"] = reverse
        elif isinstance(written, dict):
            out["reverse"] = {**reverse, **written}
    return out
