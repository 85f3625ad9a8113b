"""bench.serve's request-reply on a broker at its defaults, beside a tuned one.

Two mosquittos of their own, one with `set_tcp_nodelay true` (as the embedded and deployed
brokers are) and one at its defaults (Nagle's algorithm on, what users often run), each
with a numpy actor of the demo model. On each, requests one at a time, each sent when the
previous one's reply came: from plain paho at QoS 1, as a user's device sends them, and
from `streamlearn.Client` (QoS 0); and the broker delay each actor reports in its status
(`streamlearn.observe.broker_delay`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench._stack import Proc, Stack, broker
from streamlearn import Client, mqtt
from streamlearn.config import DEMO_TOML
from streamlearn.contract.names import Names
from streamlearn.observe.broker_delay import SLOW_MS

TUNED, DEFAULTS = "set_tcp_nodelay true", "mosquitto defaults (Nagle)"
BROKERS = {TUNED: False, DEFAULTS: True}  # label: Nagle's algorithm on
DEVICE, CLIENT = "QoS 1 (paho, as a device)", "QoS 0 (streamlearn.Client)"
X = [0.1] * 9  # one row of the demo model


def measure(workdir: Path, redis_port: int, requests: int) -> list[dict]:
    """One row per broker and requester: p50 and p90 of `requests` round trips."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "delay.toml"
    config.write_text(DEMO_TOML + "\n[models.demo.actor]\nstatus_every_ms = 200\n")
    rows = []
    with contextlib.ExitStack() as started:
        served = []
        for label, nagle in BROKERS.items():  # both started first: their starts overlap
            tag = "nagle" if nagle else "tuned"
            server = started.enter_context(broker(workdir / f"broker-{tag}", nagle))
            stack, prefix = Stack(server.port, redis_port, workdir), f"delay-{tag}"
            argv = ["streamlearn.actor.worker", "--config", str(config), "--instance", tag]
            actor = Proc([sys.executable, "-m", *argv], stack.env(prefix))
            started.callback(actor.stop, kill=True)
            url = f"mqtt://{stack.host}:{server.port}"
            served.append((label, actor, url, Names("demo", prefix, prefix)))
        for label, actor, url, names in served:
            actor.wait_for(" ready")
            delay_ms = _reported_delay(url, names)
            for requester, times in (
                (DEVICE, _paho_qos1(url, names, requests)),
                (CLIENT, _client_qos0(url, names, requests)),
            ):
                row = {"actor": f"one at a time: {label}", "load": requester}
                rows.append({**row, **_summary(times, requests), "broker_delay_ms": delay_ms})
                print(
                    f"  {row['actor']}, {requester}: p50 {rows[-1]['p50_ms']} ms, "
                    f"p90 {rows[-1]['p90_ms']} ms; the actor reports {delay_ms} ms",
                    flush=True,
                )
    return rows


def checks(rows: list[dict]) -> tuple[dict[str, bool], dict[str, float | None]]:
    """The goals of these rows (item 5 of issue 61), and the figures they judge."""
    by = {(r["actor"], r["load"]): r for r in rows}

    def get(broker: str, requester: str, field: str) -> float | None:
        return by.get((f"one at a time: {broker}", requester), {}).get(field)

    slow, fast = get(DEFAULTS, DEVICE, "broker_delay_ms"), get(TUNED, DEVICE, "broker_delay_ms")
    client, device = get(DEFAULTS, CLIENT, "p50_ms"), get(DEFAULTS, DEVICE, "p50_ms")
    inf = float("inf")
    found = {
        f"the actor reports the default broker's delay over {SLOW_MS:g} ms and the tuned "
        f"one's under (got {slow} and {fast} ms)": (
            slow is not None and fast is not None and slow > SLOW_MS > fast
        ),
        f"streamlearn.Client (QoS 0) one at a time on the default broker: p50 <= 10 ms "
        f"(got {client or inf:.2f} ms; a QoS 1 device's {device or inf:.2f} ms)": (
            client is not None and client <= 10
        ),
    }
    figures = {
        "broker_delay_default_ms": slow,
        "broker_delay_tuned_ms": fast,
        "default_broker_client_p50_ms": client,
        "default_broker_qos1_p50_ms": device,
    }
    return found, figures


def _reported_delay(url: str, names: Names, timeout_s: float = 10) -> float | None:
    """The `broker_delay_ms` of the actor's retained status, once it has one."""
    found = threading.Event()
    delay: list[float] = []

    def on_message(_c: object, _u: object, msg: paho.MQTTMessage) -> None:
        doc = json.loads(msg.payload) if msg.payload else {}
        if doc.get("broker_delay_ms") is not None:
            delay.append(doc["broker_delay_ms"])
            found.set()

    topics = [(names.topic("actors/+"), 0)]
    client = mqtt.connect(url, subscriptions=topics, on_message=on_message)
    try:
        found.wait(timeout_s)
    finally:
        mqtt.close(client)
    return delay[0] if delay else None


def _paho_qos1(url: str, names: Names, n: int, timeout_s: float = 2) -> list[float]:
    """Round trips of requests at QoS 1 from a plain paho client with a response topic."""
    address = mqtt.BrokerAddress.parse(url)
    reply_to = names.topic("replies/device/r")
    got = threading.Event()
    device = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    device.on_message = lambda _c, _u, _m: got.set()
    device.connect(address.host, address.port)
    device.loop_start()
    times = []
    try:
        subscribed = threading.Event()
        device.on_subscribe = lambda *_: subscribed.set()
        device.subscribe(reply_to, qos=0)
        subscribed.wait(timeout_s)
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = reply_to
        body = json.dumps({"x": X}).encode()
        for _ in range(n):
            got.clear()
            sent = time.perf_counter()
            device.publish(names.predict_topic, body, qos=1, properties=props)
            if got.wait(timeout_s):
                times.append((time.perf_counter() - sent) * 1000)
    finally:
        device.disconnect()
        device.loop_stop()
    return times


def _client_qos0(url: str, names: Names, n: int) -> list[float]:
    times = []
    with Client(url, topic_prefix=names.topic_prefix) as client:
        for _ in range(n):
            sent = time.perf_counter()
            client.predict("demo", X, timeout=2)
            times.append((time.perf_counter() - sent) * 1000)
    return times


def _summary(times: list[float], sent: int) -> dict[str, float | int | None]:
    p50, p90 = np.percentile(times, [50, 90]) if times else (None, None)
    return {
        "sent": sent,
        "answered": len(times),
        "p50_ms": None if p50 is None else round(float(p50), 2),
        "p90_ms": None if p90 is None else round(float(p90), 2),
    }
