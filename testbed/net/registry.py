"""The registry of testbeds on this machine: who owns which prefix, address block and processes.

One JSON record per testbed in ``/run/testbed`` (tmpfs: it vanishes with the namespaces on
reboot). A record is written *before* the first kernel object exists, so a testbed killed half-way
through its construction is still found by ``testbed clean``. A testbed is *live* while it is
persistent (made by ``testbed up``) or while its owner process is alive; everything else is a
leftover. Processes are identified by (pid, start time) so a reused pid is never mistaken for ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.core import files
from testbed.core.errors import RegistryError
from testbed.core.files import atomic_write_text
from testbed.core.procstat import start_time

STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))
PREFIX_STEM = "mctb"
PREFIX = re.compile(r"^mctb[0-9a-f]{4}$")
NAMESPACE = re.compile(r"^(mctb[0-9a-f]{4})-")
SLOTS = range(64, 192)  # 10.<slot>.0.0/16 per testbed
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it does not exist or has
    exited. An exited process stays a zombie until its parent reaps it, and a delay line whose
    `testbed up` has gone is reaped by PID 1 whenever that gets to it (a second and more in
    some containers): teardown must not wait for that."""
    return start_time(pid)


def process_alive(pid: int, start: int | None) -> bool:
    now = process_start(pid)
    return now is not None and (start is None or now == start)


@dataclass
class Record:
    name: str
    prefix: str
    slot: int
    owner_pid: int
    owner_start: int | None
    persistent: bool = False
    phase: str = "building"  # building | up | down
    created: float = field(default_factory=time.time)
    scenario: str = ""
    backend: str = ""
    engine: str = "native"  # what made its namespaces (testbed.net.engines)
    namespaces: list[str] = field(default_factory=list)
    processes: list[tuple[int, int | None, str]] = field(default_factory=list)  # pid, start, what
    hosts: dict[str, str] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    # One machine's part of a topology over several (testbed.live.spanned): its machine name.
    # A part owns exactly its recorded namespaces (another part may share the kernel, in tests).
    machine: str = ""
    # The namespace that stands for that machine (stand-in machines on one kernel), else "":
    # two pairs of stand-ins on one kernel have the same machine names, not the same namespaces.
    machine_netns: str = ""

    @property
    def key(self) -> str:
        """The prefix (prefix@machine for a part): its record file's and state directory's name."""
        return f"{self.prefix}@{self.machine}" if self.machine else self.prefix

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.key}.json"

    @property
    def state_dir(self) -> Path:
        """Its processes' files (delay lines, FRR), gone with it."""
        return STATE_DIR / self.key

    def live(self) -> bool:
        return self.persistent or process_alive(self.owner_pid, self.owner_start)

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(asdict(self), indent=1))

    def add_process(self, pid: int, what: str) -> None:
        self.add_processes([(pid, what)])

    def add_processes(self, started: list[tuple[int, str]]) -> None:
        """Record several processes with one save (a save rewrites the whole record)."""
        self.processes += [(pid, process_start(pid), what) for pid, what in started]
        self.save()

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """The machine-wide registry lock (flock): claims, and the shared allowed-cc list."""
    with files.locked(STATE_DIR / ".lock"):
        yield


def records() -> list[Record]:
    out = []
    if not STATE_DIR.is_dir():
        return out
    for path in sorted(STATE_DIR.glob("mctb*.json")):
        try:
            data = json.loads(path.read_text())
            data["processes"] = [tuple(p) for p in data.get("processes", [])]
            out.append(Record(**data))
        except (OSError, ValueError, TypeError):
            continue  # a record being replaced right now, or corrupt: clean handles the kernel side
    return out


def find(name: str) -> Record:
    for rec in records():
        if rec.name == name or rec.prefix == name:
            return rec
    live = ", ".join(r.name for r in records() if r.live()) or "none"
    raise RegistryError(f"no testbed named {name!r} (live testbeds: {live})")


def claim(
    name: str,
    scenario: str = "",
    persistent: bool = False,
    prefix: str | None = None,
    slot: int | None = None,
    machine: str = "",
    machine_netns: str = "",
) -> Record:
    """Reserve a unique prefix, address slot and name for a new testbed owned by this process.

    ``prefix`` and ``slot``: reserve exactly these (one topology over several machines has the
    same prefix and address block on each: the driver picks them, every machine reserves
    them); a RegistryError says which is taken. ``machine``: the record is that machine's part
    of such a topology; parts of one testbed (same name, other machines) may share a registry,
    as the "machines" of a test on one kernel do (``machine_netns``: the namespace that stands
    for that machine there)."""
    if not NAME.match(name):
        raise RegistryError(
            f"{name!r} is not a valid testbed name; allowed: a-z, 0-9 and '-', at most 48 chars"
        )
    with locked():
        # the other machines' parts of this same testbed share its prefix and slot
        siblings = [r for r in records() if machine and r.name == name and r.machine != machine]
        existing = [r for r in records() if r not in siblings]
        for rec in existing:
            if rec.name == name and rec.live():
                raise RegistryError(
                    f"a testbed named {name!r} is already up (prefix {rec.prefix}); "
                    f"choose another --name or run `testbed down {name}`"
                )
        # Leftovers keep their slot and prefix until cleaned, so they never collide either.
        used_slots = {r.slot for r in existing}
        used_prefixes = {r.prefix for r in existing} | (
            _prefixes_in_kernel() - {r.prefix for r in siblings}
        )
        if slot is not None:
            if slot not in SLOTS:
                raise RegistryError(f"slot {slot} is outside {SLOTS.start}..{SLOTS.stop - 1}")
            if slot in used_slots:
                raise RegistryError(f"address block 10.{slot}.0.0/16 is taken on this machine")
            free = [slot]
        else:
            free = [s for s in SLOTS if s not in used_slots]
        if not free:
            raise RegistryError(
                f"all {len(SLOTS)} address blocks are taken; run `testbed clean` or take some down"
            )
        if prefix is not None:
            if not PREFIX.match(prefix):
                raise RegistryError(f"{prefix!r} is not a testbed prefix (mctb + 4 hex digits)")
            if prefix in used_prefixes:
                raise RegistryError(f"prefix {prefix} is taken on this machine")
        else:
            while True:
                prefix = f"{PREFIX_STEM}{secrets.token_hex(2)}"
                if prefix not in used_prefixes:
                    break
        pid = os.getpid()
        rec = Record(
            name, prefix, free[0], pid, process_start(pid), persistent, scenario=scenario,
            machine=machine, machine_netns=machine_netns,
        )  # fmt: skip
        rec.save()
        return rec


def _prefixes_in_kernel() -> set[str]:
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return set()
    return {m.group(1) for n in names if (m := NAMESPACE.match(n))}


def namespaces_with_prefix(prefix: str) -> list[str]:
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(prefix + "-"))


def orphan_prefixes() -> set[str]:
    """Prefixes with kernel objects but no live owner: what ``testbed clean`` removes."""
    live = {r.prefix for r in records() if r.live()}
    recorded = {r.prefix for r in records()}
    return (recorded | _prefixes_in_kernel()) - live
