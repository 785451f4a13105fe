"""Rank processes for the local multi-rank tests, forked from a server that imported torch once.

Each rank used to be ``python -m traffic.rank``: a torch import (seconds of CPU) per rank, four
ranks per test, so the unit tier spent most of its time importing torch. A multiprocessing
forkserver with torch preloaded pays for that once per session. Each rank is a fork of it (taken
before torch started any thread) that gets the command's environment, working directory and
stderr file, runs ``traffic.rank.main`` and leaves with its exit code, as the command does.
:class:`RankProcess` answers like the ``subprocess.Popen`` it replaces (``pid``, ``poll``,
``wait``, ``kill``).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import warnings
from pathlib import Path

PRELOAD = ["torch", "torch.distributed", "traffic.rank"]


class RankProcess:
    def __init__(self, process: multiprocessing.process.BaseProcess, argv: list[str]) -> None:
        self._process = process
        self.args = argv

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def kill(self) -> None:
        self._process.kill()


def start(argv: list[str], env: dict[str, str], cwd: Path, stderr: Path) -> RankProcess:
    """``python -m traffic.rank *argv`` in ``cwd`` with exactly ``env``, stderr to a file."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    process = ctx.Process(target=_rank, args=(argv, env, str(cwd), str(stderr)), daemon=False)
    process.start()
    return RankProcess(process, argv)


def _rank(argv: list[str], env: dict[str, str], cwd: str, stderr: str) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    if "ignore::FutureWarning" in env.get("PYTHONWARNINGS", ""):
        warnings.filterwarnings("ignore", category=FutureWarning)
    from traffic.rank import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # like the command's exit, minus the seconds of torch's interpreter teardown
