"""Workload kinds, registered in one place: ``workload: kind: <name>`` -> its
:class:`~testbed.experiment.workloads.base.WorkloadKind` (base.py has the interface). A new kind
is one module beside these and one line here."""

from testbed.experiment.workloads import collectives, command, training
from testbed.experiment.workloads.base import KINDS, RunRows, WorkloadKind, kind_of, register

register(collectives.KIND)
register(training.KIND)
register(command.KIND)

__all__ = ["KINDS", "RunRows", "WorkloadKind", "kind_of", "register"]
