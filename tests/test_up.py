"""`streamlearn up` on the embedded default: its own mosquitto and redis-server, every role,
a demo stream that gets learned, and nothing left running after Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
from pathlib import Path

import redis as redis_lib

from streamlearn.config import Settings
from streamlearn.names import Names
from tests.conftest import ROOT, Client, RoleProcess, eventually


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(p) for p in (task / "children").read_text().split()}
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_up_runs_the_demo_stack_and_ctrl_c_stops_everything(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
    env["PYTHONPATH"] = str(ROOT)
    up = RoleProcess(
        [sys.executable, "-m", "streamlearn.cli", "up", "--demo", "--demo-rate", "300"], env
    )
    try:
        up.wait_for("Ctrl-C stops everything", 60)
        urls = re.search(r"broker (\S+)\s+redis (\S+)", up.output)
        assert urls, up.output
        settings = Settings(mqtt_url=urls[1], redis_url=urls[2])
        names = Names("demo")
        store = redis_lib.Redis.from_url(settings.redis)
        eventually(lambda: int(store.get(names.latest_key) or 0) > 0, 90, "a first version")
        up.wait_for("actor for demo ready", 60)  # a request sent before is heard by no one
        client = Client(settings, "demo")
        try:
            reply = client.request({"x": [0.5] * 9, "id": 1}, timeout_s=20)
        except AssertionError:
            raise AssertionError(up.output[-5000:]) from None
        client.close()
        store.close()
        assert reply["version"] > 0 and 0.0 <= reply["y"] <= 1.0, reply
        children = children_of(up.proc.pid)
        assert len(children) >= 6, "mosquitto, redis-server, learner, ingest, actor, demo publisher"
    finally:
        up.proc.send_signal(signal.SIGINT)
        code = up.proc.wait(60)
    assert code == 0, up.output[-3000:]
    assert "stopped" in up.output
    assert not [pid for pid in children if alive(pid)], "every child process stopped"
    for url in (settings.mqtt, settings.redis):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"
