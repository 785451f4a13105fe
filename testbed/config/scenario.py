"""Scenario files: the pydantic schema, loading from YAML, and user-facing validation errors.

A scenario is parsed once at the edge: every unit string becomes an SI number here ("25ms" ->
0.025, "1gbit" -> 1e9), so later layers never see text. Unknown keys are errors. Errors name the
file, the field path (``wan[0].delay``), the bad value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from testbed.config.dcqcn import DcqcnTraffic, DcqcnWorkload
from testbed.config.dynamics import (
    FAULT_KINDS,
    BulkFlow,
    DirectionSettings,
    Fault,
    LinkTrace,
    ScheduleStep,
)
from testbed.config.expect import Expectation
from testbed.config.fields import Buffer, Duration, Fraction, Rate, Size
from testbed.config.fields import FieldError as _FieldError
from testbed.config.fields import Strict as _Strict
from testbed.config.presets import fill_link as fill_preset
from testbed.config.presets import find as find_preset
from testbed.core.aqm import KIND_FIELDS, THRESHOLD_FIELDS
from testbed.core.errors import ScenarioError
from testbed.core.paths import format_path
from testbed.core.units import parse_duration, parse_size

MAX_CLUSTERS = 16
MAX_HOSTS_PER_CLUSTER = 64
SCENARIO_NAME = re.compile(r"^[a-z0-9-]{1,32}$")
# Cluster names become host names (east-h0), namespace labels (wan-east-west) and interface names
# (w-east, at most 15 characters in the kernel): so a letter then letters and digits, no '-' (which
# would make wan-a-b-c ambiguous), at most 12 characters.
CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9]*$")
CLUSTER_NAME_MAX = 12
CONGESTION_NAME = re.compile(r"^[a-z0-9_]{1,16}$")


def _auto_or_size(v: Any) -> Any:
    if v == "auto":
        return v
    try:
        size = parse_size(v)
    except ValueError:
        raise ValueError(f"{v!r} is neither auto nor a size; examples: auto, 4MiB, 64MB") from None
    if size <= 0:
        raise ValueError("a buffer size must be positive; examples: auto, 4MiB, 64MB")
    return size


AutoSize = Annotated[Any, BeforeValidator(_auto_or_size)]


class Fabric(_Strict):
    """Host <-> cluster-gateway links. Unshaped unless a rate is given."""

    rate: Rate | None = None
    delay: Duration = 0.0


class TcpSettings(_Strict):
    """TCP stack settings of a host namespace. ``None`` in a cluster override means 'inherit'."""

    congestion: str = "cubic"
    ecn: bool = False
    rmem: AutoSize = "auto"
    wmem: AutoSize = "auto"
    # Linux resets cwnd after an idle RTO; collectives idle between iterations, so on a long
    # link every iteration pays slow start again. Kernel default (true) unless turned off.
    slow_start_after_idle: bool = True
    # net.ipv4.tcp_retries2: how many RTO backoffs before an established connection with
    # unacknowledged data gives up (None: the kernel's, 15, about 924 s).
    retries2: int | None = Field(None, ge=1, le=255)
    # TCP_USER_TIMEOUT on every TCP socket a rank holds (gloo sets none): how long sent data may
    # stay unacknowledged before the connection fails with ETIMEDOUT. 0: the kernel's (off).
    user_timeout: Duration = 0.0

    @field_validator("congestion")
    @classmethod
    def _congestion_name(cls, v: str) -> str:
        if not CONGESTION_NAME.match(v):
            raise ValueError(f"{v!r} is not a congestion control name; examples: cubic, bbr, reno")
        return v


class TcpOverride(_Strict):
    congestion: str | None = None
    ecn: bool | None = None
    rmem: AutoSize | None = None
    wmem: AutoSize | None = None
    slow_start_after_idle: bool | None = None
    retries2: int | None = Field(None, ge=1, le=255)
    user_timeout: Duration | None = None

    _congestion_name = field_validator("congestion")(
        lambda cls, v: v if v is None else TcpSettings._congestion_name(v)
    )

    def apply(self, base: TcpSettings) -> TcpSettings:
        changes = {k: v for k, v in self.model_dump().items() if v is not None}
        return base.model_copy(update=changes)


class Cluster(_Strict):
    hosts: int = Field(ge=1, le=MAX_HOSTS_PER_CLUSTER)
    fabric: Fabric = Fabric()
    tcp: TcpOverride | None = None


class Aqm(_Strict):
    """The WAN bottleneck's queue discipline.

    ``droptail``: a FIFO of ``buffer`` bytes. ``red``: DCQCN's switch ramp, marking (or
    dropping, for non-ECN packets or ``ecn: false``) with probability rising linearly from 0 at
    ``kmin`` to ``pmax`` at ``kmax`` bytes of queue, and always above ``kmax``. ``step``:
    DCTCP-like, marks everything that arrives at more than ``k`` bytes of queue.

    ``at``: where the decision is taken: ``dequeue`` (on the queue a packet leaves behind, as
    DCQCN's simulators do) or ``arrival`` (on the queue it finds, as ``sch_red`` does). Unset:
    dequeue on the delay line, arrival on the kernel backend (``core.aqm.marking_point``).
    """

    kind: Literal["droptail", "red", "step"]
    kmin: Size | None = None
    kmax: Size | None = None
    pmax: Fraction | None = None
    k: Size | None = None
    ecn: bool = True
    at: Literal["dequeue", "arrival"] | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Aqm:
        needs = KIND_FIELDS[self.kind]
        given = [f for f in THRESHOLD_FIELDS if getattr(self, f) is not None]
        missing = [f for f in needs if f not in given]
        extra = [f for f in given if f not in needs]
        if missing:
            raise ValueError(
                f"aqm kind {self.kind} needs {', '.join(missing)}; "
                "examples: {kind: red, kmin: 20KB, kmax: 200KB, pmax: 1%} or {kind: step, k: 65KB}"
            )
        if extra:
            raise ValueError(
                f"aqm kind {self.kind} takes no {', '.join(extra)}"
                + (f" (it takes {', '.join(needs)})" if needs else "")
            )
        if self.kind == "red":
            assert self.kmin is not None and self.kmax is not None and self.pmax is not None
            if self.kmin >= self.kmax:
                raise ValueError(f"aqm kmin ({self.kmin} B) must be below kmax ({self.kmax} B)")
            if self.pmax <= 0:
                raise ValueError("aqm pmax must be above 0%; examples: 1%, 10%")
        return self

    @property
    def threshold(self) -> int:
        """The largest queue depth (bytes) the profile reacts to."""
        return {"droptail": 0, "red": self.kmax, "step": self.k}[self.kind] or 0


class DirectionOverride(DirectionSettings):
    """Settings of the second->first direction of a WAN link that differ from the first->second."""

    aqm: Aqm | None = None


def _direction(link: WanLink | WanPath, reverse: bool) -> dict[str, Any]:
    """The settings of one direction: forward as written, reverse with ``reverse`` applied."""
    fields = ("rate", "delay", "jitter", "loss", "reorder", "buffer", "aqm")
    settings = {f: getattr(link, f) for f in fields}
    if reverse and link.reverse is not None:
        overrides = {f: getattr(link.reverse, f) for f in fields}
        settings.update({f: v for f, v in overrides.items() if v is not None})
    return settings


def _positive_buffer(v: tuple[str, float]) -> tuple[str, float]:
    if v[1] <= 0:
        raise ValueError("buffer must be positive; examples: 1bdp, 0.5bdp, 4MiB")
    return v


# settings a WAN link and each of its parallel paths have
PATH_SETTINGS = ("rate", "delay", "jitter", "loss", "reorder", "buffer", "aqm", "reverse")
MAX_PATHS = 8  # a gateway port p<j>-<cluster> has at most 15 characters (cluster names: 12)


class WanPath(_Strict):
    """One of a WAN link's parallel paths (``paths:``): every setting of a single link, and its
    weight in the gateways' multipath routes (ECMP when all weights are equal)."""

    rate: Rate = 1_000_000_000
    delay: Duration = 0.0
    jitter: Duration = 0.0
    loss: Fraction = 0.0
    reorder: Fraction = 0.0
    buffer: Buffer = ("bdp", 1.0)
    aqm: Aqm | None = None
    reverse: DirectionOverride | None = None
    weight: int = Field(1, ge=1, le=256)

    _positive_buffer = field_validator("buffer")(lambda cls, v: _positive_buffer(v))

    def direction(self, reverse: bool) -> dict[str, Any]:
        return _direction(self, reverse)


class WanLink(_Strict):
    between: tuple[str, str]
    rate: Rate = 1_000_000_000
    delay: Duration = 0.0
    jitter: Duration = 0.0
    loss: Fraction = 0.0
    reorder: Fraction = 0.0
    buffer: Buffer = ("bdp", 1.0)
    # None: drop-tail in the kernel's HTB leaf (bfifo). See Aqm, and docs/congestion.md for
    # where each backend keeps the queue.
    aqm: Aqm | None = None
    reverse: DirectionOverride | None = None
    # How the link changes while the workload runs (testbed.config.dynamics): steps, or a
    # recorded link replayed; not both.
    schedule: list[ScheduleStep] = Field(default_factory=list)
    trace: LinkTrace | None = None
    # A measured real path the link starts from (testbed.config.presets): it fills the fields
    # not written here; ``scale`` multiplies its rates and byte buffer.
    preset: str | None = None
    scale: float = 1.0
    # Parallel paths between the two gateways, each with the settings above (then not written
    # at the link itself); the gateways spread traffic over them (routing.ecmp).
    paths: list[WanPath] = Field(default_factory=list)
    # Which of its link's paths this is (paths_of(): one WanLink per path); None: not a path.
    _path: int | None = PrivateAttr(None)
    _weight: int = PrivateAttr(1)

    @property
    def name(self) -> str:
        """How faults name the link: ``east-west`` (either order is accepted); a path of a
        multipath link: ``east-west/1``."""
        return "-".join(self.between) + ("" if self._path is None else f"/{self._path}")

    @property
    def path(self) -> int | None:
        return self._path

    @property
    def weight(self) -> int:
        return self._weight

    def paths_of(self) -> list[WanLink]:
        """The link's paths as links of their own (``east-west/0``, ...), each with its
        path's settings and weight; ``[self]`` for a single-path link."""
        if not self.paths:
            return [self]
        out = []
        for j, p in enumerate(self.paths):
            # validated already, as the path's fields
            link = WanLink.model_construct(
                between=self.between, **{f: getattr(p, f) for f in PATH_SETTINGS}
            )
            link._path, link._weight = j, p.weight
            out.append(link)
        return out

    @model_validator(mode="after")
    def _paths_alone(self) -> WanLink:
        if not self.paths:
            return self
        written = [f for f in PATH_SETTINGS if f in self.model_fields_set]
        if written:
            raise _FieldError(
                written[0],
                "a link with `paths` has its settings in each path; move "
                f"{', '.join(written)} into the paths",
            )
        if not 2 <= len(self.paths) <= MAX_PATHS:
            raise _FieldError(
                "paths", f"{len(self.paths)} paths given; a multipath link has 2 to {MAX_PATHS}"
            )
        for key in ("schedule", "trace", "preset"):
            if key in self.model_fields_set:
                raise _FieldError(
                    key, f"{key} is not supported on a link with `paths` yet (issue 18)"
                )
        return self

    @property
    def preset_source(self) -> str | None:
        """The preset, its scale and where its numbers come from (for the plan and results)."""
        return None if self.preset is None else find_preset(self.preset).describe(self.scale)

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "scale" in data and data.get("preset") is None:
            raise _FieldError(
                "scale",
                "scale multiplies a preset's rate; without `preset:` write the rate itself",
            )
        scale = data.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale < 1e6:
            raise _FieldError(
                "scale", f"{scale!r} is not a positive number (a rate multiplier, e.g. 0.1)"
            )
        try:
            return fill_preset(data)
        except ValueError as exc:
            raise _FieldError("preset", str(exc)) from None

    @model_validator(mode="after")
    def _one_dynamics(self) -> WanLink:
        if self.schedule and self.trace is not None:
            raise _FieldError(
                "trace", "a link has a schedule or a trace, not both; drop one of them"
            )
        for i, (a, b) in enumerate(zip(self.schedule, self.schedule[1:], strict=False)):
            if b.at <= a.at:
                raise _FieldError(
                    f"schedule[{i + 1}].at",
                    f"{b.at:g}s is not after the step before it ({a.at:g}s); steps are in "
                    "increasing time",
                )
        return self

    _positive_buffer = field_validator("buffer")(lambda cls, v: _positive_buffer(v))

    @field_validator("between", mode="before")
    @classmethod
    def _two_clusters(cls, v: Any) -> Any:
        if not isinstance(v, list | tuple) or len(v) != 2:
            raise ValueError("`between` names two clusters, e.g. [east, west]")
        if v[0] == v[1]:
            raise ValueError(f"a WAN link joins two different clusters, got {list(v)}")
        return v

    def direction(self, reverse: bool) -> dict[str, Any]:
        return _direction(self, reverse)


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
ALGORITHMS = ("flat", "hierarchical", "hierarchical-2d")
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
Algorithm = Literal["flat", "hierarchical", "hierarchical-2d"]


class Workload(_Strict):
    """What the ranks run. Sizes follow nccl-tests (see docs/results.md)."""

    kind: Literal["collectives"] = "collectives"
    ranks_per_host: int = Field(1, ge=1, le=16)
    placement: Literal["by-cluster", "interleaved"] = "by-cluster"
    collectives: list[Collective] = Field(["all_reduce"], min_length=1)
    algorithms: list[Algorithm] = Field(["flat"], min_length=1)
    sizes: list[Size] = Field([1 << 20], min_length=1)
    dtype: Literal["float32", "float64", "float16", "bfloat16"] = "float32"
    warmup: int = Field(1, ge=0, le=1000)
    iterations: int = Field(5, ge=1, le=100000)
    timeout: Duration = 300.0

    @field_validator("timeout")
    @classmethod
    def _positive_timeout(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("a timeout must be positive; examples: 60s, 300s")
        return v


# model -> the data it trains on (traffic.training.models, traffic.training.data)
TRAINING_MODELS = {
    "char-mlp": "pydoc-topics",
    "char-mlp-large": "pydoc-topics",
    "teacher-mlp": "teacher-student",
}
# On gloo in torch 2.13 these DDP hooks fail at run time (../shared/notes/training.md).
BROKEN_HOOKS = {
    "batched-powersgd": "batched_powerSGD_hook fails in torch 2.13 (_orthogonalize asserts a 3-D "
    "batch); use powersgd",
    "quantization": "quantization_pertensor_hook fails on gloo in torch 2.13 (IndexError in its "
    "callback); use fp16, bf16 or powersgd",
}


class DdpOptions(_Strict):
    """DistributedDataParallel: comm hook and bucket size (ddp, and hierarchical's inner DDP)."""

    hook: Literal["none", "fp16", "bf16", "powersgd", "batched-powersgd", "quantization"] = "none"
    bucket: Size = 25 << 20
    rank: int = Field(1, ge=1, le=64)  # powersgd's matrix approximation rank
    start: int = Field(2, ge=2)  # powersgd: plain all-reduce before this step (error feedback)

    @field_validator("hook")
    @classmethod
    def _working_hook(cls, v: str) -> str:
        if v in BROKEN_HOOKS:
            raise ValueError(f"{v!r} is refused: {BROKEN_HOOKS[v]}")
        return v


class DilocoOptions(_Strict):
    """DiLoCo's outer loop (diloco, streaming-diloco, hierarchical's across-cluster sync)."""

    inner_steps: int = Field(30, ge=1, le=100000)
    outer_lr: float = Field(0.7, gt=0, le=10)
    outer_momentum: float = Field(0.9, ge=0, lt=1)
    nesterov: bool = True
    dtype: Literal["fp32", "fp16", "bf16", "int8"] = "fp32"


class StreamingOptions(_Strict):
    """Streaming DiLoCo: fragments synced in turn, each overlapped with ``overlap_steps`` inner
    steps and merged with weight ``alpha`` on the local copy."""

    fragments: int = Field(4, ge=1, le=64)
    overlap_steps: int = Field(1, ge=0)
    alpha: float = Field(0.5, ge=0, le=1)


class LocalSgdOptions(_Strict):
    period: int = Field(10, ge=1, le=100000)  # steps between parameter averages


class ParameterServerOptions(_Strict):
    servers: Literal["first-cluster", "per-cluster"] = "first-cluster"
    staleness: int = Field(0, ge=0, le=1000)  # 0: synchronous; k: a worker runs <= k steps ahead


class TrainingWorkload(_Strict):
    """Real torch training on every rank (docs/training.md)."""

    kind: Literal["training"]
    ranks_per_host: int = Field(1, ge=1, le=16)
    placement: Literal["by-cluster", "interleaved"] = "by-cluster"
    model: Literal["char-mlp", "char-mlp-large", "teacher-mlp"] = "char-mlp"
    data: Literal["pydoc-topics", "teacher-student"] | None = None  # None: the model's own
    steps: int = Field(300, ge=1, le=1_000_000)
    batch: int = Field(32, ge=1, le=65536)  # per rank and step
    lr: float = Field(1e-3, gt=0, le=10)  # the inner optimizer's (AdamW)
    seed: int = Field(0, ge=0)
    algorithm: Literal[
        "ddp", "localsgd", "diloco", "streaming-diloco", "hierarchical", "parameter-server"
    ] = "ddp"
    ddp: DdpOptions = DdpOptions()
    diloco: DilocoOptions = DilocoOptions()
    streaming: StreamingOptions = StreamingOptions()
    localsgd: LocalSgdOptions = LocalSgdOptions()
    parameter_server: ParameterServerOptions = ParameterServerOptions()
    eval_every: int = Field(25, ge=1)
    target_loss: float | None = Field(None, gt=0)  # None: the DDP baseline's final loss
    timeout: Duration = 600.0

    @model_validator(mode="before")
    @classmethod
    def _data_of_model(cls, v: Any) -> Any:
        if (
            isinstance(v, dict)
            and v.get("data") is None
            and v.get("model", "char-mlp") in (TRAINING_MODELS)
        ):
            return {**v, "data": TRAINING_MODELS[v.get("model", "char-mlp")]}
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TrainingWorkload:
        wanted = TRAINING_MODELS[self.model]
        if self.data != wanted:
            raise _FieldError(
                "workload.data",
                f"model {self.model} trains on {wanted}, not {self.data}",
            )
        if self.algorithm == "streaming-diloco":
            h, f, tau = (
                self.diloco.inner_steps,
                self.streaming.fragments,
                self.streaming.overlap_steps,
            )
            if h % f:
                raise _FieldError(
                    "workload.streaming.fragments",
                    f"diloco.inner_steps ({h}) must be a multiple of streaming.fragments ({f}): "
                    "one fragment syncs every inner_steps/fragments steps",
                )
            if tau >= h // f:
                raise _FieldError(
                    "workload.streaming.overlap_steps",
                    f"{tau} must be below inner_steps/fragments ({h // f}): a fragment's "
                    "all-reduce must land before that fragment syncs again",
                )
        if self.timeout <= 0:
            raise _FieldError("workload.timeout", "a timeout must be positive; examples: 600s")
        return self


def _workload_kind(v: Any) -> str | None:
    if isinstance(v, dict):
        return v.get("kind", "collectives")
    return getattr(v, "kind", None)


AnyWorkload = Annotated[
    Annotated[Workload, Tag("collectives")]
    | Annotated[TrainingWorkload, Tag("training")]
    | Annotated[DcqcnWorkload, Tag("dcqcn")],
    Discriminator(_workload_kind),
]
WORKLOAD_KINDS = {"collectives": Workload, "training": TrainingWorkload, "dcqcn": DcqcnWorkload}
RankWorkload = Workload | TrainingWorkload

TrafficFlow = Annotated[
    Annotated[BulkFlow, Tag("bulk")] | Annotated[DcqcnTraffic, Tag("dcqcn")],
    Discriminator(lambda v: v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)),
]
TRAFFIC_KINDS = ("bulk", "dcqcn")


def _off_or_period(v: Any) -> Any:
    if v is None or v is False or v == "off":
        return None
    period = parse_duration(v)
    if period < 1e-3:
        raise ValueError(f"{v!r} is too short a sampling period; use off or at least 1ms")
    return period


def _pcap_cap(v: Any) -> Any:
    if v is False or v is None or v == "off":
        return 0
    if v is True:
        return DEFAULT_PCAP_BYTES
    size = parse_size(v)
    if size < 1 << 20:
        raise ValueError(f"{v!r}: a pcap cap below 1MiB would hold almost nothing; e.g. 64MiB")
    return size


DEFAULT_PCAP_BYTES = 64 << 20
Period = Annotated[float | None, BeforeValidator(_off_or_period)]


class Trace(_Strict):
    """What is recorded while the workload runs (off by default: tracing costs CPU)."""

    # sampling period of tcp_info of every workload socket; off to disable
    tcp_info: Period = None
    # sampling period of WAN queue occupancy, drops and marks; off to disable
    queues: Period = None
    # headers-only capture on the WAN interfaces: false, true (64MiB per interface) or a cap
    pcap: Annotated[int, BeforeValidator(_pcap_cap)] = 0


class Ecmp(_Strict):
    """How gateways spread flows over a link's paths: the kernel's multipath hash
    (``net.ipv4.fib_multipath_hash_policy``): ``l3`` addresses only (0, the kernel's default),
    ``l4`` addresses, protocol and ports (3, with those fields: ``testbed.plan.routes``)."""

    hash: Literal["l3", "l4"] = "l3"


class Bfd(_Strict):
    """BFD on every BGP session: a packet every ``interval`` (FRR's transmit and receive
    interval, whole milliseconds, 10 ms to 60 s); down after ``multiplier`` missed ones."""

    interval: Duration = Field(0.05, ge=0.01, le=60.0)
    multiplier: int = Field(3, ge=2, le=255)

    @field_validator("interval")
    @classmethod
    def _whole_ms(cls, v: float) -> float:
        if abs(v * 1e3 - round(v * 1e3)) > 1e-6:
            raise ValueError(f"{v * 1e3:g} ms is not whole milliseconds (FRR's unit)")
        return v


class Bgp(_Strict):
    """BGP between the gateways (eBGP per path): ``hold`` time (whole seconds, 3 to 65535;
    keepalives every third of it); ``bfd``: BFD on each session (none: only the hold timer
    notices a silent failure)."""

    bfd: Bfd | None = None
    hold: Duration = Field(9.0, ge=3.0, le=65535.0)

    @field_validator("hold")
    @classmethod
    def _whole_s(cls, v: float) -> float:
        if v != round(v):
            raise ValueError(f"{v:g} s is not whole seconds (BGP's unit)")
        return v


class Routing(_Strict):
    """How the gateways route over the WAN: ``static`` routes from the plan (multipath over a
    link's paths), or ``bgp``: FRR (zebra, bgpd, bfdd) in each gateway, eBGP on every path,
    multipath over the paths (docs/multipath.md)."""

    mode: Literal["static", "bgp"] = "static"
    ecmp: Ecmp = Ecmp()
    bgp: Bgp | None = None

    @model_validator(mode="after")
    def _bgp_only_with_bgp(self) -> Routing:
        if self.bgp is not None and self.mode != "bgp":
            raise _FieldError("bgp", "bgp settings apply to `mode: bgp` only")
        return self


MACHINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$")


class Placement(_Strict):
    """Clusters on machines (issue 19 b, planned: ``testbed plan`` shows it, ``up`` refuses it
    for now): ``machines`` maps every cluster to a machine (a Ray node label or address);
    only WAN wires cross machines, over VXLAN cables. ``underlay_mtu``: the MTU between the
    machines; below 1550 every testbed interface gets 1450 (the cable's 50 bytes)."""

    machines: dict[str, str]
    underlay_mtu: int = Field(1500, ge=1280, le=9216)

    @field_validator("machines")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for cluster, machine in v.items():
            if not MACHINE_NAME.match(str(machine)):
                raise ValueError(
                    f"{cluster}: {machine!r} is not a machine name; allowed: letters, digits "
                    "and . _ : - (a Ray node label or an address), at most 63 characters"
                )
        return v


class Scenario(_Strict):
    name: str
    description: str = ""
    clusters: dict[str, Cluster]
    wan: list[WanLink] = Field(default_factory=list)
    tcp: TcpSettings = TcpSettings()
    # tclink: Mininet's own TCLink on the WAN links, unchanged (engine mininet; for comparison)
    backend: Literal["auto", "kernel", "userspace", "tclink"] = "auto"
    # what makes the namespaces and veth pairs: the testbed itself, or Mininet (its nodes and
    # links, shaped by the same backends; docs/mininet.md)
    engine: Literal["native", "mininet"] = "native"
    routing: Routing = Routing()
    placement: Placement | None = None
    workload: AnyWorkload | None = None
    trace: Trace = Trace()
    # The WAN misbehaving while the workload runs (testbed.config.dynamics, docs/faults.md).
    faults: list[Fault] = Field(default_factory=list)
    traffic: list[TrafficFlow] = Field(default_factory=list)
    # DCQCN's time dilation (issue 16): its parameters (times x s, rates / s) are given in real
    # units and run dilated; the WAN is in the testbed's (emulated) units
    dilation: float = Field(1.0, ge=1.0, le=10000.0)
    # Origin of schedule, trace and fault times: the first measured iteration (workload; the
    # start of the traffic when there is no workload) or the start of the run (wall).
    clock: Literal["workload", "wall"] = "workload"
    # Checked and expanded by testbed.sweep before validation; kept here so that the schema
    # lists them and a resolved run can show what it came from.
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    repeat: int = Field(1, ge=1, le=1000)
    # What the results must show; checked by `testbed run` (testbed.expect).
    expect: list[Expectation] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SCENARIO_NAME.match(v):
            raise ValueError(
                f"{v!r} is not a valid scenario name; allowed: a-z, 0-9 and '-', 1 to 32 characters"
            )
        return v

    @field_validator("clusters", mode="before")
    @classmethod
    def _cluster_names(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        for name in v:
            if (
                not isinstance(name, str)
                or not CLUSTER_NAME.match(name)
                or (len(name) > CLUSTER_NAME_MAX)
            ):
                raise _FieldError(
                    f"clusters.{name}",
                    f"{name!r} is not a valid cluster name; allowed: a lowercase letter, then "
                    f"a-z and 0-9, at most {CLUSTER_NAME_MAX} characters",
                )
        if not v:
            raise _FieldError("clusters", "at least one cluster is needed")
        if len(v) > MAX_CLUSTERS:
            raise _FieldError(
                "clusters", f"{len(v)} clusters given; at most {MAX_CLUSTERS} are allowed"
            )
        return v

    @model_validator(mode="after")
    def _wan_topology(self) -> Scenario:
        seen: dict[frozenset[str], int] = {}
        for i, link in enumerate(self.wan):
            for end in link.between:
                if end not in self.clusters:
                    raise _FieldError(
                        f"wan[{i}].between",
                        f"unknown cluster {end!r}; clusters are: {', '.join(self.clusters)}",
                    )
            pair = frozenset(link.between)
            if pair in seen:
                raise _FieldError(
                    f"wan[{i}].between",
                    f"the pair {list(link.between)} already appears in wan[{seen[pair]}]; "
                    "a cluster pair appears at most once",
                )
            seen[pair] = i
        # Every cluster must reach every other one, possibly over several WAN hops.
        names = list(self.clusters)
        reached = {names[0]}
        frontier = [names[0]]
        while frontier:
            here = frontier.pop()
            for pair in seen:
                if here in pair:
                    (other,) = pair - {here}
                    if other not in reached:
                        reached.add(other)
                        frontier.append(other)
        missing = [n for n in names if n not in reached]
        if missing:
            raise _FieldError(
                "wan",
                f"cluster(s) {', '.join(missing)} have no WAN path to {names[0]}; "
                "add a `between` entry that connects them",
            )
        return self

    @model_validator(mode="after")
    def _placed_clusters(self) -> Scenario:
        if self.placement is None:
            return self
        placed = self.placement.machines
        for cluster in placed:
            if cluster not in self.clusters:
                raise _FieldError(
                    f"placement.machines.{cluster}",
                    f"unknown cluster {cluster!r}; clusters are: {', '.join(self.clusters)}",
                )
        missing = [c for c in self.clusters if c not in placed]
        if missing:
            raise _FieldError(
                "placement.machines",
                f"every cluster needs a machine; missing: {', '.join(missing)}",
            )
        if self.engine == "mininet":
            raise _FieldError("placement", "clusters on several machines need `engine: native`")
        # What runs across machines so far: the links as configured, the self-check, a
        # collectives workload. The rest samples or changes the network from one process.
        later = "not across machines yet (docs/scale-out.md); remove it or `placement:`"
        for i, link in enumerate(self.wan):
            for key in ("schedule", "trace"):
                if getattr(link, key):
                    raise _FieldError(f"wan[{i}].{key}", f"{key} is {later}")
        checks = [
            ("routing.mode", self.routing.mode == "bgp", "bgp"),
            ("faults", bool(self.faults), "faults"),
            ("traffic", bool(self.flows), "traffic beside the workload"),
            ("trace", self.trace != Trace(), "tracing (tcp_info, queues, pcap)"),
            ("workload.kind", self.workload is not None and self.workload.kind != "collectives",
             f"a {getattr(self.workload, 'kind', '')} workload"),
        ]  # fmt: skip
        for where, bad, what in checks:
            if bad:
                raise _FieldError(where, f"{what} is {later}")
        return self

    @model_validator(mode="after")
    def _bgp_routes_what_it_can(self) -> Scenario:
        if self.routing.mode != "bgp":
            return self
        if not self.wan:
            raise _FieldError("routing.mode", "bgp routes over WAN links; this scenario has none")
        if self.engine == "mininet":
            raise _FieldError("routing.mode", "bgp runs with `engine: native` only")
        for i, link in enumerate(self.wan):
            if len({p.weight for p in link.paths}) > 1:
                raise _FieldError(
                    f"wan[{i}].paths",
                    "unequal weights need static routing (BGP multipath here is equal-cost); "
                    "use `routing: {mode: static}` or equal weights",
                )
        return self

    @model_validator(mode="after")
    def _dynamics_refer_to_the_testbed(self) -> Scenario:
        hosts = {f"{c}-h{i}" for c, cl in self.clusters.items() for i in range(cl.hosts)}
        known_links = ", ".join(p.name for p in self.wan_paths) or "(none)"
        for i, f in enumerate(self.faults):
            link = getattr(f, "link", None)
            if link is not None and not self.links_named(link):
                raise _FieldError(
                    f"faults[{i}].link", f"no WAN link {link!r}; links are: {known_links}"
                )
            named = [getattr(f, "cluster", None)] + [c for g in getattr(f, "groups", []) for c in g]
            for c in named:
                if c is not None and c not in self.clusters:
                    field = "cluster" if f.kind == "gateway_crash" else "groups"
                    raise _FieldError(
                        f"faults[{i}].{field}",
                        f"unknown cluster {c!r}; clusters are: {', '.join(self.clusters)}",
                    )
            if f.kind == "partition":
                flat = [c for g in f.groups for c in g]
                if len(set(flat)) != len(flat) or any(not g for g in f.groups):
                    raise _FieldError(
                        f"faults[{i}].groups",
                        "each cluster appears in at most one group, and no group is empty",
                    )
            if f.after is not None and self.workload is None:
                raise _FieldError(
                    f"faults[{i}].after", "`after` an iteration needs a workload; use `at`"
                )
        named_flows = [(f"traffic[{i}]", f) for i, f in enumerate(self.traffic)]
        if isinstance(self.workload, DcqcnWorkload):
            named_flows += [(f"workload.flows[{i}]", f) for i, f in enumerate(self.workload.flows)]
        for where, flow in named_flows:
            for field, host in (("from", flow.from_), ("to", flow.to)):
                if host not in hosts:
                    raise _FieldError(
                        f"{where}.{field}",
                        f"no host {host!r}; hosts are named <cluster>-h<i>, e.g. "
                        f"{sorted(hosts)[0]}",
                    )
            if flow.from_ == flow.to:
                raise _FieldError(f"{where}.to", "a flow goes to another host")
        dynamic = self.faults or any(link.schedule or link.trace for link in self.wan)
        if dynamic and self.workload is None and not self.traffic:
            raise _FieldError(
                "faults" if self.faults else "wan",
                "schedules, traces and faults act while something runs: add a workload or traffic",
            )
        return self

    @property
    def flows(self) -> list[BulkFlow | DcqcnTraffic]:
        """Every flow the runner starts: the ``traffic:`` entries, then a dcqcn workload's."""
        extra = self.workload.as_traffic() if isinstance(self.workload, DcqcnWorkload) else []
        return [*self.traffic, *extra]

    @property
    def rank_workload(self) -> RankWorkload | None:
        """The workload the ranks run (collectives, training); None: a traffic-only run."""
        return None if isinstance(self.workload, DcqcnWorkload) else self.workload

    @property
    def wan_paths(self) -> list[WanLink]:
        """Every path of every WAN link, as links of their own (``WanLink.paths_of``)."""
        return [p for link in self.wan for p in link.paths_of()]

    def links_named(self, name: str) -> list[WanLink]:
        """The paths a fault's ``link`` names: ``east-west`` (either order) is every path of
        that link, ``east-west/1`` one path of it. Empty: no such link."""
        base, _, path = name.partition("/")
        for link in self.wan:
            if frozenset(base.split("-", 1)) == frozenset(link.between):
                paths = link.paths_of()
                if not path:
                    return paths
                return [p for p in paths if p.path is not None and str(p.path) == path]
        return []

    def cluster_tcp(self, cluster: str) -> TcpSettings:
        override = self.clusters[cluster].tcp
        return override.apply(self.tcp) if override else self.tcp


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a field path, without pydantic's validator tags."""
    tags = ("function-", "lax-", "literal[", "nullable")
    return format_path([p for p in loc if not str(p).startswith(tags)]) or "(top level)"


def _without_workload_tag(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic puts the union's tag after ``workload`` (``workload.training.steps``)."""
    if len(loc) > 1 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        return (loc[0], *loc[2:])
    if len(loc) > 2 and loc[0] == "faults" and loc[2] in FAULT_KINDS:  # faults[0].blackhole.x
        return (*loc[:2], *loc[3:])
    if len(loc) > 2 and loc[0] == "traffic" and loc[2] in TRAFFIC_KINDS:  # traffic[0].bulk.x
        return (*loc[:2], *loc[3:])
    return loc


def _describe(error: dict[str, Any]) -> tuple[str, str]:
    """(field path, message) of one pydantic error, worded for a user."""
    ctx = error.get("ctx") or {}
    inner = ctx.get("error")
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and "[" in p and "]" in p))
    loc = _without_workload_tag(loc)
    path = _loc_to_path(loc)
    if isinstance(inner, _FieldError):  # its path is relative to the model that raised it
        if loc and not inner.path.startswith(path):
            return f"{path}.{inner.path}", inner.message
        return inner.path, inner.message
    kind = error["type"]
    value = error.get("input")
    if kind == "union_tag_invalid":
        return (
            f"{path}.kind",
            f"{ctx.get('tag')!r} is not allowed; allowed: {ctx.get('expected_tags')}",
        )
    if kind == "extra_forbidden":
        return path, f"unknown key {str(loc[-1])!r}"
    if kind == "missing":
        return path, "missing required field"
    if kind == "value_error":
        message = str(inner) if inner else error["msg"]
        shown = repr(value)
        if not isinstance(value, dict | list) and shown not in message:
            message = f"{shown}: {message}"
        return path, message
    if kind == "literal_error":
        return path, f"{value!r} is not allowed; allowed: {ctx.get('expected')}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = {
            "greater_than": f"greater than {ctx.get('gt')}",
            "greater_than_equal": f"at least {ctx.get('ge')}",
            "less_than": f"less than {ctx.get('lt')}",
            "less_than_equal": f"at most {ctx.get('le')}",
        }[kind]
        return path, f"{value!r} is out of range; must be {bound}"
    return path, f"{value!r}: {error['msg']}"


