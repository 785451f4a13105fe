"""The delay line's configuration: the JSON file the supervisor writes, parsed and checked.

This module owns the config schema (:class:`Config`, one :class:`QueueConfig` per NFQUEUE), its
defaults and its validation; an invalid file is a :class:`ConfigError` (the process exits 2).
The keys are described in the package docstring.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from testbed.core.aqm import KIND_FIELDS, THRESHOLD_FIELDS
from testbed.link.delayline.rules import DEFAULT_CE_MARK

DEFAULT_MAXLEN = 262144
DEFAULT_RCVBUF = 64 << 20
# Under load, wake up (and send batch verdicts) at most every this many seconds: fewer wakeups and
# verdict syscalls, at the price of up to this much extra lateness for packets closer together.
DEFAULT_RELEASE_GAP = 0.0002

AQM_KEYS = {"kind", *THRESHOLD_FIELDS, "ecn", "at"}
# bit/s of a held bottleneck: a 1500-byte packet would take 3.3 hours, so nothing leaves in a
# run, and the queue's arithmetic (backlog, drop-tail, the retime at release) stays the rate one
HOLD_RATE = 1.0


class ConfigError(ValueError):
    """The delay-line config is invalid."""


@dataclass(frozen=True)
class QueueConfig:
    num: int
    name: str = ""
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    reorder: float = 0.0
    # Gilbert-Elliott burst loss (model.decide): good -> bad and bad -> good per packet; every
    # packet is lost in the bad state, ``loss`` applies in the good one. 0 = off.
    ge_p: float = 0.0
    ge_r: float = 0.0
    seed: int | None = None
    maxlen: int = DEFAULT_MAXLEN
    copy_mode: str = "header"
    # Bottleneck emulation (rate > 0): the line is then the WAN bottleneck queue itself.
    rate: float = 0.0  # bit/s
    buffer: int = 0  # bytes, drop-tail limit
    aqm: dict[str, Any] | None = None  # {"kind": droptail|red|step, kmin, kmax, pmax, k, ecn}
    ce_mark: int = DEFAULT_CE_MARK
    # A held bottleneck serves nothing (a trace's zero-rate bin): it keeps what it queued and
    # accepts more up to its buffer; ``rate`` is the one it had and gets no use until released.
    held: bool = False

    @property
    def bottleneck(self) -> bool:
        return self.rate > 0

    @property
    def service_rate(self) -> float:
        """The rate the emulated queue drains at: ``rate``, or HOLD_RATE while held."""
        return HOLD_RATE if self.held else self.rate

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueueConfig:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown queue keys: {sorted(unknown)}")
        if "num" not in d:
            raise ConfigError("queue without 'num'")
        q = cls(
            num=int(d["num"]),
            name=str(d.get("name", "")) or f"q{int(d['num'])}",
            delay=float(d.get("delay", 0.0)),
            jitter=float(d.get("jitter", 0.0)),
            loss=float(d.get("loss", 0.0)),
            reorder=float(d.get("reorder", 0.0)),
            ge_p=float(d.get("ge_p", 0.0)),
            ge_r=float(d.get("ge_r", 0.0)),
            seed=None if d.get("seed") is None else int(d["seed"]),
            maxlen=int(d.get("maxlen", DEFAULT_MAXLEN)),
            copy_mode=str(d.get("copy_mode", "header")),
            rate=float(d.get("rate", 0.0)),
            buffer=int(d.get("buffer", 0)),
            aqm=d.get("aqm"),
            ce_mark=int(d.get("ce_mark", DEFAULT_CE_MARK)),
            held=bool(d.get("held", False)),
        )
        _check_queue(q)
        return q


def _check_queue(q: QueueConfig) -> None:
    if not 0 <= q.num <= 0xFFFF:
        raise ConfigError(f"queue num {q.num} outside 0..65535")
    for key in ("delay", "jitter"):
        v = getattr(q, key)
        if not (math.isfinite(v) and 0.0 <= v <= 60.0):
            raise ConfigError(f"queue {q.num}: {key}={v} must be within 0..60 seconds")
    for key in ("loss", "reorder", "ge_p", "ge_r"):
        v = getattr(q, key)
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ConfigError(f"queue {q.num}: {key}={v} must be a fraction 0..1")
    if q.ge_p and not q.ge_r:
        raise ConfigError(f"queue {q.num}: ge_p without ge_r would never leave the bad state")
    if q.maxlen < 1:
        raise ConfigError(f"queue {q.num}: maxlen must be >= 1")
    if q.copy_mode not in ("header", "meta"):
        raise ConfigError(f"queue {q.num}: copy_mode must be 'header' or 'meta'")
    if q.bottleneck:
        _check_bottleneck(q)
    elif q.aqm is not None or q.held:
        what = "aqm" if q.aqm is not None else "held"
        raise ConfigError(f"queue {q.num}: {what} needs a bottleneck rate")


def _check_bottleneck(q: QueueConfig) -> None:
    if not (math.isfinite(q.rate) and q.rate >= 1000):
        raise ConfigError(f"queue {q.num}: rate={q.rate} must be >= 1000 bit/s")
    if q.buffer < 2 * 65536:
        raise ConfigError(f"queue {q.num}: buffer={q.buffer} must be >= 131072 bytes")
    if q.copy_mode == "meta":
        raise ConfigError(f"queue {q.num}: a bottleneck needs copy_mode 'header' (lengths, ECN)")
    if q.reorder:
        raise ConfigError(f"queue {q.num}: reorder cannot be combined with a bottleneck")
    if not 0 < q.ce_mark <= 0xFFFFFFFF:
        raise ConfigError(f"queue {q.num}: ce_mark must be a non-zero 32-bit mark")
    aqm = q.aqm or {"kind": "droptail"}
    kind = aqm.get("kind")
    needs = KIND_FIELDS.get(kind)  # type: ignore[arg-type]
    if needs is None:
        raise ConfigError(f"queue {q.num}: aqm kind {kind!r} not in {', '.join(KIND_FIELDS)}")
    unknown = set(aqm) - AQM_KEYS
    missing = [k for k in needs if aqm.get(k) is None]
    if unknown or missing:
        raise ConfigError(f"queue {q.num}: aqm unknown {sorted(unknown)} / missing {missing}")
    if aqm.get("at", "arrival") not in ("arrival", "dequeue"):
        raise ConfigError(f"queue {q.num}: aqm at must be 'arrival' or 'dequeue'")
    if kind == "red" and not (0 <= aqm["kmin"] < aqm["kmax"] and 0 < aqm["pmax"] <= 1):
        raise ConfigError(f"queue {q.num}: red needs 0 <= kmin < kmax and 0 < pmax <= 1")


@dataclass(frozen=True)
class Config:
    queues: tuple[QueueConfig, ...]
    stats_file: str | None = None
    stats_interval: float = 0.5
    rcvbuf: int = DEFAULT_RCVBUF
    rt_priority: int = 10
    flush_grace: float = 1.0
    release_gap: float = DEFAULT_RELEASE_GAP
    trace_file: str | None = None  # JSONL samples of the bottleneck queues
    trace_interval: float = 0.01

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown config keys: {sorted(unknown)}")
        raw = d.get("queues")
        if not isinstance(raw, list) or not raw:
            raise ConfigError("'queues' must be a non-empty list")
        queues = tuple(QueueConfig.from_dict(q) for q in raw)
        nums = [q.num for q in queues]
        if len(set(nums)) != len(nums):
            raise ConfigError(f"duplicate queue numbers: {nums}")
        cfg = cls(
            queues=queues,
            stats_file=None if d.get("stats_file") is None else str(d["stats_file"]),
            stats_interval=float(d.get("stats_interval", 0.5)),
            rcvbuf=int(d.get("rcvbuf", DEFAULT_RCVBUF)),
            rt_priority=int(d.get("rt_priority", 10)),
            flush_grace=float(d.get("flush_grace", 1.0)),
            release_gap=float(d.get("release_gap", DEFAULT_RELEASE_GAP)),
            trace_file=None if d.get("trace_file") is None else str(d["trace_file"]),
            trace_interval=float(d.get("trace_interval", 0.01)),
        )
        _check_process(cfg)
        return cfg

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Config:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"cannot read config {path}: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError("config must be a JSON object")
        return cls.from_dict(data)


def _check_process(cfg: Config) -> None:
    if not cfg.trace_interval >= 0.001:
        raise ConfigError("trace_interval must be >= 0.001 seconds")
    if not 0.0 <= cfg.release_gap <= 0.01:
        raise ConfigError("release_gap must be within 0..0.01 seconds")
    if not cfg.stats_interval > 0:
        raise ConfigError("stats_interval must be > 0")
    if cfg.flush_grace < 0:
        raise ConfigError("flush_grace must be >= 0")
    if cfg.rcvbuf < 4096:
        raise ConfigError("rcvbuf must be >= 4096 bytes")
    if not 0 <= cfg.rt_priority <= 99:
        raise ConfigError("rt_priority must be within 0..99 (0: no SCHED_FIFO)")
