"""Run a user's function on every rank of a live testbed and report what happened.

:class:`RankTestbed` (a network built from a scenario, ranks placed on its hosts, functions run
on them) and :class:`RankResults` (per-rank returns, timings, errors with tracebacks, problems,
the link self-check and α-β predictions). The pytest plugin (:mod:`testbed.testing.plugin`) is a
thin layer over it; scripts may use it directly::

    with RankTestbed.from_file("scenarios/quickstart.yaml", set={"wan[0].delay": "50ms"}) as rt:
        res = rt.run_ranks(mypkg.comms.my_allreduce, nbytes=16 << 20)
        assert res.ok, res.explain()
        print(res.time.p50, res.predicted("all_reduce", "flat"))

Modules: ``harness`` (RankTestbed), ``functions`` (what may be sent to the ranks),
``outcomes`` (one rank's outcome, read back), ``results`` (RankResults and explain()).
"""

from testbed.testing.ranktest.functions import RankFunctionError, check_signature, describe_function
from testbed.testing.ranktest.harness import RankTestbed
from testbed.testing.ranktest.outcomes import RankOutcome
from testbed.testing.ranktest.results import RankResults, TimeStats

__all__ = [
    "RankFunctionError",
    "RankOutcome",
    "RankResults",
    "RankTestbed",
    "TimeStats",
    "check_signature",
    "describe_function",
]
