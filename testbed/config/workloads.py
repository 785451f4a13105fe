"""What a scenario's ranks run: the collectives benchmark (:class:`Workload`), real torch
training (:class:`TrainingWorkload`, with each algorithm's options) or DCQCN flows, told apart
by ``kind``.

:data:`WORKLOAD_KINDS` (kind -> schema) is the one registry the scenario's ``workload`` field
validates through: a new kind is its schema (a :class:`WorkloadModel`) and one
:func:`register_workload` call. The names a field allows are ``Literal`` types (pydantic and
type checkers need the literal strings); unit tests hold them equal to ``testbed.core.vocab``.
"""

from __future__ import annotations

from fractions import Fraction as _Ratio
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from testbed.config.dcqcn import DcqcnWorkload
from testbed.config.fields import Duration, FieldError, Size, Strict, WorkloadModel
from testbed.core.metrics import Metric

# testbed.core.vocab's COLLECTIVES, ALGORITHMS, RANK_PLACEMENTS, SERVER_PLACEMENTS and
# TRAINING_ALGORITHMS, as the types of the fields that take them
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
Algorithm = Literal["flat", "hierarchical", "hierarchical-2d"]
RankPlacement = Literal["by-cluster", "interleaved"]
ServerPlacement = Literal["first-cluster", "per-cluster"]
TrainingAlgorithm = Literal[
    "ddp", "localsgd", "diloco", "streaming-diloco", "hierarchical", "parameter-server"
]


class RankWorkloadModel(WorkloadModel):
    """What every workload of torch ranks has: ranks per host, the rule that places rank r on
    a host (testbed.core.ranks) and the limit of one operation. A kind's schema redeclares a
    field to change its default."""

    ranks_per_host: int = Field(default=1, ge=1, le=16)
    placement: RankPlacement = "by-cluster"
    timeout: Duration = 300.0


