"""`streamlearn up` on the embedded default: its own mosquitto and redis-server, every role,
a demo stream that gets learned, worker logs in a run directory, one live line per model
on the terminal, its flags honoured, and nothing left running after Ctrl-C."""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import signal
import socket
import sys
import urllib.request
from pathlib import Path

import redis as redis_lib

from streamlearn.config import DEMO_TOML, Settings, runfile
from streamlearn.contract.names import Names
from streamlearn.stack.runlog import Board, ChildLog, new_run_dir
from tests.conftest import ROOT, Client, RoleProcess, eventually

WORKERS = ("learner-demo-0", "ingest-demo-0", "actor-demo-0")
# What TensorFlow's C++ side prints (absl/glog records, its notices) and what a worker logs.
NOISE = re.compile(
    r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|absl::InitializeLog|oneDNN|cuda|tensorflow/"
    r"|^\S+ \S+ (learner|ingest|actor)\[\d+\] (INFO|WARNING)"
)
# The demo publisher's progress line (`streamlearn publish`), which belongs in its own log.
PROGRESS = re.compile(r"^\[?[#.]*\]?\s*[\d,]+ samples\s+[\d,]+ samples/s")
LIVE = re.compile(r"demo: [\d,]+ samples/s\s+[\d,]+ seen\s+binary_accuracy \S+.*version \d+")


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            found |= {int(p) for p in (task / "children").read_text().split()}
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def process_tree(pid: int) -> set[int]:
    """`pid` and every process under it."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass  # it has just exited
    return found


def listening_sockets(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP socket in LISTEN state that `pids` hold."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            pass
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)  # host-order 32-bit words
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16), inodes[fields[9]]))
    return found


def free_run(count: int) -> int:
    """A base port with `count` free ports from it."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        if not any(listening(base + i) for i in range(count)):
            return base
    raise AssertionError("no run of free ports")


def user_env(tmp_path: Path) -> dict[str, str]:
    """A shell of the user's with no STREAMLEARN_ URL: the tools find `up` by its run file
    (under tmp_path), and `up`'s run directories go under tmp_path too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
    env["PYTHONPATH"] = str(ROOT)
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env[runfile.FILE_ENV] = str(tmp_path / "stack.json")
    return env


def start_up(tmp_path: Path, *flags: str, demo: bool = True) -> RoleProcess:
    """`streamlearn up --demo ...` as a user runs it (see `user_env`)."""
    argv = [sys.executable, "-m", "streamlearn", "up"]
    if demo:
        argv += ["--demo", "--demo-rate", "300"]
    return RoleProcess([*argv, *flags], user_env(tmp_path))


def recorded(tmp_path: Path) -> Settings:
    """The URLs, with their passwords, that `up` recorded in its run file."""
    record = runfile.live(tmp_path / "stack.json")
    assert record is not None, "up recorded its stack"
    return Settings(mqtt_url=record.mqtt_url, redis_url=record.redis_url)


def token_of(tmp_path: Path) -> str:
    """The run's bearer token, as `up` recorded it in its run file."""
    record = runfile.live(tmp_path / "stack.json")
    assert record is not None and record.token, "up recorded its token"
    return record.token


def run_dir_of(up: RoleProcess) -> Path:
    up.wait_for("logs in ", 30)
    found = re.search(r"logs in (\S+)", up.output)
    assert found, up.output
    return Path(found[1])


def stop(up: RoleProcess) -> tuple[int, set[int]]:
    children = children_of(up.proc.pid) if up.proc.poll() is None else set()
    up.proc.send_signal(signal.SIGINT)
    code = up.proc.wait(60)
    up.stop()  # joins the output reader
    return code, children


