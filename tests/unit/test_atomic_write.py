"""testbed.core.files.atomic_write: threads of one process writing one file at once each rename
their own temporary file (a run's flow launcher and its workload both record their processes in
the testbed's registry record)."""

from __future__ import annotations

import threading

from testbed.core.files import atomic_write_text


def test_threads_writing_one_file_at_once_never_lose_their_temporary_file(tmp_path):
    path = tmp_path / "record.json"
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def write(n: int) -> None:
        start.wait()
        for i in range(300):
            try:
                atomic_write_text(path, f"{n} {i}")
            except BaseException as exc:  # collected, asserted below
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert path.read_text().endswith(" 299")
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # no temporary file left
