"""The assembly case of `bench.ingest`: readings on a topic per input (Home Assistant's
statestream, a plain value each; the label beside one input), held per device key in
Redis and assembled into samples by a real ingest process, against the raw subscriber's
rate of the same number of messages queued at the broker (`backlog`)."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
import redis
from paho.mqtt.enums import CallbackAPIVersion

from streamlearn.contract.names import Names

NAMES = ["temperature", "vibration", "rpm", "load"]
DEVICES = 50  # device keys per publisher
TOML = """
[models.{model}]
inputs = {inputs}
task = "binary"

[models.{model}.ingest]
max_backlog_samples = 100_000_000

[models.{model}.assembly]
max_age_s = 600

[[models.{model}.sources]]
topic = "ha/{model}/+/+/state"
key = "topic:2"
field = "topic:3"
"""


def readings(model: str, publisher: int, samples: int) -> list[tuple[str, bytes]]:
    """Each sample as 4 messages: 3 plain values on their own topics, then the 4th input
    with the label beside it (a JSON object), round-robin over the publisher's devices."""
    rng = np.random.default_rng(publisher)
    out = []
    for i in range(samples):
        device = f"d{publisher}-{i % DEVICES}"
        values = rng.standard_normal(len(NAMES)).round(6).tolist()
        for name, v in zip(NAMES[:-1], values, strict=False):
            out.append((f"ha/{model}/{device}/{name}/state", repr(v).encode()))
        label = {NAMES[-1]: values[-1], "y": int(values[0] > 0)}
        out.append((f"ha/{model}/{device}/{NAMES[-1]}/state", json.dumps(label).encode()))
    return out


def publish_readings(port: int, data: list[tuple[str, bytes]], out: mp.Queue) -> None:
    """One device process: QoS 1 as fast as the broker acknowledges."""
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    for info in [client.publish(t, p, qos=1) for t, p in data]:
        info.wait_for_publish(120)
    out.put(True)
    client.disconnect()
    client.loop_stop()


def run_assembly(
    mqtt_port: int,
    store: redis.Redis,
    messages: int,
    pubs: int,
    worker_of: Callable[[str], Any],
    raw_msgs_per_s: float,
    tag: str = "assembly",
) -> dict:
    """`messages` readings queued at the broker while the ingest process is away, then
    assembled: readings/s from the first to the last stream entry, against the raw
    subscriber's backlog rate (`raw_msgs_per_s`)."""
    each = messages // pubs // len(NAMES)  # samples per publisher
    toml = TOML.format(model=tag, inputs=json.dumps(NAMES))
    streams = [readings(tag, k, each) for k in range(pubs)]
    row = drained(mqtt_port, store, tag, toml, streams, each * pubs, worker_of)
    sent = each * pubs * len(NAMES)
    return {
        "mode": "backlog",
        "subscriber": "ingest process, assembled (a topic per input)",
        "samples/msg": 1 / len(NAMES),
        "messages": sent,
        "seconds": row["seconds"],
        "msgs/s": sent / row["seconds"],
        "samples/s": each * pubs / row["seconds"],
        "cpu us/msg": row["cpu s"] / sent * 1e6,
        "vs raw": sent / row["seconds"] / raw_msgs_per_s,
    }


def drained(
    mqtt_port: int,
    store: redis.Redis,
    tag: str,
    toml: str,
    streams: list[list[tuple[str, bytes]]],
    samples: int,
    worker_of: Callable[[str], Any],
) -> dict:
    """Each publisher's `streams` queued at the broker while model `tag`'s ingest process
    (its config `toml`) is away, then taken until `samples` samples are stored: the
    seconds from the first to the last stream entry, and the process's CPU seconds."""
    names = Names(tag, "bench")
    worker = worker_of(tag)
    Path(worker.argv[-1]).write_text(toml)
    worker.start().stop()  # its session queues at the broker while it is away
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=publish_readings, args=(mqtt_port, s, out)) for s in streams]
    for p in procs:
        p.start()
    for _ in procs:
        out.get(timeout=300)
    for p in procs:
        p.join()
    worker.start()
    deadline = time.monotonic() + 300
    while int(store.get(names.ingest_count_key) or 0) < samples:
        if time.monotonic() > deadline or worker.proc.poll() is not None:
            raise SystemExit("ingest did not assemble:\n" + "".join(worker.lines[-30:]))
        time.sleep(0.02)
    cpu = worker.cpu_s() - worker.cpu_at_start
    worker.stop()
    key = names.samples_key
    first, last = store.xrange(key, count=1)[0][0], store.xrevrange(key, count=1)[0][0]
    return {"seconds": (int(last.split(b"-")[0]) - int(first.split(b"-")[0])) / 1000, "cpu s": cpu}
