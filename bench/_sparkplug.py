"""The Sparkplug B cases of `bench.ingest`. `run_sparkplug_ingest`: a plant's DDATA queued
at the broker, through a real ingest process, against the raw subscriber. `run_sparkplug`,
in-process and without a broker: DDATA decoded (`streamlearn.contract.sparkplug`) and
resolved against the nodes' shared state in Redis (`streamlearn.store.sparkplug`), one
message per round trip and a batch per round trip, against decoding alone: what
Sparkplug adds to a message's cost in ingest.

    .venv/bin/python -m bench._sparkplug [--messages 20000]   # its own redis-server
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from streamlearn.contract.names import Names
from streamlearn.contract.sparkplug.payloads import decode
from streamlearn.contract.sparkplug.proto import sparkplug_b_pb2 as pb
from streamlearn.contract.sparkplug.topics import parse_topic
from streamlearn.store.sparkplug import SparkplugNodes

NODES, DEVICES, METRICS, CHANGED = 10, 20, 8, 3  # a DDATA carries 3 of its device's 8 metrics
FLOAT = 9


def _births(nodes: SparkplugNodes, now: float) -> dict[str, int]:
    """Every node's NBIRTH and its devices' DBIRTHs; each node's next seq."""
    seqs = {}
    for n in range(NODES):
        birth = pb.Payload(timestamp=int(now * 1000), seq=0)
        birth.metrics.add(name="bdSeq", datatype=4, long_value=0)
        nodes.handle(
            parse_topic(f"spBv1.0/bench/NBIRTH/n{n}"), decode(birth.SerializeToString()), now
        )
        for d in range(DEVICES):
            p = pb.Payload(timestamp=int(now * 1000), seq=d + 1)
            for m in range(METRICS):
                p.metrics.add(name=f"m{m}", alias=m, datatype=FLOAT, float_value=0.0)
            topic = parse_topic(f"spBv1.0/bench/DBIRTH/n{n}/d{d}")
            nodes.handle(topic, decode(p.SerializeToString()), now)
        seqs[f"n{n}"] = (DEVICES + 1) % 256
    return seqs


def _messages(count: int, seqs: dict[str, int]) -> list[tuple[str, bytes]]:
    """DDATA of `CHANGED` metrics by alias, round-robin over nodes and devices."""
    out = []
    for i in range(count):
        node = f"n{i % NODES}"
        p = pb.Payload(timestamp=1_700_000_000_000 + i, seq=seqs[node])
        seqs[node] = (seqs[node] + 1) % 256
        for k in range(CHANGED):
            alias = (i + k) % METRICS
            p.metrics.add(alias=alias, timestamp=1_700_000_000_000 + i, float_value=i * 0.5)
        out.append((f"spBv1.0/bench/DDATA/{node}/d{i // NODES % DEVICES}", p.SerializeToString()))
    return out


def run_sparkplug(store: redis.Redis, messages: int = 20_000, batch: int = 100) -> dict:
    """Messages/s: decoding alone; decoding and resolving one message per round trip; and
    `batch` messages per round trip (what ingest's batches of MQTT messages allow)."""
    names = Names("sparkplug-bench", "bench")
    for key in store.scan_iter(names.sparkplug_key("*")):
        store.delete(key)
    nodes = SparkplugNodes(store, names)
    now = time.time()
    seqs = _births(nodes, now)
    data = _messages(2 * messages, seqs)
    first, second = data[:messages], data[messages:]

    t = time.perf_counter()
    for topic, payload in first:
        parse_topic(topic), decode(payload)
    decoded_s = time.perf_counter() - t

    t = time.perf_counter()
    for topic, payload in first:
        h = nodes.handle(parse_topic(topic), decode(payload), now)
    single_s = time.perf_counter() - t
    assert h.status == "ok" and len(h.values) == CHANGED, h

    t = time.perf_counter()
    for start in range(0, messages, batch):
        chunk = [(parse_topic(tp), decode(pl)) for tp, pl in second[start : start + batch]]
        out = nodes.handle_many(chunk, now)
    batched_s = time.perf_counter() - t
    assert all(h.status == "ok" and h.rebirth is None for h in out), out[-1]
    return {
        "messages": messages,
        "metrics_per_message": CHANGED,
        "decode_msgs_per_s": round(messages / decoded_s),
        "resolve_msgs_per_s": round(messages / single_s),
        f"resolve_batched_{batch}_msgs_per_s": round(messages / batched_s),
    }


