"""The run file of `streamlearn up`: where the stack on this machine listens.

`streamlearn up` writes it once its servers listen and removes it when it stops, so that
`publish`, `predict`, `status` and `streamlearn.Client()` in another shell find that stack
without exported URLs. Explicit settings (an argument, `STREAMLEARN_MQTT_URL` and the like)
always win; the file is only the fallback before the old defaults (localhost).

The file is `$STREAMLEARN_STACK_FILE`, else `$XDG_RUNTIME_DIR/streamlearn/stack.json`, else
`$XDG_STATE_HOME/streamlearn/stack.json` (`~/.local/state`). It is written atomically with
mode 0600: it holds the run's credentials (in the URLs) and its bearer token (`token`: the
dashboard, the workers' /metrics and the HTTP door ask for it). A file whose process is
gone (a stack killed with SIGKILL, a reboot) is stale and ignored.

Standard library only: the client imports it and needs nothing but paho-mqtt.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from streamlearn.config import environment

FILE_ENV = environment.STACK_FILE
MAX_FILE_BYTES = 64 * 1024  # a run file is a few hundred bytes; anything bigger is not one
_warned: set[str] = set()  # run files already said to be ignored, by path and reason


@dataclass(frozen=True)
class StackRecord:
    """What `streamlearn up` records about its stack."""

    mqtt_url: str
    redis_url: str
    topic_prefix: str
    key_prefix: str
    pid: int
    started_at: float
    config: str | None = None
    token: str | None = None  # this run's bearer token: dashboard, /metrics, the HTTP door


def stack_file() -> Path:
    """Where the run file lives for this user (see the module docstring)."""
    explicit = os.environ.get(FILE_ENV)
    if explicit:
        return Path(explicit)
    runtime = os.environ.get(environment.XDG_RUNTIME_DIR)
    if runtime:
        return Path(runtime) / "streamlearn" / "stack.json"
    state = os.environ.get(environment.XDG_STATE_HOME) or Path.home() / ".local" / "state"
    return Path(state) / "streamlearn" / "stack.json"


def write(record: StackRecord, path: Path | None = None) -> Path:
    """Write `record` atomically (a temp file renamed over the old one), mode 0600."""
    path = path or stack_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".stack-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp makes it 0600
            json.dump(asdict(record), f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def remove(pid: int, path: Path | None = None) -> None:
    """Remove the run file if it is still the one process `pid` wrote (a later `up` may
    have written its own over it)."""
    path = path or stack_file()
    record = _load(path)
    if record is None or record.pid == pid:
        with suppress(FileNotFoundError):
            path.unlink()


@contextmanager
def recorded(record: StackRecord) -> Iterator[Path]:
    """The run file exists for the duration of the block (an exception or signal included)."""
    path = write(record)
    try:
        yield path
    finally:
        remove(record.pid, path)


def read(path: Path | None = None) -> StackRecord | None:
    """The record in the run file, live or not; None when there is none, it is unreadable,
    or it is not to be trusted (said once on stderr)."""
    return _load(path or stack_file(), trusted=True)


def _load(path: Path, trusted: bool = False) -> StackRecord | None:
    try:
        with open(path, "rb") as f:
            why = _untrusted(path, os.fstat(f.fileno())) if trusted else None
            if why:
                _warn_once(f"streamlearn: ignoring the run file {path}: {why}")
                return None
            record = StackRecord(**json.loads(f.read(MAX_FILE_BYTES)))
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    fields = (record.mqtt_url, record.redis_url, record.topic_prefix, record.key_prefix)
    if not all(isinstance(v, str) and v for v in fields) or not isinstance(record.pid, int):
        return None
    return record


def _untrusted(path: Path, st: os.stat_result) -> str | None:
    """Why another user could have written (or read) the file `st` describes, or None."""
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})"
    if st.st_mode & 0o077:
        return f"group or others may use it (mode {st.st_mode & 0o777:o}; chmod 600 it)"
    folder = os.stat(path.parent)
    if folder.st_mode & stat.S_IWOTH and not folder.st_mode & stat.S_ISVTX:
        return f"others may write to its directory {path.parent} (chmod o-w it)"
    return None


def _warn_once(line: str) -> None:
    if line not in _warned:
        _warned.add(line)
        print(line, file=sys.stderr)


def live(path: Path | None = None) -> StackRecord | None:
    """The record of a stack that still runs; a file whose process is gone is ignored."""
    record = read(path)
    return record if record is not None and pid_alive(record.pid) else None


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process (not a zombie); on Linux, a `streamlearn` one,
    so a pid reused by another program after a crash does not count."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process: not our stack
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc (macOS): the signal check is all there is
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and b"streamlearn" in cmdline


def new_record(
    mqtt_url: str,
    redis_url: str,
    topic_prefix: str,
    key_prefix: str,
    config: str | None,
    token: str | None = None,
) -> StackRecord:
    """The record of this process's stack, started now."""
    config = str(Path(config).resolve()) if config else None
    return StackRecord(
        mqtt_url, redis_url, topic_prefix, key_prefix, os.getpid(), time.time(), config, token
    )


def describe(given: str | None, record: StackRecord | None, url: str, env: str) -> str:
    """The line the client tools print on stderr: which stack they talk to, and why.

    >>> describe(None, None, "mqtt://localhost:1883", "STREAMLEARN_MQTT_URL")
    'no stack found: mqtt://localhost:1883 (default)'
    >>> describe("mqtt://u:pw@h:1883", None, "mqtt://u:pw@h:1883", "STREAMLEARN_MQTT_URL")
    'using STREAMLEARN_MQTT_URL=mqtt://u:***@h:1883'
    """
    if given:
        return f"using {env}={redact(url)}"
    if record is not None:
        return f"using the stack of streamlearn up (pid {record.pid}): {redact(url)}"
    return f"no stack found: {redact(url)} (default)"


def redact(url: str) -> str:
    """`url` with its password replaced by `***`, fit for a terminal."""
    return redact_text(url)


_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)([^/\s'\"@]*):[^/\s'\"]*@")
_QUERY_SECRET = re.compile(r"([?&](?:password|passwd|pass|token|secret)=)[^&\s'\"]*", re.I)


def redact_text(text: str) -> str:
    """Every URL's password in `text` replaced by `***` (a userinfo password, or a
    `password=` query argument), for an error message that quotes a URL.

    >>> redact_text("bad port in 'mqtts://dev:p@ss@broker:x' or redis://:pw@h/0?password=pw")
    "bad port in 'mqtts://dev:***@broker:x' or redis://:***@h/0?password=***"
    """
    return _QUERY_SECRET.sub(r"\1***", _USERINFO.sub(r"\1\2:***@", text))
