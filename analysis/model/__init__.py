"""α-β cost model of torch.distributed's gloo collectives across emulated clusters. PURE.

The package owns the *predicted* time of every collective × algorithm the testbed measures, so a
report can show measured / predicted. It imports neither torch nor the emulation layers: the
runner builds a :class:`Topology` (plain data) from its NetworkPlan, with ``goodput = rate ×
plan.goodput_factor``. ``topology``: the network and one step of concurrent transfers;
``gloo``: gloo's segmented ring replayed; ``harness``: the timed loop (barrier, then the
collective) rank by rank; ``collectives``: the algorithms and the predictions
(:func:`predict_terms` splits one into its terms, :func:`predict_phases` into the phases the ranks
time). The TCP window it uses is analysis.tcp's. docs/model.md has the full reasoning.

Not modelled: loss and its recovery (drop-tail overflow when a two-segment burst exceeds the WAN
buffer: docs/model.md on wan-asymmetry), gloo's segmenting inside reduce/broadcast/all_gather,
the gateways' forwarding CPU, and a CPU shared by all namespaces (``host_bw`` is one number,
measured on an unshaped WAN).
"""

from analysis.model.collectives import (
    TERMS,
    host_bw_from_phases,
    predict,
    predict_all,
    predict_phases,
    predict_push_pull,
    predict_terms,
    predict_timed,
    unsupported,
)
from analysis.model.gloo import gloo_ring_lengths, gloo_ring_segments
from analysis.model.topology import RINGS, Link, Topology, rank_clusters, wan_path

__all__ = [
    "RINGS",
    "TERMS",
    "Link",
    "Topology",
    "gloo_ring_lengths",
    "gloo_ring_segments",
    "host_bw_from_phases",
    "predict",
    "predict_all",
    "predict_phases",
    "predict_push_pull",
    "predict_terms",
    "predict_timed",
    "rank_clusters",
    "unsupported",
    "wan_path",
]
