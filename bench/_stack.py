"""The benchmarks' own stack: child processes and connections on a loopback broker."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from bench.loadgen import LoadClient
from streamlearn.config import Settings
from streamlearn.contract.names import Names
from streamlearn.stack import embedded

ROOT = Path(__file__).resolve().parents[1]


class Proc(embedded.WatchedProcess):
    """A child process whose output is collected, as the test fixtures do."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(argv, env, cwd=ROOT)


class Stack:
    """Connections of this run and how to start roles against them."""

    def __init__(self, mqtt_port: int, redis_port: int, workdir: Path) -> None:
        self.host, self.mqtt_port = "127.0.0.1", mqtt_port
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.workdir = workdir

    def env(self, prefix: str) -> dict[str, str]:
        settings = Settings(
            mqtt_url=f"mqtt://{self.host}:{self.mqtt_port}",
            redis_url=self.redis_url,
            topic_prefix=prefix,
            key_prefix=prefix,
            share_group=prefix,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
        return {**env, **settings.as_env(), "PYTHONUNBUFFERED": "1"}

    def start(self, argv: list[str], prefix: str) -> Proc:
        proc = Proc([sys.executable, "-m", *argv], self.env(prefix))
        proc.wait_for(" ready")
        return proc

    def client(self, names: Names | None = None) -> LoadClient:
        """A load client; with `names`, its replies come in the model's reply space
        (`{prefix}/{model}/replies/{client}/...`), the only topics actors answer on."""
        if names is None:
            return LoadClient(self.host, self.mqtt_port)
        tag = uuid.uuid4().hex[:8]
        return LoadClient(self.host, self.mqtt_port, names.topic(f"replies/bench-{tag}/r"))


def cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """A process's resident memory now (VmRSS), in MB."""
    with open(f"/proc/{pid}/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return round(kb / 1024, 1)


def broker(workdir: Path, nagle: bool) -> embedded.ServerProcess:
    """The embedded mosquitto, with TCP_NODELAY as deploy/mosquitto/mosquitto.conf sets it.

    With Nagle's algorithm on (mosquitto's default), a reply that follows the PUBACK of a
    QoS 1 request waits for the client's delayed ACK: up to ~40 ms on Linux.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = embedded.free_port()
    conf = embedded.MOSQUITTO_CONF.format(port=port, workdir=workdir, persistence="false")
    if nagle:  # the embedded broker's config sets it: mosquitto's default is without it
        conf = conf.replace("set_tcp_nodelay true\n", "")
    (workdir / "mosquitto.conf").write_text(conf)
    argv = ["mosquitto", "-c", str(workdir / "mosquitto.conf")]
    return embedded.ServerProcess("mosquitto", argv, port, workdir)