class Workload(RankWorkloadModel):
    """What the ranks run. Sizes follow nccl-tests (see docs/results.md)."""

    kind: Literal["collectives"] = "collectives"
    metrics = (
        Metric("time_p50", "s", "median over iterations of the slowest rank's time"),
        Metric("time_p95", "s", "95th percentile of the slowest rank's time"),
        Metric("algbw", "B/s", "size / time p50 (nccl-tests)"),
        Metric("busbw", "B/s", "algbw x the collective's bus factor (nccl-tests)"),
        Metric("predicted", "s", "the α-β model's time (docs/model.md)"),
        Metric("measured_over_predicted", "ratio", "time p50 / predicted"),
    )
    ranks_per_host: int = Field(default=1, ge=1, le=16)
    placement: RankPlacement = "by-cluster"
    collectives: list[Collective] = Field(default=["all_reduce"], min_length=1)
    algorithms: list[Algorithm] = Field(default=["flat"], min_length=1)
    sizes: list[Size] = Field(default=[1 << 20], min_length=1)
    dtype: Literal["float32", "float64", "float16", "bfloat16"] = "float32"
    warmup: int = Field(default=1, ge=0, le=1000)
    iterations: int = Field(default=5, ge=1, le=100000)
    timeout: Duration = 300.0

    @field_validator("timeout")
    @classmethod
    def _positive_timeout(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("a timeout must be positive; examples: 60s, 300s")
        return v


# named shapes of emulated models (traffic.training.synthetic.NAMED_SHAPES; a unit test holds
# them equal): tensor layouts at real byte counts, never computed
NamedShape = Literal["llama-3-1b", "llama-3-8b", "llama-3-70b"]
EMULATED_ALGORITHMS = ("ddp", "diloco", "streaming-diloco", "hierarchical")
# layers and parameters of each named shape (traffic.training.synthetic; a unit test holds them)
NAMED_LAYERS_PARAMS = {
    "llama-3-1b": (16, 1_235_814_400),
    "llama-3-8b": (32, 8_030_261_248),
    "llama-3-70b": (80, 70_553_706_496),
}
MAX_EMULATED_BYTES = 4 << 30  # per rank and buffer: the ranks share this machine's memory
DTYPE_BYTES_WIRE = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp4": 0.5}


def _ratio(v: Any) -> Any:
    """``1/1000`` -> 0.001 (numbers pass through)."""
    return float(_Ratio(v.replace(" ", ""))) if isinstance(v, str) else v


Ratio = Annotated[float, BeforeValidator(_ratio), Field(gt=0, le=1)]


class SyntheticSpec(Strict):
    """A model that is never computed: ``params`` elements of ``dtype`` in ``layers`` blocks."""

    params: float = Field(ge=2, le=1e13)
    dtype: Literal["fp32", "bf16", "fp16"] = "bf16"
    layers: int = Field(default=24, ge=1, le=1000)


class SyntheticModel(Strict):
    synthetic: SyntheticSpec


class ComputeOptions(Strict):
    """Emulated compute: every rank waits ``step`` per step (``forward`` of it before the
    backward; default a third, the 1:2 forward:backward rule)."""

    step: Duration
    forward: Duration | None = None

    @model_validator(mode="after")
    def _split(self) -> ComputeOptions:
        if self.step <= 0:
            raise ValueError("compute.step must be positive; example: 0.1s")
        if self.forward is not None and self.forward > self.step:
            raise ValueError(f"compute.forward ({self.forward}s) exceeds the step ({self.step}s)")
        return self


# model -> the data it trains on (traffic.training.models, traffic.training.data)
TRAINING_MODELS = {
    "char-mlp": "pydoc-topics",
    "char-mlp-large": "pydoc-topics",
    "teacher-mlp": "teacher-student",
}
# On gloo in torch 2.13 these DDP hooks fail at run time (torch/distributed/algorithms/
# ddp_comm_hooks: powerSGD_hook.py's _orthogonalize now asserts a 3-D batch that the batched
# hook does not pass; quantization_hooks.py's callback indexes a 0-dim tensor).
BROKEN_HOOKS = {
    "batched-powersgd": "batched_powerSGD_hook fails in torch 2.13 (_orthogonalize asserts a 3-D "
    "batch); use powersgd",
    "quantization": "quantization_pertensor_hook fails on gloo in torch 2.13 (IndexError in its "
    "callback); use fp16, bf16 or powersgd",
}


class DdpOptions(Strict):
    """DistributedDataParallel: comm hook and bucket size (ddp, and hierarchical's inner DDP)."""

    hook: Literal["none", "fp16", "bf16", "powersgd", "batched-powersgd", "quantization"] = "none"
    bucket: Size = 25 << 20
    rank: int = Field(default=1, ge=1, le=64)  # powersgd's matrix approximation rank
    # powersgd: plain all-reduce before this step (error feedback)
    start: int = Field(default=2, ge=2)
    # emulated compute: bucket all-reduces start during the backward wait (False: after it)
    overlap: bool = True

    @field_validator("hook")
    @classmethod
    def _working_hook(cls, v: str) -> str:
        if v in BROKEN_HOOKS:
            raise ValueError(f"{v!r} is refused: {BROKEN_HOOKS[v]}")
        return v


class DilocoOptions(Strict):
    """DiLoCo's outer loop (diloco, streaming-diloco, hierarchical's across-cluster sync)."""

    inner_steps: int = Field(default=30, ge=1, le=100000)
    outer_lr: float = Field(default=0.7, gt=0, le=10)
    outer_momentum: float = Field(default=0.9, ge=0, lt=1)
    nesterov: bool = True
    dtype: Literal["fp32", "fp16", "bf16", "int8", "fp4"] = "fp32"  # fp4: emulated models only


class StreamingOptions(Strict):
    """Streaming DiLoCo: fragments synced in turn, each overlapped with ``overlap_steps`` inner
    steps and merged with weight ``alpha`` on the local copy."""

    fragments: int = Field(default=4, ge=1, le=64)
    overlap_steps: int = Field(default=1, ge=0)
    alpha: float = Field(default=0.5, ge=0, le=1)


class LocalSgdOptions(Strict):
    period: int = Field(default=10, ge=1, le=100000)  # steps between parameter averages


class ParameterServerOptions(Strict):
    servers: ServerPlacement = "first-cluster"
    # 0: synchronous; k: a worker runs <= k steps ahead
    staleness: int = Field(default=0, ge=0, le=1000)


class TrainingWorkload(RankWorkloadModel):
    """Real torch training on every rank (docs/training.md)."""

    kind: Literal["training"]
    metrics = (
        Metric("final_loss", "loss", "mean validation loss after the last step"),
        Metric("time_to_loss", "s", "wall clock until the validation loss reached the target"),
        Metric("wan_bytes_per_step", "B", "both WAN directions' bytes per step"),
        Metric("step_time_p50", "s", "median step time of the slowest rank"),
        Metric("step_time_p95", "s", "95th percentile step time"),
        Metric("compute_utilisation", "ratio", "compute time / step time"),
        Metric(
            "compute_utilisation_settled",
            "ratio",
            "emulated compute: compute / wall over the settled steps (whole sync periods)",
        ),
        Metric("cu_paper_model", "ratio", "the DiLoCo scaling-laws wall-clock model's CU"),
        Metric(
            "cu_schedule_model",
            "ratio",
            "emulated compute: the schedule's α-β model with DDP's buckets, gloo's per-call "
            "cost and the all-gather of codes",
        ),
        Metric("cu_alpha_beta", "ratio", "emulated compute: the α-β model's CU over a sync period"),
        Metric("comm_per_step", "s", "time blocked in communication per step"),
        Metric("comm_measured_over_predicted", "ratio", "comm per step / the α-β model's"),
    )
    ranks_per_host: int = Field(default=1, ge=1, le=16)
    placement: RankPlacement = "by-cluster"
    model: Literal["char-mlp", "char-mlp-large", "teacher-mlp"] | NamedShape | SyntheticModel = (
        "char-mlp"
    )
    # emulated compute (named shapes and synthetic models only): a timed wait per step
    compute: ComputeOptions | None = None
    # bytes per step x scale (the scenario's link rates and buffers carry the same factor)
    scale: Ratio = 1.0
    data: Literal["pydoc-topics", "teacher-student"] | None = None  # None: the model's own
    steps: int = Field(default=300, ge=1, le=1_000_000)
    batch: int = Field(default=32, ge=1, le=65536)  # per rank and step
    lr: float = Field(default=1e-3, gt=0, le=10)  # the inner optimizer's (AdamW)
    seed: int = Field(default=0, ge=0)
    algorithm: TrainingAlgorithm = "ddp"
    ddp: DdpOptions = DdpOptions()
    diloco: DilocoOptions = DilocoOptions()
    streaming: StreamingOptions = StreamingOptions()
    localsgd: LocalSgdOptions = LocalSgdOptions()
    parameter_server: ParameterServerOptions = ParameterServerOptions()
    eval_every: int = Field(default=25, ge=1)
    target_loss: float | None = Field(default=None, gt=0)  # None: the DDP baseline's final loss
    timeout: Duration = 600.0

    @model_validator(mode="before")
    @classmethod
    def _data_of_model(cls, v: Any) -> Any:
        if (
            isinstance(v, dict)
            and v.get("data") is None
            and isinstance(v.get("model", "char-mlp"), str)
            and v.get("model", "char-mlp") in (TRAINING_MODELS)
        ):
            return {**v, "data": TRAINING_MODELS[v.get("model", "char-mlp")]}
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TrainingWorkload:
        if not isinstance(self.model, str) or self.model not in TRAINING_MODELS:
            return self._emulated()
        if self.compute is not None or self.scale != 1:
            raise FieldError(
                "workload.compute",
                f"model {self.model} computes for real: compute and scale are for emulated "
                "models (a named shape such as llama-3-1b, or {synthetic: {params, layers}})",
            )
        if self.diloco.dtype == "fp4":
            raise FieldError("workload.diloco.dtype", "fp4 is for emulated models only")
        wanted = TRAINING_MODELS[self.model]
        if self.data != wanted:
            raise FieldError(
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
                raise FieldError(
                    "workload.streaming.fragments",
                    f"diloco.inner_steps ({h}) must be a multiple of streaming.fragments ({f}): "
                    "one fragment syncs every inner_steps/fragments steps",
                )
            if tau >= h // f:
                raise FieldError(
                    "workload.streaming.overlap_steps",
                    f"{tau} must be below inner_steps/fragments ({h // f}): a fragment's "
                    "all-reduce must land before that fragment syncs again",
                )
        if self.timeout <= 0:
            raise FieldError("workload.timeout", "a timeout must be positive; examples: 600s")
        return self

    def _emulated(self) -> TrainingWorkload:
        """A model that is never computed: compute is a timed wait, the bytes are real."""
        if self.compute is None:
            raise FieldError(
                "workload.compute", "an emulated model needs compute: {step: ...}; e.g. 0.1s"
            )
        if self.data is not None:
            raise FieldError("workload.data", "an emulated model trains on no data")
        if self.algorithm not in EMULATED_ALGORITHMS:
            raise FieldError(
                "workload.algorithm",
                f"{self.algorithm} is not emulated; allowed: {', '.join(EMULATED_ALGORITHMS)}",
            )
        if self.ddp.hook not in ("none", "fp16", "bf16"):
            raise FieldError("workload.ddp.hook", "emulated DDP takes none, fp16 or bf16")
        if isinstance(self.model, SyntheticModel):
            layers, params = self.model.synthetic.layers, self.model.synthetic.params
        else:
            layers, params = NAMED_LAYERS_PARAMS[self.model]
        wire = self.model.synthetic.dtype if isinstance(self.model, SyntheticModel) else "bf16"
        if self.algorithm in ("diloco", "streaming-diloco"):
            wire = self.diloco.dtype
        elif self.algorithm == "hierarchical":  # gradients and parameters, pseudo-gradients
            wire = max(wire, self.diloco.dtype, key=DTYPE_BYTES_WIRE.__getitem__)
        nbytes = params * self.scale * DTYPE_BYTES_WIRE[wire]  # one buffer of the whole model
        if nbytes > MAX_EMULATED_BYTES:
            raise FieldError(
                "workload.scale",
                f"{params:.3g} parameters at scale {self.scale:g} are {nbytes / 2**30:.1f} GiB "
                f"of buffers per rank (at most {MAX_EMULATED_BYTES / 2**30:g} GiB): lower the "
                "scale, e.g. 1/1000, and the link rates with it",
            )
        if self.algorithm == "streaming-diloco":
            h, f, tau = (
                self.diloco.inner_steps,
                self.streaming.fragments,
                self.streaming.overlap_steps,
            )
            if f > layers:
                raise FieldError(
                    "workload.streaming.fragments", f"{f} fragments for {layers} layers"
                )
            if h % f or tau >= h // f:
                raise FieldError(
                    "workload.streaming",
                    f"inner_steps ({h}) must be a multiple of fragments ({f}) and overlap_steps "
                    f"({tau}) below inner_steps/fragments",
                )
        return self


WORKLOAD_KINDS: dict[str, type[WorkloadModel]] = {
    "collectives": Workload,
    "training": TrainingWorkload,
    "dcqcn": DcqcnWorkload,
}
DEFAULT_KIND = "collectives"  # a workload that names no kind


def register_workload(kind: str, schema: type[WorkloadModel]) -> None:
    """Make ``workload: kind: <kind>`` validate as ``schema`` (a later call replaces it)."""
    WORKLOAD_KINDS[kind] = schema


def _by_kind(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate a workload as the schema its ``kind`` names (the registry, not a fixed union,
    so that a registered kind is accepted like a built-in one)."""
    if isinstance(value, WorkloadModel):
        return value
    if not isinstance(value, dict):
        return handler(value)  # pydantic's own message for a value that is not a mapping
    kind = value.get("kind", DEFAULT_KIND)
    schema = WORKLOAD_KINDS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        allowed = ", ".join(repr(k) for k in WORKLOAD_KINDS)
        raise FieldError("workload.kind", f"{kind!r} is not allowed; allowed: {allowed}")
    return schema.model_validate(value)


# the scenario's ``workload`` field: serialised as the kind's own schema
AnyWorkload = Annotated[SerializeAsAny[WorkloadModel], WrapValidator(_by_kind)]
RankWorkload = Workload | TrainingWorkload
