"""Faults in the middle of a stream, against real servers, checked with a ledger: every
sample id whose PUBACK the device got is in the stream exactly once, whatever failed.

Each test has its own mosquitto (persistence on) and redis-server (AOF on), so that it
can stop and restart them on the same ports.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
import redis as redis_lib
from paho.mqtt.enums import CallbackAPIVersion

from streamlearn.config import Settings
from streamlearn.contract.names import Names
from streamlearn.stack import embedded
from streamlearn.store.stream import unpack
from tests.conftest import RoleProcess, eventually, role_env

TOML = """
[models.led]
inputs = 2
task = "regression"
"""
SAMPLES = 20_000
PER_MESSAGE = 5
RATE = 1000  # messages/s: the stream lasts about 4 s


class Servers:
    """A mosquitto and a redis-server that keep their data and ports across restarts."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.mqtt_port, self.redis_port = embedded.free_port(), embedded.free_port()
        self.broker = self._broker().start()
        self.store = self._store().start()

    def _broker(self) -> embedded.ServerProcess:
        return embedded.mosquitto(self.mqtt_port, self.workdir / "mqtt", persistence=True)

    def _store(self) -> embedded.ServerProcess:
        return embedded.redis_server(self.redis_port, self.workdir / "redis", "--appendonly", "yes")

    def restart_broker(self, down_s: float) -> None:
        self.broker.stop()  # SIGTERM: mosquitto saves its sessions and queues
        time.sleep(down_s)
        self.broker = self._broker().start()

    def wait_for_clients(self, client_ids: list[str]) -> None:
        """Until the restarted broker logs each client connected (then it subscribes)."""

        def connected() -> bool:
            log = self.broker.log_path.read_text().rsplit(" starting", 1)[-1]
            return all(f" as {c} " in log for c in client_ids)

        eventually(connected, 30, f"{client_ids} back")
        time.sleep(0.5)

    def restart_store(self, down_s: float) -> None:
        self.store.stop()  # SIGTERM: redis flushes its AOF
        time.sleep(down_s)
        self.store = self._store().start()

    def stop(self) -> None:
        self.broker.stop()
        self.store.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    s = Servers(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def start_ingest(servers: Servers, tmp_path: Path) -> Iterator[Callable[[str], RoleProcess]]:
    settings = Settings(
        mqtt_url=f"mqtt://127.0.0.1:{servers.mqtt_port}",
        redis_url=f"redis://127.0.0.1:{servers.redis_port}/0",
        share_group="ledger",
    )
    config = tmp_path / "streamlearn.toml"
    config.write_text(TOML)
    started: list[RoleProcess] = []

    def start(instance: str) -> RoleProcess:
        argv = [sys.executable, "-m", "streamlearn.ingest.worker", "--config", str(config)]
        started.append(RoleProcess([*argv, "--instance", instance], role_env(settings)))
        return started[-1]

    yield start
    for proc in started:
        proc.stop()


class Device:
    """Publishes SAMPLES samples with ids, QoS 1, at RATE messages/s from a thread; it can
    pause between two messages."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self.client.max_inflight_messages_set(100)
        self.client.max_queued_messages_set(0)
        self.client.reconnect_delay_set(1, 2)
        self.client.on_publish = self._on_publish
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.pubacked: list[int] = []
        self.sent: list[tuple[paho.MQTTMessageInfo, list[str]]] = []
        self.gate, self.waiting = threading.Event(), threading.Event()
        self.gate.set()
        self.thread = threading.Thread(target=self._publish, daemon=True)

    def _on_publish(self, _c: object, _u: object, mid: int, reason: object, _p: object) -> None:
        if not getattr(reason, "is_failure", False):
            self.pubacked.append(mid)

    def _publish(self) -> None:
        topic = Names("led").samples_topic
        next_at = time.monotonic()
        for m in range(SAMPLES // PER_MESSAGE):
            if not self.gate.is_set():
                self.waiting.set()
                self.gate.wait()
                next_at = time.monotonic()
            ids = [f"s{m * PER_MESSAGE + j}" for j in range(PER_MESSAGE)]
            doc = {"x": [[m, j] for j in range(PER_MESSAGE)], "y": [0.5] * PER_MESSAGE, "ids": ids}
            self.sent.append((self.client.publish(topic, json.dumps(doc), qos=1), ids))
            next_at += 1 / RATE
            time.sleep(max(0.0, next_at - time.monotonic()))

    def start(self) -> Device:
        self.thread.start()
        return self

    def wait_until_sent(self, fraction: float) -> None:
        eventually(lambda: len(self.sent) >= fraction * SAMPLES / PER_MESSAGE, 60, "publishing")

    def _all_pubacked(self) -> None:
        eventually(lambda: len(set(self.pubacked)) >= len(self.sent), 30, "PUBACKs")

    def pause(self) -> None:
        """Stop between two messages, once every message sent has its PUBACK, offline."""
        self.gate.clear()
        while self.thread.is_alive() and not self.waiting.wait(0.05):
            pass
        self._all_pubacked()
        self.client.disconnect()
        self.client.loop_stop()

    def resume(self) -> None:
        self.client.connect("127.0.0.1", self.port)
        self.client.loop_start()
        self.gate.set()

    def acked(self) -> list[str]:
        """The ids whose PUBACK arrived, once publishing is done and PUBACKs had time."""
        self.thread.join(60)
        self._all_pubacked()
        self.client.disconnect()
        self.client.loop_stop()
        done = set(self.pubacked)
        return [i for info, ids in self.sent if info.mid in done for i in ids]


def stream_ids(servers: Servers) -> Counter[str]:
    store = redis_lib.Redis(port=servers.redis_port)
    try:
        rows = store.xrange(Names("led").samples_key)
        return Counter(i for _, f in rows for i in unpack(f, (2,)).ids or ())
    finally:
        store.close()


def check_ledger(servers: Servers, acked: list[str], workers: list[RoleProcess]) -> None:
    assert len(acked) > SAMPLES * 0.9, "the device got PUBACKs for most of its samples"
    expected = set(acked)
    deadline = time.monotonic() + 60
    while not expected <= set(stream_ids(servers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for worker in workers:
        worker.stop()
    counts = stream_ids(servers)
    lost = sorted(expected - set(counts), key=lambda i: int(i[1:]))
    assert not lost, (
        f"{len(lost)} acknowledged samples lost, e.g. {lost[:3]}..{lost[-3:]}\n"
        + "\n".join(w.output[-1500:] for w in workers)
    )
    assert {i: n for i, n in counts.items() if n > 1} == {}, "no sample stored twice"


def test_kill_9_one_of_two_ingest_workers_mid_stream(servers, start_ingest):
    workers = [start_ingest("0"), start_ingest("1")]
    for w in workers:
        w.wait_for(" ready")
    device = Device(servers.mqtt_port).start()
    device.wait_until_sent(1 / 3)
    workers[1].proc.kill()
    workers[1].proc.wait()
    time.sleep(0.5)
    workers.append(start_ingest("1"))  # a supervisor restarts it: same id, same session
    check_ledger(servers, device.acked(), workers)


def test_restart_mosquitto_mid_stream(servers, start_ingest):
    """The broker restarts while the ingest workers' sessions hold samples in flight and
    queued (the workers are frozen meanwhile, as if slow). Mosquitto does not persist
    shared subscriptions (2.0.11 here), so a sample published after the restart but before
    a worker has subscribed again would have no subscriber: the device waits for them."""
    workers = [start_ingest("0"), start_ingest("1")]
    for w in workers:
        w.wait_for(" ready")
    device = Device(servers.mqtt_port).start()
    device.wait_until_sent(1 / 3)
    for w in workers:
        w.proc.send_signal(signal.SIGSTOP)
    device.wait_until_sent(2 / 3)
    device.pause()
    servers.restart_broker(down_s=1.0)
    for w in workers:
        w.proc.send_signal(signal.SIGCONT)
    servers.wait_for_clients(["sl-ingest-led-0", "sl-ingest-led-1"])
    device.resume()
    check_ledger(servers, device.acked(), workers)


def test_stop_redis_for_10_s_mid_stream(servers, start_ingest):
    workers = [start_ingest(uuid.uuid4().hex[:6])]
    workers[0].wait_for(" ready")
    device = Device(servers.mqtt_port).start()
    device.wait_until_sent(1 / 3)
    servers.restart_store(down_s=10.0)
    check_ledger(servers, device.acked(), workers)
    assert "redis unavailable" in workers[0].output
