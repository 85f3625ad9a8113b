"""Where `streamlearn up` puts its children's output, and how it draws its terminal.

Each `up` makes a run directory (one log file per child, the embedded servers' files) and
keeps only the newest few; the terminal keeps one live line per model, rewritten in place,
with the supervisor's own messages scrolling above it. Workers are started through
`python -m streamlearn.stack.runlog [--tensorflow] MODULE ARGS...`, which quiets TensorFlow's
Python-side warnings and its import-time C++ lines before the worker imports it (later C++
logging is quieted by `QUIET_ENV`).
"""

from __future__ import annotations

import logging
import os
import re
import runpy
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

from streamlearn.config import environment
from streamlearn.stack.embedded import open_private

# TensorFlow's C++ logging (TF_CPP_*: 3 = errors only, fatal still shown), gRPC's and glog's.
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_CPP_MIN_VLOG_LEVEL": "0",
    "GRPC_VERBOSITY": "ERROR",
    "GLOG_minloglevel": "3",
    "PYTHONUNBUFFERED": "1",
}
_RUN_NAME = re.compile(r"^\d{8}-\d{6}(-\d+)?$")
# What TensorFlow's C++ side writes at import whatever TF_CPP_MIN_LOG_LEVEL says (absl logs
# to stderr before absl::InitializeLog): the notice, info and warning lines, and the second
# line of the CPU-features notice.
_IMPORT_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)"
    r"|[IW]\d{4} [\d:.]+\s+\d+ \S+:\d+\]"
    r"|To enable the following instructions: .* rebuild TensorFlow)"
)


def runs_root() -> Path:
    """`$STREAMLEARN_RUNS_DIR`, else `$XDG_STATE_HOME/streamlearn/runs` (~/.local/state)."""
    explicit = os.environ.get(environment.RUNS_DIR)
    if explicit:
        return Path(explicit)
    state = os.environ.get(environment.XDG_STATE_HOME) or Path.home() / ".local" / "state"
    return Path(state) / "streamlearn" / "runs"


def new_run_dir(root: Path, keep: int = 5) -> Path:
    """A fresh `root/YYYYmmdd-HHMMSS` directory; all but the newest `keep` runs are removed.

    Only directories named like a run are ever removed, so a mistaken root loses nothing else.
    The root (when made here) and each run are their owner's only (0700): the logs hold what
    the workers print, the servers' directories their data.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs = sorted(
        ((p.name[:15], int(p.name[16:] or 0)) for p in root.iterdir() if _RUN_NAME.match(p.name)),
    )
    # Several runs within a second count up (stamp-1, stamp-2...) past any still there.
    n = max((n + 1 for s, n in runs if s == stamp), default=0)
    while True:  # another `up` may take the same name at the same moment
        path = root / (f"{stamp}-{n}" if n else stamp)
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            n += 1
    for old_stamp, n in runs[: max(0, len(runs) + 1 - keep)]:
        shutil.rmtree(root / (f"{old_stamp}-{n}" if n else old_stamp), ignore_errors=True)
    return path


class ChildLog:
    """A child's log file, kept under `max_bytes`: past it, the file moves to `.1`
    (the previous `.1` is dropped) and starts empty, so at most 2 x max_bytes stay on disk.

    The child writes with O_APPEND, so it goes on at the start of the emptied file.
    """

    def __init__(self, path: Path, max_bytes: int = 20_000_000) -> None:
        self.path = path
        self.max_bytes = max_bytes

    def open(self) -> BinaryIO:
        """The file to hand the child as stdout and stderr (the caller closes its copy)."""
        return open_private(self.path)

    def bound(self) -> None:
        try:
            if self.path.stat().st_size <= self.max_bytes:
                return
            rotated = self.path.with_name(self.path.name + ".1")
            with open(self.path, "rb") as src, open_private(rotated, truncate=True) as dst:
                shutil.copyfileobj(src, dst)
            os.truncate(self.path, 0)
        except OSError:
            pass  # the file went away or the disk is full: nothing better to do here

    def tail(self, lines: int = 3, max_bytes: int = 4096) -> list[str]:
        """The last non-empty lines, for a message about a child that exited."""
        try:
            with open(self.path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]


class Board:
    """The terminal of `up`: messages scroll, the live lines stay below them.

    On a terminal the live lines are redrawn in place; elsewhere (a pipe, a file) they are
    printed as plain lines every `plain_every_s`, so a log of `up` stays readable.
    """

    def __init__(self, out: TextIO | None = None, plain_every_s: float = 5.0) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.plain_every_s = plain_every_s
        self.live: list[str] = []
        self._drawn = 0
        self._last_plain: float | None = None
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        with self._lock:
            self._erase()
            self.out.write(f"[streamlearn] {message}\n")
            self._draw()
            self.out.flush()

    def show(self, lines: list[str]) -> None:
        with self._lock:
            if self.tty and lines == self.live:
                return  # unchanged: no redraw, no flicker
            self.live = list(lines)
            if self.tty:
                self._erase()
                self._draw()
            elif lines and (
                self._last_plain is None
                or time.monotonic() - self._last_plain >= self.plain_every_s
            ):
                self._last_plain = time.monotonic()
                self.out.writelines(f"[streamlearn] {line}\n" for line in lines)
            self.out.flush()

    def freeze(self) -> None:
        """Leave the live lines on screen as they are; later messages go below them."""
        with self._lock:
            self.live, self._drawn = [], 0

    def _erase(self) -> None:
        if self._drawn:
            self.out.write(f"\033[{self._drawn}F\033[J")  # up to the first live line, clear
            self._drawn = 0

    def _draw(self) -> None:
        if not self.tty or not self.live:
            return
        width = shutil.get_terminal_size().columns - 1  # a wrapped line would break the count
        self.out.writelines(f"{line[:width]}\n" for line in self.live)
        self._drawn = len(self.live)


def run_quietly(module: str, argv: list[str], tensorflow: bool = False) -> None:
    """Run `python -m module argv...` with TensorFlow's, Keras' and absl's chatter off.

    With `tensorflow`, Keras is imported first with its import-time C++ lines filtered out
    of stderr (errors pass through).
    """
    warnings.filterwarnings("ignore", module=r"(tensorflow|keras|absl|google)(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    for name in ("tensorflow", "absl", "keras", "h5py"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if tensorflow:
        with _stderr_without(_IMPORT_NOISE):
            import keras  # noqa: F401  (loads TensorFlow)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


@contextmanager
def _stderr_without(noise: re.Pattern[str]) -> Iterator[None]:
    """Collect what is written to fd 2 (C++ included) meanwhile; pass on all but `noise`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
            sys.stderr.writelines(
                line for line in text.splitlines(keepends=True) if not noise.match(line)
            )
            sys.stderr.flush()


if __name__ == "__main__":
    args = sys.argv[1:]
    tf = bool(args) and args[0] == "--tensorflow"
    if len(args) < 1 + tf:
        sys.exit("usage: python -m streamlearn.stack.runlog [--tensorflow] MODULE [ARGS...]")
    run_quietly(args[tf], args[tf + 1 :], tensorflow=tf)
