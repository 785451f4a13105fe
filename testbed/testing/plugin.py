"""pytest plugin: an emulated multi-datacenter network per test, for regression tests of
communication code. Registered through the ``pytest11`` entry point, so installing the package
is enough::

    @pytest.mark.testbed("scenarios/quickstart.yaml", set={"wan[0].delay": "50ms"})
    def test_my_allreduce_is_wan_efficient(testbed):
        res = testbed.run_ranks(mypkg.comms.my_allreduce, nbytes=16 << 20)
        assert res.ok, res
        assert res.time.p50 <= 1.25 * res.predicted("all_reduce", "flat")

This module owns the pytest side only: the ``testbed`` marker, the ``testbed`` fixture (building,
sharing and always tearing down networks), skips, and the failure report section. Running the
ranks is :mod:`testbed.testing.ranktest`. Importing this module must stay cheap (every pytest run of
every project with the package installed imports it): nothing but pytest at import time.

Marker: ``@pytest.mark.testbed(scenario, set=None, scope="function", ranks_per_host=None,
placement=None, selfcheck=True)``. A relative ``scenario`` path is looked up next to the test
file first, then in the rootdir. ``scope="module"`` shares one network among the tests of a
module whose markers have the same arguments (torn down when the module's tests are done).

Skips (never failures), with the reason: not root; the kernel lacks what the scenario needs
(the testbed's "unsupported on this kernel: ..." errors).

A failing test that used the fixture gets a report section "testbed: ranks and network": every
failed ``run_ranks`` or ``run_command`` call of the test explained (failing ranks or processes,
their hosts, traceback or log tails, the stack of a rank that hung), or the last call's times,
plus the network state.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

MARKER_HELP = (
    "testbed(scenario, set=None, scope='function', ranks_per_host=None, placement=None, "
    "selfcheck=True): build the emulated network of this scenario file for the `testbed` "
    "fixture (multicluster-testbed; docs/plugin.md)"
)
SCOPES = ("function", "module")
_OPTIONS = ("set", "scope", "ranks_per_host", "placement", "selfcheck")
SECTION = "testbed: ranks and network"
NEEDS_ROOT = (
    "testbed: needs root (network namespaces, qdiscs, iptables); run pytest as root, or inside "
    "a guest: `testbed vm -- pytest ...`"
)


@dataclass(frozen=True)
class _Request:
    """The marker's arguments, normalised: equal requests share a module-scoped network."""

    path: str
    overrides: str  # JSON of the set={...} mapping, sorted: hashable and printable
    scope: str
    ranks_per_host: int | None
    placement: str | None
    selfcheck: bool

    @property
    def set(self) -> dict[str, Any]:
        return json.loads(self.overrides)


@dataclass
class _Skip:
    reason: str


@dataclass
class _InUse:
    """What one test is using: the network and where its own run_ranks calls start."""

    rank_testbed: Any  # testbed.ranktest.RankTestbed (imported lazily)
    first_result: int


_IN_USE = pytest.StashKey[_InUse]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)


def _fail(message: str) -> NoReturn:
    pytest.fail(f"@pytest.mark.testbed: {message}", pytrace=False)


def _resolve(scenario: Any, request: pytest.FixtureRequest) -> str:
    path = Path(os.fspath(scenario))
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path(request.path).parent / path, request.config.rootpath / path]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.resolve())
    tried = ", ".join(str(c) for c in dict.fromkeys(candidates))
    _fail(f"scenario {os.fspath(scenario)!r} not found (looked at {tried})")


def _request(request: pytest.FixtureRequest) -> _Request:
    marker = request.node.get_closest_marker("testbed")
    if marker is None:
        _fail(
            "the `testbed` fixture needs a scenario: decorate the test with "
            '@pytest.mark.testbed("path/to/scenario.yaml")'
        )
    if len(marker.args) != 1:
        _fail(f"expected exactly one positional argument, the scenario path; got {marker.args!r}")
    unknown = sorted(set(marker.kwargs) - set(_OPTIONS))
    if unknown:
        _fail(f"unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(_OPTIONS)}")
    kw = marker.kwargs
    scope = kw.get("scope", "function")
    if scope not in SCOPES:
        _fail(f"scope={scope!r}; allowed: {', '.join(SCOPES)}")
    overrides = kw.get("set") or {}
    if not isinstance(overrides, dict):
        _fail(
            f'set= takes a mapping of field path -> value, e.g. {{"wan[0].delay": "50ms"}}; '
            f"got {overrides!r}"
        )
    try:
        text = json.dumps(overrides, sort_keys=True)
    except TypeError as exc:
        _fail(f"set= values must be plain YAML-like values (str, number, list, dict): {exc}")
    return _Request(
        path=_resolve(marker.args[0], request),
        overrides=text,
        scope=scope,
        ranks_per_host=kw.get("ranks_per_host"),
        placement=kw.get("placement"),
        selfcheck=bool(kw.get("selfcheck", True)),
    )


