"""The benchmarks' own stack: child processes and connections on a loopback broker."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.loadgen import LoadClient
from streamlearn import embedded

ROOT = Path(__file__).resolve().parents[1]


class Proc:
    """A child process whose output is collected, as the test fixtures do."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=embedded.die_with_parent,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def wait_for(self, text: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(text in line for line in self.lines):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{text!r} not seen; output:\n" + "\n".join(self.lines[-30:]))

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Stack:
    """Connections of this run and how to start roles against them."""

    def __init__(self, mqtt_port: int, redis_port: int, workdir: Path) -> None:
        self.host, self.mqtt_port = "127.0.0.1", mqtt_port
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.workdir = workdir

    def env(self, prefix: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
        env.update(
            STREAMLEARN_MQTT_URL=f"mqtt://{self.host}:{self.mqtt_port}",
            STREAMLEARN_REDIS_URL=self.redis_url,
            STREAMLEARN_TOPIC_PREFIX=prefix,
            STREAMLEARN_KEY_PREFIX=prefix,
            STREAMLEARN_SHARE_GROUP=prefix,
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, argv: list[str], prefix: str) -> Proc:
        proc = Proc([sys.executable, "-m", *argv], self.env(prefix))
        proc.wait_for(" ready")
        return proc

    def client(self) -> LoadClient:
        return LoadClient(self.host, self.mqtt_port)


def broker(workdir: Path, nagle: bool) -> embedded.ServerProcess:
    """The embedded mosquitto, with TCP_NODELAY as deploy/mosquitto/mosquitto.conf sets it.

    With Nagle's algorithm on (mosquitto's default), a reply that follows the PUBACK of a
    QoS 1 request waits for the client's delayed ACK: up to ~40 ms on Linux.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = embedded.free_port()
    conf = embedded.MOSQUITTO_CONF.format(port=port, workdir=workdir, persistence="false")
    (workdir / "mosquitto.conf").write_text(conf + ("" if nagle else "set_tcp_nodelay true\n"))
    argv = ["mosquitto", "-c", str(workdir / "mosquitto.conf")]
    return embedded.ServerProcess("mosquitto", argv, port, workdir)
