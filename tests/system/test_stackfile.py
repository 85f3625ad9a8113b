"""The run file of `streamlearn up`: a second shell's `status`, `predict` and `Client()` find
the running stack with no URL exported, say so, and yield to explicit settings; the file
goes with the stack, and a stale one is ignored."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streamlearn.config import Settings, runfile
from tests.conftest import ROOT, RoleProcess, eventually
from tests.integration.test_up import run_dir_of


def shell_env(stack: Path, **extra: str) -> dict[str, str]:
    """A second shell's environment: no STREAMLEARN_* URL, only where the run file is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
    return {**env, "PYTHONPATH": str(ROOT), runfile.FILE_ENV: str(stack), **extra}


def streamlearn(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "streamlearn", *args]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


# Two clients at once, as two shells would be: each keeps its connection (up's broker has
# one account for every tool; a shared client id would have them knock each other off).
CLIENT = """
import streamlearn
with streamlearn.Client() as one, streamlearn.Client() as two:
    assert one.client_id != two.client_id
    one.predict("demo", [0.5] * 9, timeout=20)
    print(two.predict("demo", [0.5] * 9, timeout=20).version)
"""


def test_a_second_shell_finds_the_stack_of_up_and_explicit_settings_win(tmp_path: Path):
    stack = tmp_path / "run" / "stack.json"
    env = {**shell_env(stack), "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "streamlearn", "up", "--demo", "--demo-rate", "300"]
    up = RoleProcess([*argv, "--no-dashboard"], env)  # as test_up's start_up, with the file
    try:
        run_dir = run_dir_of(up)
        up.wait_for("Ctrl-C stops everything", 60)
        record = runfile.read(stack)
        assert record is not None and record.pid == up.proc.pid, up.output
        assert (stack.stat().st_mode & 0o777) == 0o600
        # the broker's account, with a password made for this run
        assert re.match(r"mqtt://streamlearn:[0-9a-f]{48}@127\.0\.0\.1:\d+$", record.mqtt_url)
        actor_log = run_dir / "actor-demo-0.log"
        eventually(lambda: "actor for demo ready" in actor_log.read_text(), 90, "actor ready")
        eventually(lambda: runfile.live(stack) is not None, 5, "a live record")

        shell = shell_env(stack)
        shown = runfile.redact(record.mqtt_url)
        using = f"using the stack of streamlearn up (pid {up.proc.pid}): {shown}"
        status = streamlearn(shell, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert using in status.stderr
        rows = json.loads(status.stdout)
        assert [r["model"] for r in rows] == ["demo"]

        def learning() -> bool:
            rows = json.loads(streamlearn(shell, "status", "--json").stdout)
            return rows[0].get("samples_seen", 0) > 0

        eventually(learning, 90, "the demo model learning, seen by status")

        predict = streamlearn(shell, "predict", "--timeout", "20")
        assert predict.returncode == 0, predict.stderr
        assert using in predict.stderr
        reply = json.loads(predict.stdout)
        assert 0.0 <= reply["y"] <= 1.0 and reply["model"] == "demo", reply

        client = subprocess.run(
            [sys.executable, "-c", CLIENT], env=shell, capture_output=True, text=True, timeout=60
        )
        assert client.returncode == 0, client.stderr
        assert int(client.stdout) >= 0

        # an explicit URL wins over the file: here one where nothing listens
        nowhere = "mqtt://127.0.0.1:1"
        explicit = streamlearn(
            shell_env(stack, STREAMLEARN_MQTT_URL=nowhere), "predict", "--timeout", "2"
        )
        assert explicit.returncode != 0
        assert f"using STREAMLEARN_MQTT_URL={nowhere}" in explicit.stderr
        assert "stack of streamlearn up" not in explicit.stderr
    finally:
        up.proc.send_signal(signal.SIGINT)
        code = up.proc.wait(60)
        up.stop()
    assert code == 0, up.output[-3000:]
    assert not stack.exists(), "the run file goes with the stack"
    gone = streamlearn(shell_env(stack), "status", "--json")
    assert "no stack found: mqtt://localhost:1883 (default)" in gone.stderr


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.upper().startswith("STREAMLEARN_"):
            monkeypatch.delenv(name)
    stack = tmp_path / "stack.json"
    monkeypatch.setenv(runfile.FILE_ENV, str(stack))
    return stack


def record_of(pid: int) -> runfile.StackRecord:
    return runfile.StackRecord(
        "mqtt://127.0.0.1:18830", "redis://127.0.0.1:16379/0", "t1", "k1", pid, 0.0
    )


def test_a_file_whose_process_is_gone_is_ignored(clean_env: Path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    runfile.write(record_of(dead.pid))
    assert runfile.read() is not None and runfile.live() is None
    s = Settings()
    assert s.stack is None and s.mqtt == "mqtt://localhost:1883"
    assert (s.topic_prefix, s.key_prefix) == ("streamlearn", "sl")
    assert s.which_stack() == "no stack found: mqtt://localhost:1883 (default)"


def test_settings_take_a_live_stack_unless_told_otherwise(clean_env: Path):
    # a live process that looks like streamlearn up (its command line names streamlearn)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "streamlearn"])
    try:
        path = runfile.write(record_of(alive.pid))
        assert path == clean_env
        s = Settings()
        assert (s.mqtt, s.redis) == ("mqtt://127.0.0.1:18830", "redis://127.0.0.1:16379/0")
        assert (s.topic_prefix, s.key_prefix) == ("t1", "k1"), "that stack's topics and keys"
        assert s.mqtt_url is None, "up still sees no URL given and starts its own servers"
        assert f"(pid {alive.pid})" in s.which_stack()

        told = Settings(mqtt_url="mqtt://u:pw@broker:1883", redis_url="redis://cache:6379/0")
        assert (told.mqtt, told.redis) == ("mqtt://u:pw@broker:1883", "redis://cache:6379/0")
        assert (told.topic_prefix, told.key_prefix) == ("streamlearn", "sl")
        assert told.which_stack() == "using STREAMLEARN_MQTT_URL=mqtt://u:***@broker:1883"

        runfile.remove(alive.pid + 1)
        assert clean_env.exists(), "only the stack that wrote the file removes it"
        runfile.remove(alive.pid)
        assert not clean_env.exists()
    finally:
        alive.kill()
        alive.wait()


def test_a_broken_file_is_no_stack(clean_env: Path):
    clean_env.write_text("{not json")
    assert runfile.read() is None and Settings().stack is None
    clean_env.write_text(json.dumps({"mqtt_url": "x"}))
    assert runfile.read() is None
