"""The project's vocabulary: the names of collectives, algorithms, rank placements and training
algorithms, and the thresholds that several layers judge by. PURE, standard library only.

Config validates against these tuples, traffic runs them, analysis models and reports them: one
copy, so a name added here is known everywhere (and a name missing here is refused everywhere).
"""

from __future__ import annotations

# nccl-tests' collectives (traffic.collectives states each one's byte count and bus factor)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
# how a collective crosses the WAN: one ring/tree over all ranks, or cluster-aware phases
ALGORITHMS = ("flat", "hierarchical", "hierarchical-2d")
# which rank goes to which host (testbed.core.ranks.rank_order)
RANK_PLACEMENTS = ("by-cluster", "interleaved")
# where a parameter server's shards live
SERVER_PLACEMENTS = ("first-cluster", "per-cluster")
# training algorithms (traffic.training.schedule builds each one's communication schedule)
TRAINING_ALGORITHMS = (
    "ddp",
    "localsgd",
    "diloco",
    "streaming-diloco",
    "hierarchical",
    "parameter-server",
)
# s: an event applied later than this after its scheduled time is flagged late (the event runner
# records it, the fault analysis counts it)
LATE_S = 0.020

# The link self-check's verdicts (the runner flags, the report explains them in these terms):
SELFCHECK_TOLERANCE = 0.10  # RTT, and TCP goodput below the ceiling: flagged when off by more
SELFCHECK_CAPACITY_LOW = 0.97  # capacity below this share of the rate: the link carries too little
SELFCHECK_LEAK = 1.01  # capacity or goodput above this share: more gets through than planned
