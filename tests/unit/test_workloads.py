"""The workload schema's ``Literal`` types name exactly the core vocabulary (testbed.core.vocab),
so a name added to one and not the other fails here rather than in a run."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from testbed.config import workloads
from testbed.core import vocab


@pytest.mark.parametrize(
    ("alias", "names"),
    [
        (workloads.Collective, vocab.COLLECTIVES),
        (workloads.Algorithm, vocab.ALGORITHMS),
        (workloads.RankPlacement, vocab.RANK_PLACEMENTS),
        (workloads.ServerPlacement, vocab.SERVER_PLACEMENTS),
        (workloads.TrainingAlgorithm, vocab.TRAINING_ALGORITHMS),
    ],
)
def test_literal_types_are_the_core_vocabulary(alias: Any, names: tuple[str, ...]) -> None:
    assert get_args(alias) == names


def test_the_fields_take_the_vocabulary_types() -> None:
    fields = workloads.Workload.model_fields
    assert fields["collectives"].annotation == list[workloads.Collective]
    assert fields["algorithms"].annotation == list[workloads.Algorithm]
    assert fields["placement"].annotation == workloads.RankPlacement
    training = workloads.TrainingWorkload.model_fields
    assert training["placement"].annotation == workloads.RankPlacement
    assert training["algorithm"].annotation == workloads.TrainingAlgorithm
    servers = workloads.ParameterServerOptions.model_fields["servers"]
    assert servers.annotation == workloads.ServerPlacement
