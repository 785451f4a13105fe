"""How big the plan makes each queue and bucket of a WAN direction, and the hosts' TCP buffers.
PURE arithmetic on rates, delays and bytes.

The plan sizes every direction at bring-up with these, and the timeline (testbed.plan.timeline)
and the link backends again at every rate or delay change, so a ``buffer: Nbdp`` or a netem
limit follows the link with the same rule.
"""

from __future__ import annotations

import math

from testbed.core.frames import FRAME_BYTES

# A GSO packet can be up to 64 KiB; a byte-limited queue smaller than two of them would drop
# every large packet, so buffers get this floor (and the plan says so).
MIN_BUFFER = 2 * 65536


def bdp_bytes(rate: int, rtt: float) -> int:
    """rate x RTT in bytes; rounded to the nearest byte so float noise (10 Mbit/s x 35 ms =
    43750.000000001) does not add one."""
    return round(rate * rtt / 8)


def unfloored_buffer(setting: tuple[str, float], bdp: int) -> int:
    """Bytes of a ``buffer`` setting (("bdp", multiple) or ("bytes", n)) at this BDP."""
    kind, amount = setting
    return math.ceil(amount * bdp) if kind == "bdp" else int(amount)


def resolve_buffer(setting: tuple[str, float], bdp: int) -> int:
    """The bottleneck buffer in bytes: the setting at this BDP, never below ``MIN_BUFFER``. The
    plan sizes each direction with it at bring-up and the timeline again at every rate or
    delay change (a ``buffer: Nbdp`` follows the link)."""
    return max(MIN_BUFFER, unfloored_buffer(setting, bdp))


def htb_burst(rate: int) -> int:
    """Bucket size: at least one 64 KiB GSO packet, or 1 ms at the rate, whichever is larger."""
    return max(65536 + FRAME_BYTES, math.ceil(rate / 8 * 1e-3))


def htb_quantum(rate: int) -> int:
    """HTB's default quantum (rate/r2q) overflows at high rates; pin it to one 64 KiB packet."""
    return 65536 + FRAME_BYTES


def netem_limit(rate: int, reverse_rate: int, delay: float, jitter: float, buffer: int) -> int:
    """Packets netem must be able to hold: everything in flight during the delay, plus the ACKs
    of the opposite direction's data, plus the buffer; counted in full-size frames, doubled for
    small packets, never below netem's default of 1000 (the classic long-fat-link pitfall)."""
    hold = delay + 4 * jitter
    in_flight = (rate + reverse_rate / 2) / 8 * hold + buffer
    return max(1000, math.ceil(2 * in_flight / FRAME_BYTES))


# bbr's STARTUP cwnd gain is 2.89 (2/ln 2): the most a sender keeps in flight on an empty path
STARTUP_INFLIGHT_BDP = 3


def sender_inflight_max(bdp: int, buffer: int) -> int:
    """The most one sender keeps in flight over a WAN direction: bbr's STARTUP cwnd (about
    3 x BDP), or pipe + buffer for a loss-based one that fills the bottleneck."""
    return max(STARTUP_INFLIGHT_BDP * bdp, bdp + buffer)


def tcp_buffer_max(inflight: int) -> int:
    """tcp_rmem/tcp_wmem maximum for 'auto': twice the largest ``sender_inflight_max``, never
    below the kernel default (6 MiB).

    Send side: Linux wakes a writer blocked on a full send buffer only once the queued bytes (in
    flight and not yet sent) are down to 2/3 of it (sk_stream_write_space). If what is in flight
    alone is above 2/3, the unsent part runs dry first and the next write finds an empty queue
    with room in the cwnd: the socket is marked application-limited. bbr ignores
    application-limited bandwidth samples when it checks whether its bandwidth stopped growing,
    so with 4 x BDP (2/3 of it is 2.67 BDP, below STARTUP's 2.89 BDP) it could stay in STARTUP
    for the whole transfer, overflowing a 1-BDP bottleneck buffer (docs/congestion.md, "bbr
    through the delay line"). Twice the inflight leaves a third of the buffer unsent when the
    writer is woken.
    Receive side: the window advertised is about 3/4 of the buffer (the payload share of the
    received skbs' memory), so twice the inflight is a window of 1.5 x it; with 4 x BDP a cubic
    flow could not fill a bottleneck buffer deeper than ~2 BDP (receive-window-limited)."""
    return max(6 * 1024 * 1024, 2 * inflight)
