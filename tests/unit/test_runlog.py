"""`streamlearn up`'s run directories and its children's logs are their owner's only: the logs
hold what the workers print (tracebacks with payloads, URLs), the run directory the servers'
files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamlearn.errors import StreamlearnError
from streamlearn.stack.embedded import ServerProcess
from streamlearn.stack.runlog import ChildLog, new_run_dir


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_run_dirs_and_child_logs_are_the_owners_only(tmp_path: Path):
    old = os.umask(0o022)  # the usual umask, which leaves new files world-readable
    try:
        root = tmp_path / "state" / "runs"
        run = new_run_dir(root)
        log = ChildLog(run / "learner-demo-0.log", max_bytes=10)
        with log.open() as out:
            out.write(b"x" * 20)
            out.flush()
            log.bound()
        server = ServerProcess("redis", ["true"], 0, run)
        with pytest.raises(StreamlearnError, match="exited at start"):
            server.start()  # an embedded server's log, in the same directory
    finally:
        os.umask(old)
    assert (mode(root), mode(run)) == (0o700, 0o700)
    assert mode(log.path) == 0o600
    assert mode(log.path.with_name(log.path.name + ".1")) == 0o600, "the rotated log too"
    assert mode(server.log_path) == 0o600