def _with_allowed_keys(path: str, message: str, model: type[BaseModel] | None) -> str:
    if message.startswith("unknown key") and model is not None:
        return f"{message}; allowed: {', '.join(model.model_fields)}"
    return message


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys apply at the parent of ``loc`` (for 'allowed keys' hints)."""
    model: Any = Scenario
    if len(loc) > 2 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        model, loc = WORKLOAD_KINDS[loc[1]], loc[2:]
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return None
        if model is Scenario and part == "clusters":
            parts = parts[1:]  # skip the cluster's name
            model = Cluster
            continue
        model = _first_model(fields[part].annotation)
        if model is None:
            return None
    return model


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate already-loaded YAML data. Raises ScenarioError naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping of keys (name, clusters, wan, ...)")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            path, message = _describe(error)
            message = _with_allowed_keys(path, message, _model_at(tuple(error["loc"])))
            lines.append(f"{source}: {path}: {message}")
        raise ScenarioError("\n".join(dict.fromkeys(lines))) from None


_FAULTS = TypeAdapter(list[Fault])


def with_faults(scenario: Scenario, faults: Any, source: str = "faults") -> Scenario:
    """``scenario`` with ``faults`` (a list as written in a scenario file) instead of its own,
    validated like a scenario's (``source`` names where they came from in errors), for a
    caller that brings its own workload (run_ranks: ``after`` counts its iterations)."""
    if not isinstance(faults, list):
        raise ScenarioError(f"{source}: faults are a list, e.g. [{{kind: blackhole, ...}}]")
    try:
        parsed = _FAULTS.validate_python(faults)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            path, message = _describe({**error, "loc": ("faults", *error["loc"])})
            lines.append(f"{source}: {path}: {message}")
        raise ScenarioError("\n".join(dict.fromkeys(lines))) from None
    copy = scenario.model_copy(update={"faults": parsed})
    # the caller's function is the workload `after` counts iterations of (run_ranks)
    check = copy.model_copy(update={"workload": scenario.workload or Workload()})
    try:
        check._dynamics_refer_to_the_testbed()
    except _FieldError as exc:
        raise ScenarioError(f"{source}: {exc.path}: {exc.message}") from None
    return copy


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"{path}: cannot read scenario: not UTF-8 text (byte {exc.start})"
        ) from None
    if not text.strip():
        raise ScenarioError(f"{path}: the scenario file is empty")
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" line {mark.line + 1}, column {mark.column + 1}:"
        elif isinstance(exc, yaml.reader.ReaderError):
            line = text.count("\n", 0, exc.position) + 1
            column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
            where = f" line {line}, column {column}:"
        else:
            where = ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
        if isinstance(exc, yaml.reader.ReaderError):
            problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        raise ScenarioError(f"{path}:{where} YAML syntax error: {problem}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    return parse_scenario(load_yaml(path), str(path))
