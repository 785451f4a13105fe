"""A process's stdout read line by line on its machine (testbed.live.spanned.lines): the agent's
reader writes each line into the log and keeps it; the driver's pipe gives the kept lines to the
launcher's reader, which does not write them again. Here both ends on one machine, joined by a
function where Ray carries the calls across machines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testbed.experiment.ranks import _copy_lines
from testbed.live.spanned.lines import LineReader, RemoteLines

PROGRAM = (
    "import sys\nfor i in range(3): print(f'line {i}', flush=True)\nsys.stderr.write('err\\n')"
)


def test_lines_reach_the_log_once_and_the_reader_in_order(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    with open(log, "ab") as out:  # as the agent opens it: appended to beside the reader
        proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, stderr=out)
    assert proc.stdout is not None
    reader = LineReader(proc.stdout, log)
    pipe = RemoteLines(lambda: pipe.add(*reader.take()))
    seen: list[tuple[bytes, float]] = []
    _copy_lines(pipe, log, lambda line, t: seen.append((line, t)))
    assert proc.wait(10) == 0
    assert [line for line, _ in seen] == [b"line 0\n", b"line 1\n", b"line 2\n"]
    text = log.read_text()
    # each stdout line once (the agent's reader wrote it; the launcher's copy did not), stderr
    # beside them
    assert sorted(text.splitlines()) == ["err", "line 0", "line 1", "line 2"], text


def test_a_pipe_whose_agent_is_gone_ends() -> None:
    def gone() -> None:
        raise RuntimeError("the actor died")

    pipe = RemoteLines(gone)
    pipe.add([(0.0, b"kept\n")], ended=False)
    assert pipe.readline() == b"kept\n"
    assert pipe.readline() == b""  # no more lines, no exception in the reader's thread
