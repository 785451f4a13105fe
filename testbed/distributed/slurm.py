"""A SLURM job-array script for a sweep (``testbed run FILE --emit-slurm-array``). PURE.

For sites that already schedule their test machines with SLURM (no SLURM dependency here): each
array task runs one run of the sweep (``testbed run FILE --point K``, K = the task's index into
the sweep's runs, points x repeats in ``testbed run``'s order) into a results directory of its
own on a shared filesystem, on a whole machine (``--exclusive``: one point per machine, as with
Ray). ``testbed report`` and ``testbed compare`` read all of them at once (``OUT/task-*``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

TASK = '"$SLURM_ARRAY_TASK_ID"'


def slurm_array(
    scenario: str,
    runs: list[str],
    out: str,
    testbed: str,
    sets: tuple[str, ...] = (),
    parallel: int | None = None,
) -> str:
    """The script for ``runs`` (their run ids, in order) of ``scenario``."""
    n = len(runs)
    limit = f"%{parallel}" if parallel else ""
    name = Path(scenario).stem
    scenario_abs = str(Path(scenario).resolve())
    out_abs = str(Path(out).resolve())
    extra = " ".join(f"--set {shlex.quote(s)}" for s in sets)
    ids = " ".join(runs)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=testbed-{name}",
        f"#SBATCH --array=0-{n - 1}{limit}",
        "#SBATCH --nodes=1",
        "#SBATCH --exclusive",
        f"#SBATCH --output={out_abs}/slurm-%A_%a.out",
        f"# {n} run(s) of {scenario_abs}: {ids}",
        "# Each task runs one of them as root into its own results directory; then:",
        f"#   testbed report {out_abs}/task-*",
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(out_abs)}",
        "# the task needs root: sudo by default; TESTBED_SUDO= (empty) where jobs run as root",
        f"${{TESTBED_SUDO-sudo}} {shlex.quote(testbed)} run {shlex.quote(scenario_abs)} "
        + (f"{extra} " if extra else "")
        + f"--point {TASK} --out {shlex.quote(out_abs)}/task-{TASK}",
    ]
    return "\n".join(lines) + "\n"
