"""The serving bench's HTTP side: a lean Open Inference Protocol load generator.

As `bench.loadgen` does for MQTT, it takes as little of the shared CPU as it can: a
request is prebuilt bytes on a kept-alive connection, a response is read by its
Content-Length, all on one asyncio loop in a thread of its own. HTTP/1.1 has one request
in flight per connection, so `connections` bounds the requests in flight: the open loop
sends each request at its scheduled time on a free connection, and its latency counts from
that time (a request waiting for a connection waits on the clock).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import numpy as np

CONNECTIONS = 32


def infer_body(rows: list[list[float]]) -> list[bytes]:
    """One Open Inference Protocol request per row (`x` of shape [1, inputs])."""
    return [
        json.dumps(
            {"inputs": [{"name": "x", "shape": [1, len(r)], "datatype": "FP32", "data": r}]}
        ).encode()
        for r in rows
    ]


def _request(port: int, path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, packet: bytes
) -> bool:
    """Send one request and read its response; whether it was a 200."""
    writer.write(packet)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status == 200


async def _open_loop(
    port: int, packets: list[bytes], rate: float, connections: int
) -> tuple[np.ndarray, int]:
    count = len(packets)
    lat = np.full(count, np.inf)
    errors = 0
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while (item := await queue.get()) is not None:
            i, scheduled = item
            if await _exchange(reader, writer, packets[i]):
                lat[i] = (time.monotonic() - scheduled) * 1000
            else:
                errors += 1
        writer.close()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    start = time.monotonic() + 0.05
    for i in range(count):
        scheduled = start + i / rate
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((i, scheduled))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.wait_for(asyncio.gather(*workers), timeout=10)
    return lat, errors


async def _closed_loop(
    port: int, packets: list[bytes], connections: int, warmup_s: float, secs: float
) -> int:
    """Replies counted inside the `secs` after `warmup_s`, every connection kept busy."""
    start = time.monotonic() + warmup_s
    end = start + secs
    counted = 0

    async def worker(k: int) -> None:
        nonlocal counted
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = k
        while time.monotonic() < end:
            ok = await _exchange(reader, writer, packets[i % len(packets)])
            if ok and start <= time.monotonic() < end:
                counted += 1
            i += connections
        writer.close()

    await asyncio.gather(*(worker(k) for k in range(connections)))
    return counted


def measure_rate(port: int, path: str, bodies: list[bytes], rate: int, secs: float) -> dict:
    """Open loop at `rate` requests/s: latency from each request's scheduled send."""
    count = int(rate * secs)
    packets = [_request(port, path, bodies[i % len(bodies)]) for i in range(count)]
    lat, errors = asyncio.run(_open_loop(port, packets, rate, CONNECTIONS))
    return rate_row(rate, lat, errors)


def rate_row(rate: int, lat: np.ndarray, errors: int) -> dict:
    """An open loop's row: milliseconds per request (inf: unanswered) and error replies."""
    count = len(lat)
    ok = lat[np.isfinite(lat)]

    def pct(q: float) -> float | None:
        value = float(np.percentile(lat, q, method="higher"))
        return None if np.isinf(value) else value

    return {
        "load": f"{rate}/s",
        "sent": count,
        "answered": len(ok),
        "errors": errors,
        "timed_out": count - len(ok) - errors,
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": float(ok.max()) if len(ok) == count else None,
    }


def measure_max(port: int, path: str, bodies: list[bytes], secs: float) -> dict:
    """Closed loop: `CONNECTIONS` requests in flight, one per connection."""
    packets = [_request(port, path, body) for body in bodies]
    counted = asyncio.run(_closed_loop(port, packets, CONNECTIONS, 0.5, secs))
    return {
        "load": f"max ({CONNECTIONS} connections)",
        "counted": counted,
        "seconds": secs,
        "replies_per_s": counted / secs,
    }


def scrape(metrics_port: int) -> dict[str, float]:
    """The actor's batch figures from its /metrics: batches, shared batches, and the batch
    size histogram's cumulative buckets (`le` -> count)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("streamlearn_actor_batches_total"):
            out["batches"] = float(line.split()[-1])
        elif line.startswith("streamlearn_actor_shared_batches_total"):
            out["shared"] = float(line.split()[-1])
        elif line.startswith("streamlearn_actor_batch_size_bucket"):
            le = line.split('le="')[1].split('"')[0]
            out[f"le {le}"] = float(line.split()[-1])
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}
