"""The serving bench's load: MQTT requests (`bench.loadgen`), the actor's other doors
(`bench._http`, `bench._grpc`), and HTTP and MQTT at once.

`measure_rate` is an open loop (latency from each request's scheduled send, so a stalled
actor cannot hide its backlog), `measure_max` a closed loop; `mixed` runs MQTT and HTTP
(`bench._http`) open loops at once on one actor and reads from its /metrics how many of
its batches held requests of both doors.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import NamedTuple, Protocol

import numpy as np

from bench import _grpc, _http
from bench._http import delta, rate_row, scrape
from bench._http import measure_rate as http_rate
from bench._stack import Stack
from bench.loadgen import LoadClient, closed_loop, open_loop, without_collection
from streamlearn.contract.names import Names

INFER = "/v2/models/demo/infer"


class Door(Protocol):
    """An actor serving every door: its topics, HTTP, gRPC and metrics ports."""

    names: Names
    http_port: int | None
    grpc_port: int | None
    metrics_port: int | None


class DoorLoad(NamedTuple):
    """How one of an actor's other doors is loaded: an open loop `rate(rate, secs)`, and a
    closed loop `max(secs)` at its most requests in flight."""

    rate: Callable[[int, float], dict]
    max: Callable[[float], dict]


def door_loads(door: Door, model: str, rows: list[list[float]]) -> dict[str, DoorLoad]:
    """The HTTP and gRPC doors' loads (gRPC: unary calls, and one stream), each request
    one of `rows`."""
    assert door.http_port is not None and door.grpc_port is not None
    bodies, messages = _http.infer_body(rows), _grpc.infer_messages(model, rows)
    path = f"/v2/models/{model}/infer"
    return {
        "http": DoorLoad(
            without_collection(partial(http_rate, door.http_port, path, bodies)),
            without_collection(partial(_http.measure_max, door.http_port, path, bodies)),
        ),
        "grpc": DoorLoad(
            without_collection(partial(_grpc.measure_rate, door.grpc_port, messages)),
            without_collection(partial(_grpc.measure_max, door.grpc_port, messages)),
        ),
        "stream": DoorLoad(
            without_collection(partial(_grpc.stream_rate, door.grpc_port, messages)),
            without_collection(partial(_grpc.stream_max, door.grpc_port, messages)),
        ),
    }


def _latencies(scheduled: list[float], client: LoadClient) -> tuple[np.ndarray, int]:
    """Milliseconds per request (inf when unanswered) and how many replies were errors."""
    lat = np.full(len(scheduled), np.inf)
    errors = 0
    for reply in list(client.replies):
        i = int.from_bytes(reply.correlation, "big")
        if b'"error"' in reply.payload:
            errors += 1
        elif 0 <= i < len(lat):
            lat[i] = (reply.at - scheduled[i]) * 1000
    return lat, errors


@without_collection
def measure_rate(stack: Stack, names: Names, payloads: list[bytes], rate: int, secs: float) -> dict:
    client, topic = stack.client(names), names.predict_topic
    count = int(rate * secs)
    packets = [
        client.request(topic, payloads[i % len(payloads)], i.to_bytes(8, "big"))
        for i in range(count)
    ]
    scheduled = open_loop(client, packets, rate)
    deadline = time.monotonic() + 3.0
    while len(client.replies) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    client.close()
    lat, errors = _latencies(scheduled, client)
    return rate_row(rate, lat, errors)


@without_collection
def measure_max(
    stack: Stack, names: Names, payloads: list[bytes], window: int, secs: float
) -> dict:
    client, topic = stack.client(names), names.predict_topic
    warmup = 0.5

    def make(i: int) -> bytes:
        return client.request(topic, payloads[i % len(payloads)], i.to_bytes(8, "big"))

    t0 = time.monotonic()
    sent = closed_loop(client, make, window, warmup + secs)
    client.close()
    start, end = t0 + warmup, t0 + warmup + secs
    done = [r for r in client.replies if start <= r.at < end and b'"error"' not in r.payload]
    return {
        "load": f"max ({window} in flight)",
        "sent": sent,
        "replies": len(client.replies),
        "counted": len(done),  # good replies inside the measured `secs`
        "seconds": secs,
        "replies_per_s": len(done) / secs,
    }


@without_collection
def mixed(
    stack: Stack,
    door: Door,
    payloads: list[bytes],
    bodies: list[bytes],
    rate: int,
    secs: float,
) -> dict:
    """Both doors at once, each at the mixed rate: how many batches held requests of both."""
    assert door.metrics_port is not None and door.http_port is not None
    before = scrape(door.metrics_port)
    result: dict = {}
    mqtt = threading.Thread(
        target=lambda: result.update(measure_rate(stack, door.names, payloads, rate, secs))
    )
    mqtt.start()
    http = http_rate(door.http_port, INFER, bodies, rate, secs)
    mqtt.join()
    time.sleep(0.2)
    batches = delta(scrape(door.metrics_port), before)
    print(
        f"  both doors @ {rate}/s each: {batches['shared']:.0f} of "
        f"{batches['batches']:.0f} batches held HTTP and MQTT requests; "
        f"p99 HTTP {http['p99_ms']} ms, MQTT {result.get('p99_ms')} ms",
        flush=True,
    )
    sizes = {k: v for k, v in batches.items() if k.startswith("le ")}
    return {
        "actor": "both doors: HTTP + MQTT",
        "load": f"{rate}/s each",
        "sent": http["sent"] + result.get("sent", 0),
        "answered": http["answered"] + result.get("answered", 0),
        "errors": http["errors"] + result.get("errors", 0),
        "timed_out": http["timed_out"] + result.get("timed_out", 0),
        "p99_ms": max(http["p99_ms"] or float("inf"), result.get("p99_ms") or float("inf")),
        "batches": batches["batches"],
        "shared_batches": batches["shared"],
        "batch_size_histogram": sizes,
    }
