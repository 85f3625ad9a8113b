"""Child `redis-server` and `mosquitto` processes on free local ports.

Used by `streamlearn up` when no broker or Redis is configured, and by the test fixtures.
The children die with their parent (PR_SET_PDEATHSIG on Linux), so none is left behind.
Both listen on 127.0.0.1 only. Given a password, a server refuses whoever lacks it, and
the password reaches it through a file readable by its owner only, never its command line
(which any local user can read in `ps`).
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from streamlearn.errors import StreamlearnError

LOWEST_PORT = 10_000  # free_port draws from here up to the kernel's ephemeral range


def free_port() -> int:
    """A free port on 127.0.0.1 for a server that binds it next. Drawn below the kernel's
    ephemeral range: a port from that range (what binding port 0 gives) can be taken by
    any outbound connection (a client's to Redis or the broker) before the server, seconds
    later, binds it; below it only another bind competes."""
    ceiling = _ephemeral_low()
    for _ in range(100):
        port = secrets.randbelow(ceiling - LOWEST_PORT) + LOWEST_PORT
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # all taken: the kernel's pick
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux; 32768 elsewhere)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768
    return low if low > LOWEST_PORT + 1_000 else 32_768


def die_with_parent() -> None:
    """preexec_fn: deliver SIGTERM to the child when the parent dies (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def end_process(proc: subprocess.Popen, timeout_s: float = 10.0, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL), wait up to `timeout_s`, then SIGKILL; a no-op if it has exited."""
    if proc.poll() is not None:
        return
    if kill:
        proc.kill()
    else:
        proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ServerProcess:
    """A server child process listening on `port`; a context manager."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: Path) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self, timeout_s: float = 15.0) -> ServerProcess:
        if shutil.which(self.argv[0]) is None:
            raise StreamlearnError(f"{self.argv[0]} not found on PATH; install Debian's package")
        with open_private(self.log_path) as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StreamlearnError(
                    f"{self.name} exited at start: {self.log_path.read_text()[-2000:]}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                time.sleep(0.05)
                continue
            if holds_listener(self.proc.pid, self.port):
                return self
            time.sleep(0.05)  # another server holds the port: ours exits on its bind error
        self.stop()
        raise StreamlearnError(f"{self.name} did not listen on port {self.port} in {timeout_s} s")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is not None:
            end_process(self.proc, timeout_s)

    def kill(self) -> None:
        if self.proc is not None:
            end_process(self.proc, kill=True)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def holds_listener(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on 127.0.0.1:`port` (Linux's /proc;
    True where /proc cannot tell). An answer on the port alone can come from another
    server that took it between `free_port` and our bind."""
    inodes: set[str] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")  # 0A: LISTEN
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, IndexError, ValueError):
        return True
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


def _workdir(workdir: str | os.PathLike[str] | None, name: str, private: bool = False) -> Path:
    """The server's directory; `private`: its owner's only (0700), since its files hold
    every message and sample and, with credentials, the password files."""
    path = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"streamlearn-{name}-"))
    path.mkdir(parents=True, exist_ok=True)
    if private:
        path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` readable by its owner only (0600), replacing an older file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # an older file may have had a wider mode
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def open_private(path: Path, truncate: bool = False) -> BinaryIO:
    """`path` opened to append (emptied first with `truncate`), readable by its owner only
    (0600): the logs of servers and workers hold what they print, payloads and URLs."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # an older file may have had a wider mode
    return os.fdopen(fd, "ab")


def redis_server(
    port: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    *extra: str,
    password: str | None = None,
) -> ServerProcess:
    """A local redis-server (no persistence unless `extra` asks for it). With `password`,
    every connection must AUTH first (else NOAUTH); it is set in a 0600 config file."""
    port = port or free_port()
    wd = _workdir(workdir, "redis", private=password is not None)
    conf = []
    if password is not None:  # a config file must come first on redis-server's command line
        conf = [str(write_private(wd / "auth.conf", f"requirepass {password}\n"))]
    argv = [
        "redis-server",
        *conf,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(wd),
        *extra,
    ]
    return ServerProcess("redis", argv, port, wd)


# `user root`: started as root, mosquitto would switch to the `mosquitto` user, which can
# neither write a private persistence directory (sessions and queues are then lost on a
# restart) nor keep the parent-death signal (so it outlives a killed parent). Started as
# anyone else, the line does nothing.
MOSQUITTO_CONF = """\
listener {port} 127.0.0.1
allow_anonymous true
user root
persistence {persistence}
persistence_location {workdir}/
max_inflight_messages 1000
max_queued_messages 1000000
max_queued_bytes 0
max_packet_size 2097152
set_tcp_nodelay true
"""


def mosquitto(
    port: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    persistence: bool = False,
    *,
    autosave_s: int = 1,
    accounts: Mapping[str, str] | None = None,
) -> ServerProcess:
    """A local mosquitto whose queues hold QoS 1 messages at our rates instead of dropping.

    With `persistence` it saves its sessions, queues and retained messages every
    `autosave_s` seconds (and when stopped), so a SIGKILL loses at most that much. With
    `accounts` (username: password) it refuses anyone else ("not authorized").
    """
    port = port or free_port()
    wd = _workdir(workdir, "mosquitto", private=accounts is not None)
    text = MOSQUITTO_CONF.format(
        port=port, workdir=wd, persistence="true" if persistence else "false"
    )
    if persistence:
        text += f"autosave_interval {autosave_s}\n"
    if accounts is not None:
        entries = "".join(password_entry(user, pw) for user, pw in accounts.items())
        passwd = write_private(wd / "passwd", entries)
        auth = f"allow_anonymous false\npassword_file {passwd}"
        text = text.replace("allow_anonymous true", auth)
    conf = wd / "mosquitto.conf"
    conf.write_text(text)
    return ServerProcess("mosquitto", ["mosquitto", "-c", str(conf)], port, wd)


def password_entry(username: str, password: str, iterations: int = 101) -> str:
    """A line of a mosquitto password file, as `mosquitto_passwd` writes it: `$7$` is
    PBKDF2-SHA512 with `iterations` rounds and a 12-byte salt, both base64."""
    salt = secrets.token_bytes(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    b64 = base64.b64encode
    return f"{username}:$7${iterations}${b64(salt).decode()}${b64(digest).decode()}\n"


class WatchedProcess:
    """A child process whose output lines are collected: wait for a line, or show the tail."""

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: str | os.PathLike[str] | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=die_with_parent,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout_s: float = 120) -> None:
        """Until a line holds `text`; an error if the process ends first or `timeout_s`
        passes (a learner traces every batch size before it says ready: over a minute on
        a busy 2-core machine)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise StreamlearnError(
            f"{text!r} not seen in {timeout_s} s; output:\n{self.output[-4000:]}"
        )

    def stop(self, timeout_s: float = 20, kill: bool = False) -> int:
        end_process(self.proc, timeout_s, kill)
        self._reader.join(5)
        return self.proc.returncode
