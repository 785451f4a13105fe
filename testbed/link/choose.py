"""Which ``LinkBackend`` a scenario gets on this kernel: decided once, from the probe, so that
``doctor``, ``plan`` and ``up`` all say the same thing. PURE given the ``KernelFeatures``."""

from __future__ import annotations

from testbed.core.errors import UnsupportedError
from testbed.link.base import LinkBackend
from testbed.link.kernel import KernelBackend, ShapingOnlyBackend
from testbed.link.tclink import TclinkBackend
from testbed.link.userspace import UserspaceBackend
from testbed.net.probe import KernelFeatures


def choose_backend(
    requested: str,
    needs_propagation: bool,
    feats: KernelFeatures,
    needs_marking: bool = False,
    needs_hold: bool = False,
) -> LinkBackend:
    """How delay/jitter/loss/reorder and marking profiles are emulated: the kernel (netem, red),
    the userspace delay line (which then also emulates the marking bottlenecks), shaping only
    (nothing to emulate) or Mininet's TCLink (``tclink``, engine mininet). ``requested`` is the
    scenario's ``backend`` (auto|kernel|userspace|tclink).
    A trace (``needs_hold``) needs sch_plug in the kernel (its zero-rate bins hold the queue);
    the delay line holds it itself."""
    netem = feats.has_qdisc("netem")
    red = feats.has_qdisc("red")
    wants = (
        ("netem", needs_propagation, netem),
        ("red", needs_marking, red),
        ("plug", needs_hold, feats.has_qdisc("plug")),
    )
    missing = [q for q, need, have in wants if need and not have]
    if requested == "tclink":
        return TclinkBackend("backend: tclink requested (Mininet's TCLink, unchanged)", netem)
    if requested == "kernel":
        if missing:
            raise UnsupportedError(
                f"backend: kernel needs {' and '.join('sch_' + m for m in missing)}, which this "
                f"kernel lacks (unsupported on this kernel: {', '.join(missing)}, release "
                f"{feats.release}); use `backend: auto` or `userspace`"
            )
        if netem or needs_marking:
            has = "sch_netem" if netem else "sch_red"
            return KernelBackend(f"backend: kernel requested; this kernel has {has}")
        return ShapingOnlyBackend("backend: kernel requested; no delay/loss to emulate")
    if requested == "userspace":
        return UserspaceBackend("backend: userspace requested")
    if not missing:
        if netem:
            return KernelBackend("auto: this kernel has sch_netem")
        if needs_marking:
            return KernelBackend("auto: this kernel has sch_red; nothing to delay")
        return ShapingOnlyBackend("auto: no netem, but the scenario needs only rate shaping")
    return UserspaceBackend(
        f"auto: this kernel has no {' and no '.join('sch_' + m for m in missing)}; using the "
        "userspace delay line"
        + (" (which also emulates the marking bottlenecks)" if needs_marking else "")
    )