def _build(req: _Request, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A network that is up, or a _Skip saying why this host cannot build it."""
    from testbed.core.errors import ScenarioError, TestbedError, UnsupportedError
    from testbed.testing.ranktest import RankTestbed

    # pt<pid>-<hex>: unique per run and per network, a valid registry name; `testbed ls` shows
    # which pytest process made it
    name = f"pt{os.getpid()}-{secrets.token_hex(2)}"
    try:
        rt = RankTestbed.from_file(
            req.path,
            set=req.set,
            name=name,
            ranks_per_host=req.ranks_per_host,
            placement=req.placement,
            selfcheck=req.selfcheck,
            out_dir=tmp_path_factory.mktemp(name, numbered=False),
        )
    except (ScenarioError, ValueError) as exc:
        _fail(str(exc))
    try:
        return rt.up()
    except TestbedError as exc:
        if isinstance(exc, UnsupportedError):
            return _Skip(f"testbed: {exc}")
        raise


@pytest.fixture(scope="module")
def _testbed_module_networks() -> Iterator[dict[_Request, Any]]:
    """The module-scoped networks (and skip reasons) of one test module, torn down at its end."""
    networks: dict[_Request, Any] = {}
    yield networks
    errors = []
    for entry in reversed(list(networks.values())):
        if not isinstance(entry, _Skip):
            try:
                entry.down()
            except Exception as exc:  # bring the others down too, then report
                errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def testbed(
    request: pytest.FixtureRequest,
    _testbed_module_networks: dict[_Request, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    """The emulated network of the test's ``@pytest.mark.testbed(...)``: a
    :class:`testbed.ranktest.RankTestbed` (``run_ranks(fn, *args, **kwargs)``,
    ``run_command(argv, per="rank", ...)``, ``testbed``, ``plan``, ``ranks``, ``links``).
    Skipped when not root or when the kernel lacks what the scenario needs."""
    req = _request(request)
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    if req.scope == "module":
        entry = _testbed_module_networks.get(req)
        if entry is not None and not isinstance(entry, _Skip) and entry.testbed.problems():
            # the emulation broke during an earlier test (a dead delay line): start afresh
            entry.down()
            entry = None
        if entry is None:
            entry = _build(req, tmp_path_factory)
            _testbed_module_networks[req] = entry
        if isinstance(entry, _Skip):
            pytest.skip(entry.reason)
        request.node.stash[_IN_USE] = _InUse(entry, len(entry.results))
        yield entry
        return
    entry = _build(req, tmp_path_factory)
    if isinstance(entry, _Skip):
        pytest.skip(entry.reason)
    try:
        request.node.stash[_IN_USE] = _InUse(entry, 0)
        yield entry
    finally:
        entry.down()


def _stop_reason(exc: BaseException) -> str:
    """Why the session must stop, when ``exc`` is a testbed's answer to SIGTERM (``Terminated``)
    or a run's to Ctrl-C or SIGTERM (``RunInterrupted``); "" otherwise. Looked up among the
    modules already imported: neither can be raised before its module is, and this plugin's
    import stays cheap."""
    for module, name in (("testbed.live.network", "Terminated"),
                         ("testbed.experiment.execute", "RunInterrupted")):  # fmt: skip
        kind = getattr(sys.modules.get(module), name, None)
        if kind is not None and isinstance(exc, kind):
            return str(exc) or name
    return ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    if call.excinfo is not None and (stop := _stop_reason(call.excinfo.value)):
        # SIGTERM (a CI job's timeout) or Ctrl-C while a network was up: it was torn down on
        # the way out; do not go on building new ones
        item.session.shouldstop = stop
    in_use = item.stash.get(_IN_USE, None)
    if in_use is None:
        return
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    rt = in_use.rank_testbed
    mine = rt.results[in_use.first_result :]
    failed = [r for r in mine if not r.ok]
    if failed:
        text = "\n\n".join(r.explain() for r in failed)
    elif mine:
        text = mine[-1].explain()  # all ranks fine: the times and the network explain the rest
    else:
        text = rt.network_state()
    report.sections.append((SECTION, text))
