"""The label-join case of `bench.ingest`: 100-label messages through a real ingest process,
each label joined to a prediction kept beforehand as an actor keeps it
(`streamlearn.store.pending`), appended and scored."""

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


def label_payloads(tag: str, publisher: int, count: int) -> list[bytes]:
    """`count` messages of 100 labels for the predictions `keep_predictions` kept."""
    return [
        json.dumps(
            {"labels": [{"id": f"{tag}-{publisher}-{i}-{j}", "y": j % 2} for j in range(100)]}
        ).encode()
        for i in range(count)
    ]


def keep_predictions(
    store: redis.Redis, tag: str, publishers: int, count: int, inputs: int
) -> None:
    """The served predictions the labels join, kept as an actor keeps them (requests on
    bare predict: the bare labels topic joins them)."""
    from streamlearn.config import LabelsConfig
    from streamlearn.contract.names import owned
    from streamlearn.store.pending import PendingStore, encode

    pending = PendingStore(store, Names(tag, "bench"), LabelsConfig())
    value = encode(np.zeros(inputs, np.float32), np.array([0.5], np.float32), 1, time.time())
    ids = [
        owned(None, f"{tag}-{k}-{i}-{j}")
        for k in range(publishers)
        for i in range(count)
        for j in range(100)
    ]
    for start in range(0, len(ids), 5000):
        chunk = ids[start : start + 5000]
        pending.keep(chunk, [value] * len(chunk))


def publish_labels(port: int, topic: str, data: list[bytes], out: mp.Queue) -> None:
    """One labelling process: QoS 1 as fast as the broker acknowledges."""
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    for info in [client.publish(topic, p, qos=1) for p in data]:
        info.wait_for_publish(120)
    out.put(True)
    client.disconnect()
    client.loop_stop()


def run_labels(
    mqtt_port: int,
    store: redis.Redis,
    messages: int,
    pubs: int,
    workdir: Path,
    worker_of: Callable[[str], Any],
    inputs: int,
) -> dict:
    """100-label messages through a real ingest process, each label joined to a kept
    prediction: labels/s from the first to the last stream entry they made."""
    tag = "labels"
    names = Names(tag, "bench")
    each = messages // pubs
    keep_predictions(store, tag, pubs, each, inputs)
    worker = worker_of(tag).start()
    out: mp.Queue = mp.Queue()
    procs = [
        mp.Process(
            target=publish_labels,
            args=(mqtt_port, names.labels_topic, label_payloads(tag, k, each), out),
        )
        for k in range(pubs)
    ]
    for p in procs:
        p.start()
    labels = each * pubs * 100
    deadline = time.monotonic() + 300
    while int(store.get(names.ingest_count_key) or 0) < labels:
        if time.monotonic() > deadline or worker.proc.poll() is not None:
            raise SystemExit("ingest did not join the labels:\n" + "".join(worker.lines[-30:]))
        time.sleep(0.02)
    cpu = worker.cpu_s() - worker.cpu_at_start
    worker.stop()
    for p in procs:
        p.join()
    key = names.samples_key
    first, last = store.xrange(key, count=1)[0][0], store.xrevrange(key, count=1)[0][0]
    seconds = (int(last.split(b"-")[0]) - int(first.split(b"-")[0])) / 1000
    joined = int(store.hget(names.served_key, "labels") or 0)
    return {
        "mode": "labels",
        "subscriber": "ingest process (label join)",
        "samples/msg": 100,
        "messages": each * pubs,
        "seconds": seconds,
        "labels/s": labels / seconds,
        "labels scored": joined,
        "cpu us/msg": cpu / (each * pubs) * 1e6,
    }