TOML = """
[models.{model}]
inputs = ["m0", "m1", "m2", "m3"]
target = "m4"
task = "regression"

[models.{model}.ingest]
max_backlog_samples = 100_000_000

[models.{model}.assembly]
max_age_s = 600

[[models.{model}.sources]]
topic = "spBv1.0/{model}/#"
format = "sparkplug_b"
"""
EDGES, PRESSES = 5, 10  # edge nodes per publisher, devices per node


def plant(model: str, publisher: int, messages: int) -> list[tuple[str, bytes]]:
    """One publisher's edge nodes as Tahu publishes them: NBIRTH, a DBIRTH per device
    (5 metrics, aliases 0-4), then DDATA of 3 changed metrics by alias, round-robin over
    nodes and devices, every 4th carrying the target (alias 4): a sample."""
    out, seqs = [], {}
    for n in range(EDGES):
        node = f"e{publisher}-{n}"
        birth = pb.Payload(timestamp=1_700_000_000_000, seq=0)
        birth.metrics.add(name="bdSeq", datatype=4, long_value=0)
        out.append((f"spBv1.0/{model}/NBIRTH/{node}", birth.SerializeToString()))
        for d in range(PRESSES):
            p = pb.Payload(timestamp=1_700_000_000_000, seq=d + 1)
            for m in range(5):
                p.metrics.add(name=f"m{m}", alias=m, datatype=FLOAT, float_value=0.5)
            out.append((f"spBv1.0/{model}/DBIRTH/{node}/d{d}", p.SerializeToString()))
        seqs[node] = PRESSES + 1
    for i in range(messages):
        node = f"e{publisher}-{i % EDGES}"
        p = pb.Payload(timestamp=1_700_000_001_000 + i, seq=seqs[node])
        seqs[node] = (seqs[node] + 1) % 256
        for k in range(CHANGED):
            alias = 4 if k == 0 and i % 4 == 0 else (i + k) % 4
            p.metrics.add(alias=alias, timestamp=p.timestamp, float_value=i * 0.25)
        out.append((f"spBv1.0/{model}/DDATA/{node}/d{i // EDGES % PRESSES}", p.SerializeToString()))
    return out


def run_sparkplug_ingest(
    mqtt_port: int,
    store: redis.Redis,
    messages: int,
    pubs: int,
    worker_of: Callable[[str], Any],
    raw_msgs_per_s: float,
    tag: str = "sparkplug",
) -> dict:
    """`messages` DDATA (after their births) queued at the broker while the ingest process
    is away, then resolved, held and assembled: messages/s from the first to the last
    stream entry, against the raw subscriber's backlog rate (`raw_msgs_per_s`)."""
    from bench._assembly import drained

    each = messages // pubs // 4 * 4  # DDATA per publisher, a sample every 4
    streams = [plant(tag, k, each) for k in range(pubs)]
    row = drained(
        mqtt_port, store, tag, TOML.format(model=tag), streams, each // 4 * pubs, worker_of
    )
    sent = each * pubs
    return {
        "mode": "backlog",
        "subscriber": "ingest process, Sparkplug B DDATA (3 metrics by alias)",
        "samples/msg": 0.25,
        "messages": sent,
        "seconds": row["seconds"],
        "msgs/s": sent / row["seconds"],
        "samples/s": each // 4 * pubs / row["seconds"],
        "cpu us/msg": row["cpu s"] / sent * 1e6,
        "vs raw": sent / row["seconds"] / raw_msgs_per_s,
    }


def main() -> None:
    from streamlearn.stack import embedded

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        server = embedded.redis_server(workdir=Path(work) / "redis").start()
        try:
            client = redis.Redis(port=server.port)
            print(json.dumps(run_sparkplug(client, args.messages, args.batch), indent=2))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