def test_up_runs_the_demo_stack_and_ctrl_c_stops_everything(tmp_path: Path):
    base, dashboard = free_run(3), free_run(1)
    up = start_up(tmp_path, "--metrics-port", str(base), "--dashboard-port", str(dashboard))
    children: set[int] = set()
    try:
        run_dir = run_dir_of(up)
        assert run_dir.is_relative_to(tmp_path / "state" / "streamlearn" / "runs")
        up.wait_for("Ctrl-C stops everything", 60)
        settings = recorded(tmp_path)
        store = redis_lib.Redis.from_url(settings.redis)
        latest = Names("demo").latest_key
        eventually(lambda: int(store.get(latest) or 0) > 0, 90, "a first version")
        # a request sent before the actor is ready is heard by no one; each worker serves
        # /metrics from before it says it is ready (the learner publishes its first version
        # earlier, while it starts)
        for role in ("actor", "learner", "ingest"):
            log, line = run_dir / f"{role}-demo-0.log", f"{role} for demo ready"
            eventually(lambda log=log, line=line: line in log.read_text(), 60, line)
        client = Client(settings, "demo")
        try:
            reply = client.request({"x": [0.5] * 9, "id": 1}, timeout_s=20)
        except AssertionError:
            raise AssertionError(up.output[-5000:]) from None
        client.close()
        store.close()
        assert reply["version"] > 0 and 0.0 <= reply["y"] <= 1.0, reply

        # each worker's /metrics on its own port, base, base+1, base+2, as printed
        ports = [int(p) for p in re.findall(r"=(\d+)", up.output.split("metrics ports")[1])[:3]]
        assert sorted(ports) == [base, base + 1, base + 2], up.output
        token = {"Authorization": f"Bearer {token_of(tmp_path)}"}  # the run's own
        for port in ports:
            scrape = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=token)
            assert b"streamlearn_" in urllib.request.urlopen(scrape, timeout=5).read()
        page = urllib.request.Request(f"http://127.0.0.1:{dashboard}/", headers=token)
        assert "streamlearn" in urllib.request.urlopen(page, timeout=5).read().decode()
        eventually(lambda: any(LIVE.search(line) for line in up.lines), 30, "the live line")
        children = children_of(up.proc.pid)
        assert len(children) >= 6, "mosquitto, redis-server, learner, ingest, actor, demo publisher"
    finally:
        code, _ = stop(up)
    assert code == 0, up.output[-3000:]
    assert "stopped" in up.output
    assert not [pid for pid in children if alive(pid)], "every child process stopped"
    for url in (settings.mqtt, settings.redis):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert not listening(port), f"port {port} still open"

    # the terminal: up's own lines only, no TensorFlow, no worker logs, no demo progress
    assert not [line for line in up.lines if NOISE.search(line)], up.output
    assert not [line for line in up.lines if PROGRESS.search(line)], up.output
    # the workers' output went to their logs, and TensorFlow's import chatter did not
    logs = {p.stem: p.read_text() for p in run_dir.glob("*.log")}
    assert set(WORKERS) | {"demo-demo"} <= set(logs), sorted(logs)
    assert "learner for demo ready" in logs["learner-demo-0"]
    assert "ingest for demo ready" in logs["ingest-demo-0"]
    assert any(PROGRESS.search(line) for line in logs["demo-demo"].splitlines())
    for name in ("learner-demo-0", "actor-demo-0"):
        assert not re.search(r"absl::InitializeLog|oneDNN|cuda", logs[name]), logs[name]


def test_up_without_dashboard_serves_none(tmp_path: Path):
    port = free_run(1)
    # the demo model without its feed (nothing to learn: the dashboard is this test's), and
    # one padded batch size (one trace before the learner is ready)
    config = tmp_path / "streamlearn.toml"
    config.write_text(DEMO_TOML + "\n[models.demo.learner]\nbuckets = [256]\n")
    flags = ("--no-dashboard", "--dashboard-port", str(port), "--config", str(config))
    up = start_up(tmp_path, *flags, demo=False)
    try:
        up.wait_for("Ctrl-C stops everything", 60)
        run_dir = run_dir_of(up)
        log = run_dir / "learner-demo-0.log"
        eventually(lambda: "ready" in log.read_text(), 90, "the learner ready")
        # its own processes: another test's server may take the port meanwhile
        assert port not in [p for _, p, _ in listening_sockets(process_tree(up.proc.pid))]
        assert "dashboard http" not in up.output
    finally:
        code, _ = stop(up)
    assert code == 0, up.output[-3000:]


def test_run_dirs_keep_the_newest_and_nothing_else(tmp_path: Path):
    mine = tmp_path / "notes"
    mine.mkdir()
    made = [new_run_dir(tmp_path, keep=2) for _ in range(4)]
    assert len(set(made)) == 4, "runs in the same second get their own directory"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([made[2].name, made[3].name, "notes"])


def test_a_child_log_is_bounded(tmp_path: Path):
    log = ChildLog(tmp_path / "learner-demo-0.log", max_bytes=1000)
    with log.open() as out:
        out.write(b"x" * 1000 + b"\n")
        out.flush()
        log.bound()
        out.write(b"after\n")
    assert (tmp_path / "learner-demo-0.log.1").stat().st_size == 1001
    assert log.path.read_bytes() == b"after\n", "the writer goes on at the start"
    assert log.tail(1) == ["after"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_board_redraws_the_live_lines_in_place_under_messages():
    term = Terminal()
    board = Board(term)
    board.show(["a: 1 samples/s", "b: 2 samples/s"])
    board.say("learner:a:0 exited with 1")
    board.show(["a: 3 samples/s", "b: 4 samples/s"])
    text = term.getvalue()
    assert text.count("\033[2F\033[J") == 2, "each redraw erases the two live lines first"
    # what a terminal shows at the end: the message, then the newest live lines
    screen: list[str] = []
    for chunk in re.split(r"(\033\[\d+F\033\[J)", text):
        m = re.match(r"\033\[(\d+)F", chunk)
        if m:
            del screen[-int(m[1]) :]
        else:
            screen += chunk.splitlines()
    assert screen == ["[streamlearn] learner:a:0 exited with 1", "a: 3 samples/s", "b: 4 samples/s"]


def test_board_off_a_terminal_prints_plain_lines_now_and_then():
    out = io.StringIO()
    board = Board(out, plain_every_s=3600)
    board.show(["a: 1 samples/s"])
    board.show(["a: 2 samples/s"])
    board.say("stopping...")
    assert out.getvalue() == "[streamlearn] a: 1 samples/s\n[streamlearn] stopping...\n"
    assert "\033" not in out.getvalue()
