"""What every live network offers (:class:`LiveNetwork`): the part that the one-machine
:class:`testbed.live.network.Network` and the across-machines
:class:`testbed.live.spanned.SpannedNetwork` share, and all that the link self-check, the
experiment runner and the rank launcher use of either. Structural (a ``typing.Protocol``): a
stand-in network in the tests needs no base class.

A process started in a host is a :class:`subprocess.Popen` on one machine and a proxy of one
across machines: both have the :class:`HostProcess` shape; a server that ``serving`` yields
has the :class:`Server` shape.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from testbed.config.scenario import Scenario
from testbed.link.base import LinkBackend
from testbed.net.engines import Engine
from testbed.net.registry import Record
from testbed.plan.compensation import Compensation
from testbed.plan.model import NetworkPlan


class Chosen(Protocol):
    """What the machines of a network across machines run (an engine, a link backend), as the
    results record it: its name and why it was chosen."""

    @property
    def name(self) -> str: ...

    @property
    def reason(self) -> str: ...


class HostProcess(Protocol):
    """A process running in a host (``popen``): a Popen, or what stands for one elsewhere."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, signum: int, /) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class Server(Protocol):
    """A server ``serving`` started: ``communicate`` gives what it wrote after READY."""

    def communicate(self, *, timeout: float | None = None) -> tuple[Any, Any]: ...


class LiveNetwork(Protocol):
    """A network built from a scenario, on one machine or across several (see module doc)."""

    name: str
    plan: NetworkPlan | None  # once up
    record: Record | None  # the registry record (across machines: the first machine's part)
    compensation: list[Compensation]  # per WAN direction, when the delays were compensated

    @property
    def scenario(self) -> Scenario | None: ...

    @property
    def backend(self) -> LinkBackend | Chosen | None: ...  # once up

    @property
    def engine(self) -> Engine | Chosen: ...

    @property
    def hosts(self) -> dict[str, str]: ...

    def up(self) -> LiveNetwork: ...

    def down(self) -> None: ...

    def __enter__(self) -> LiveNetwork: ...

    def __exit__(self, *exc: object) -> None: ...

    def across_machines(self) -> dict[str, Any]:
        """What the results record of the machines it spans (empty on one machine)."""
        ...

    def run(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` in ``host`` and wait (text output, captured)."""
        ...

    def popen(
        self,
        host: str,
        argv: list[str],
        what: str = "",
        *,
        env: dict[str, str] | None = None,
        stdout: Any = None,
        stderr: Any = None,
    ) -> HostProcess:
        """Start ``argv`` in ``host``; stopped at teardown."""
        ...

    def serving(self, host: str, module: str, *args: str) -> AbstractContextManager[Server]:
        """``python -m module args`` in ``host`` once READY; stopped on the way out."""
        ...

    def free_port(self, host: str) -> int: ...

    def sysctls(self, host: str, keys: list[str]) -> dict[str, str]: ...

    def compensation_of(self, direction: str) -> Compensation | None: ...

    def link_stats(self) -> list[dict]: ...

    def problems(self) -> list[str]: ...
