"""One rank of a training run (``workload: kind: training``), started by the runner inside a
host's namespace.

    python -m traffic.train_rank --spec SPEC.json --rank R

The spec, its output rows and the exit status: ``HELP`` (``--help`` prints it after this).
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any

from traffic.announce import Announcer
from traffic.entry import (
    DONE,
    RUNNING,
    SETUP,
    STARTING,
    exit_on_error,
    failure_fields,
    leave,
    log,
    rank_args,
    rank_start,
    rows_path,
    write_state,
)
from traffic.exit_codes import EXIT_ERROR, EXIT_OK

# The command's help after the docstring (argparse prints both).
HELP = """\
The spec is the launcher's (testbed.experiment.ranks) plus ``"training"``: the workload's keys as
the scenario resolved them (model, data, steps, batch, lr, seed, algorithm, ddp, diloco, streaming,
localsgd, parameter_server, eval_every). The launcher sets ``GLOO_SOCKET_IFNAME`` and
``OMP_NUM_THREADS=1``.

Output: ``{out_dir}/rank-{R}.jsonl``, one line per step, flushed as written::

    {"rank", "host", "cluster", "world_size", "algorithm", "compute_kind" ("real" or
     "emulated"), "step", "start", "end" (unix), "loss", "val_loss" (every eval_every steps and
     at the last one, else absent; never for an emulated model), "wall_s", "compute_s",
     "comm_s", "wait_s", "payload_bytes", "outcome"}

An emulated model (a named shape or ``{synthetic: ...}``, with ``compute`` and ``scale`` in
the spec) computes nothing: its loss is NaN and its rows add "late_s" (how long the compute wait
overran: the emulator's CPU).

and on the last step of a DDP run (ddp, hierarchical) DDP's own timers: "ddp_backward_compute_s",
"ddp_backward_comm_s", "ddp_overlap_s" (Trainer.ddp_timers). What the times mean:
traffic.training.trainer.

A step that raises (a gloo timeout, a
closed pair) is written as ``{"rank", ..., "step", "start", "end", "outcome": "error"|"timeout",
"error_type", "error"}`` and the rank exits with the error (the process group is dead). With
``"events_socket"`` in the spec, rank 0 announces every step's start (traffic.announce).
Progress goes to stderr; where the rank is goes to ``{out_dir}/rank-{R}.state``
(traffic.entry's protocol: ``starting``, ``setup``, ``running`` with the step, ``done``).
Exit status: 0 done; 1 any exception (traceback on stderr prefixed ``rank R (host):``, the steps
measured so far are kept). Either way the process leaves with ``os._exit`` (traffic.entry's
``leave``): a hung gloo thread cannot keep it alive, and a finished rank skips tearing torch down.
"""

INJECT_ENV = "TESTBED_INJECT_FAULT"


def injected_failure(rank: int) -> int | None:
    """Tests only: ``TESTBED_INJECT_FAULT=train:rank:R:step:S`` makes rank R raise at step S
    (the collectives' ``rank:R...`` form is traffic.collectives')."""
    parts = os.environ.get(INJECT_ENV, "").split(":")
    if len(parts) == 5 and parts[0] == "train" and parts[1] == "rank" and int(parts[2]) == rank:
        return int(parts[4])
    return None


def main(argv: list[str] | None = None) -> int:
    args = rank_args("python -m traffic.train_rank", f"{__doc__}\n{HELP}", argv)
    label = f"rank {args.rank}"
    out: IO[str] | None = None
    announcer = Announcer(None)
    try:
        start = rank_start(args)
        spec, label = start.spec, start.label
        write_state(start.out_dir, args.rank, STARTING)  # before its rows file: see has_joined
        announcer = Announcer.from_spec(spec, args.rank)
        out = rows_path(start.out_dir, args.rank).open("w")
        from traffic.context import setup, teardown
        from traffic.training.synthetic import is_emulated

        write_state(start.out_dir, args.rank, SETUP)
        ctx = setup(spec, args.rank)
        write_state(start.out_dir, args.rank, RUNNING)
        cfg = spec["training"]
        emulated = is_emulated(cfg["model"])
        if emulated:  # no real math: compute is a timed wait (traffic.training.emulated)
            from traffic.training.emulated import EmulatedTrainer

            trainer: Any = EmulatedTrainer(ctx, cfg)
        else:
            from traffic.training.trainer import Trainer

            trainer = Trainer(ctx, cfg)
        steps, every = int(cfg["steps"]), int(cfg["eval_every"])
        log(label, f"joined: world {ctx.world_size}, cluster {ctx.cluster}; {cfg['algorithm']}")
        base = {
            "rank": ctx.rank,
            "host": ctx.host,
            "cluster": ctx.cluster,
            "world_size": ctx.world_size,
            "algorithm": cfg["algorithm"],
            "compute_kind": "emulated" if emulated else "real",
        }
        progress = max(1, steps // 10)
        fail_at = injected_failure(ctx.rank)
        for step in range(steps):
            write_state(start.out_dir, args.rank, RUNNING, step)
            announcer.start(step)
            began = time.time()
            try:
                if step == fail_at:
                    raise RuntimeError(f"injected failure at step {step} ({INJECT_ENV})")
                rec = trainer.step(step)
                if step == steps - 1:
                    trainer.finish()
                    rec.update(trainer.ddp_timers())
            except Exception as exc:
                failed = {"step": step, "start": began, "end": time.time(), **failure_fields(exc)}
                out.write(json.dumps({**base, **failed}) + "\n")
                out.flush()
                raise
            rec["outcome"] = "ok"
            if not emulated and ((step + 1) % every == 0 or step == steps - 1):
                rec["val_loss"] = trainer.evaluate()
            out.write(json.dumps({**base, **rec}) + "\n")
            out.flush()
            if (step + 1) % progress == 0 and ctx.rank == 0:
                shown = f", validation {rec['val_loss']:.3f}" if "val_loss" in rec else ""
                log(
                    label,
                    f"step {step + 1}/{steps}: loss {rec['loss']:.3f}{shown}, "
                    f"{rec['wall_s'] * 1e3:.1f} ms",
                )
        announcer.end()
        teardown()
        out.close()
        write_state(start.out_dir, args.rank, DONE)
    except BaseException:
        announcer.end()
        exit_on_error(label, out, EXIT_ERROR)
    log(label, "done")
    return EXIT_OK


if __name__ == "__main__":
    leave(main())
