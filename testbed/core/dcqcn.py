"""DCQCN's parameters: one vocabulary for the scenario schema, the reaction/notification points
(traffic.dcqcn), the fluid model (analysis.dcqcn_model) and the reports, with each published
variant's defaults and the time dilation that maps a datacenter onto this testbed.

Units are SI throughout: seconds, bit/s, bytes. The variants and their sources (docs/congestion.md,
"The reaction point's variants"): ``paper`` (Zhu et al., SIGCOMM 2015, and htsim's DCQCNSrc),
``mellanox`` (NVIDIA ConnectX as HPCC's ns-3 rdma-hw.cc models it, the NIC's rpg_* defaults),
``ns3`` (the author's bobzhuyb/ns3-rdma: α starts at 0.5, T 60 µs, B 300 KB).

Time dilation by ``s`` (the scenario's ``dilation:``): DCQCN's fluid model is invariant when every
time (N, K, T, the reduce period, the feedback delay) is multiplied by s and every rate (the line,
RAI, RHAI, the minimum rate) divided by s, with bytes (queue, Kmin, Kmax, B, packet size) and g,
F, Pmax unchanged. :func:`dilate` maps real units to emulated ones, :func:`undilate` back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

Variant = Literal["paper", "mellanox", "ns3"]
VARIANTS: tuple[Variant, ...] = ("paper", "mellanox", "ns3")


@dataclass(frozen=True)
class DcqcnParams:
    """One flow's DCQCN parameters (real or emulated units: see :func:`dilate`)."""

    variant: Variant = "paper"
    # notification point (receiver NIC): at most one CNP per N per flow (per port: NVIDIA)
    cnp_interval: float = 50e-6  # N, s
    cnp_per_port: bool = False
    # reaction point (sender NIC)
    alpha_timer: float = 55e-6  # K, s: α decays (or is updated, mellanox) every K
    g: float = 1 / 256
    alpha0: float = 1.0  # α at the start (mellanox: set to 1 by the first CNP)
    rate_timer: float = 55e-6  # T, s: an increase event every T
    byte_counter: int | None = 10_000_000  # B, bytes: an increase event every B sent (None: off)
    fast_recovery_steps: int = 5  # F
    rai: float = 40e6  # additive increase, bit/s
    rhai: float = 200e6  # hyper increase, bit/s
    rate_reduce_period: float = 0.0  # s: at most one cut per period (0: every CNP cuts)
    # a cut leaves at least this fraction of RC (NVIDIA's rpg_min_dec_fac / 100: 0.95 limits a
    # cut to 5 %, the long-haul recipe; at 0.5 it never binds, since α/2 <= 0.5)
    min_dec_fac: float = 0.5
    min_rate: float = 1e6  # bit/s: RC never falls below it
    clamp_target: bool = True  # RT = RC at every cut (False: only after an increase since)


DEFAULTS: dict[Variant, DcqcnParams] = {
    "paper": DcqcnParams(),
    "mellanox": DcqcnParams(
        variant="mellanox",
        cnp_interval=4e-6,  # min_time_between_cnps (firmware-dependent: 0-4 µs), per port
        cnp_per_port=True,
        alpha_timer=1e-6,  # dce_tcp_rtt
        alpha0=1.0,
        rate_timer=300e-6,  # rpg_time_reset
        byte_counter=None,  # HPCC's Mlx model: timer only (rpg_byte_reset 32767 B unmodelled)
        fast_recovery_steps=1,  # rpg_threshold
        rai=5e6,  # rpg_ai_rate
        rhai=50e6,  # rpg_hai_rate
        rate_reduce_period=4e-6,  # rate_reduce_monitor_period
        min_dec_fac=0.5,  # rpg_min_dec_fac 50 %
        min_rate=1e6,  # rpg_min_rate
        clamp_target=False,  # clamp_tgt_rate 0
    ),
    "ns3": DcqcnParams(
        variant="ns3",
        alpha0=0.5,
        rate_timer=60e-6,
        byte_counter=300_000,
    ),
}

TIME_FIELDS = ("cnp_interval", "alpha_timer", "rate_timer", "rate_reduce_period")
RATE_FIELDS = ("rai", "rhai", "min_rate")


def defaults(variant: Variant) -> DcqcnParams:
    """The variant's published defaults (real units)."""
    if variant not in DEFAULTS:
        raise ValueError(f"DCQCN variant {variant!r}: one of {', '.join(VARIANTS)}")
    return DEFAULTS[variant]


def dilate(p: DcqcnParams, s: float) -> DcqcnParams:
    """``p`` in real units -> the emulated ones at dilation ``s``: times x s, rates / s."""
    if s <= 0:
        raise ValueError(f"dilation must be positive, got {s}")
    changes = {f: getattr(p, f) * s for f in TIME_FIELDS}
    changes |= {f: getattr(p, f) / s for f in RATE_FIELDS}
    return dataclasses.replace(p, **changes)


def undilate(p: DcqcnParams, s: float) -> DcqcnParams:
    """Emulated units at dilation ``s`` -> real ones (the inverse of :func:`dilate`)."""
    return dilate(p, 1 / s)


def real_time(emulated_s: float, s: float) -> float:
    """A time measured on the testbed, in the real-world units it stands for."""
    return emulated_s / s


def real_rate(emulated_bps: float, s: float) -> float:
    """A rate measured on the testbed, in the real-world units it stands for."""
    return emulated_bps * s
