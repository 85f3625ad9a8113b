"""What one client's hostile HTTP traffic costs everyone else, on a real actor.

The real actor worker (both doors and its metrics server) on a loopback broker and Redis,
five published versions and `kept_versions = 2`. Legitimate MQTT requests run as an open
loop at `LEGIT_RATE`/s while an attacker runs beside them at a fixed rate, one row per
attack. Each attack has a control run in which the same connections, at the same rate,
send valid requests instead (for 1 MiB MQTT requests, a MiB of spaces: no valid request
is that large). Checks: the legitimate p99 under attack is at most `P99_GOAL`
times its control's (floored at `P99_FLOOR_MS`, under which a 2-core machine's scheduling
noise decides), and the actor's peak RSS and threads under attack at most `RSS_GOAL_MB`
and `THREADS_GOAL` over its control's.

The attacks: connections that send 1 MiB minus one byte of a 1 MiB body and stall; 1 MiB
junk bodies (a padded, valid JSON document); requests cycling through five versions, more
than the actor keeps loaded; connections to the metrics server that trickle one byte a
second; connections kept open without the door's bearer token, from one host; 1 MiB MQTT
requests of escaped quotes in an unterminated string (a regular expression once took
minutes over one). The door asks for a token, as `overlays/http-token` deploys it, and a
legitimate HTTP client (another loopback address: another host) asks every 50 ms beside
the MQTT load: under every attack it must be answered (`LegitHttp`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import sys
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench import _serve_load
from bench._hostile_watch import LegitHttp, Usage
from bench._http import infer_body
from bench._stack import Proc, Stack
from bench.loadgen import LoadClient
from streamlearn.config import DEMO_TOML, parse_config
from streamlearn.contract.names import Names
from streamlearn.runtime import settle
from streamlearn.stack import embedded

LEGIT_RATE = 200  # legitimate MQTT requests/s
P99_GOAL = 1.5  # legitimate p99 under attack, at most this times the control's
P99_FLOOR_MS = 5.0  # a control p99 under this counts as this
RSS_GOAL_MB = 100.0  # the actor's peak RSS under attack, at most this over the control's
THREADS_GOAL = 32  # the actor's peak threads under attack, at most this over the control's
MIB = 1 << 20
VERSIONS = 5
INPUTS = 9  # the demo model's


@dataclass(frozen=True)
class Attack:
    """One row: `rate` new connections (or requests) a second, `count` in all."""

    name: str
    rate: float
    count: int
    run: Callable[[Door, int, bool, asyncio.Event], Awaitable[str]]  # -> its outcome


TOKEN = "bench-hostile-token-" * 2  # the door's bearer token (STREAMLEARN_HTTP_TOKEN)


@dataclass(frozen=True)
class Door:
    host: str
    http_port: int
    metrics_port: int
    mqtt_port: int
    predict_topic: str


def _post(path: str, body: bytes, length: int | None = None, token: str | None = TOKEN) -> bytes:
    auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
    )
    return head.encode() + body


VALID = infer_body([[0.5] * INPUTS])[0]
INFER = "/v2/models/demo/infer"


def _junk() -> bytes:
    """A valid JSON document of 1 MiB: one sample padded with a long list of numbers."""
    doc = json.loads(VALID)
    doc["parameters"] = {"pad": [0] * ((MIB - len(VALID) - 32) // 2)}
    return json.dumps(doc, separators=(",", ":")).encode()[:MIB]


def _status(head: bytes) -> str:
    return f"HTTP {head[9:12].decode(errors='replace')}" if head.startswith(b"HTTP/") else "closed"


async def _hold(door: Door, port: int, data: bytes, stop: asyncio.Event) -> str:
    """Open a connection, send `data`, hold it until `stop`; what the server answered
    (`held`: nothing, the connection still open)."""
    try:
        reader, writer = await asyncio.open_connection(door.host, port)
    except OSError:
        return "refused"
    try:
        writer.write(data)
        await writer.drain()
        read = asyncio.ensure_future(reader.read(1 << 16))
        await stop.wait()
        if not read.done():
            read.cancel()
            return "held"
        return _status(read.result())
    except OSError:
        return "closed"
    finally:
        writer.close()


async def _stalled(door: Door, i: int, hostile: bool, stop: asyncio.Event) -> str:
    body = b"[" + b" " * (MIB - 2)  # 1 MiB minus one byte of a 1 MiB body
    data = _post(INFER, body, MIB) if hostile else _post(INFER, VALID)
    return await _hold(door, door.http_port, data, stop)


async def _once(door: Door, data: bytes) -> str:
    try:
        reader, writer = await asyncio.open_connection(door.host, door.http_port)
    except OSError:
        return "refused"
    try:
        writer.write(data)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(h[15:]) for h in head.split(b"\r\n") if h[:15].lower() == b"content-length:"),
            0,
        )
        await reader.readexactly(length)
        return _status(head)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return "closed"
    finally:
        writer.close()


JUNK = _junk()


async def _junk_body(door: Door, i: int, hostile: bool, stop: asyncio.Event) -> str:
    return await _once(door, _post(INFER, JUNK if hostile else VALID))


async def _versions(door: Door, i: int, hostile: bool, stop: asyncio.Event) -> str:
    path = f"/v2/models/demo/versions/{1 + i % VERSIONS}/infer" if hostile else INFER
    return await _once(door, _post(path, VALID))


async def _trickle(door: Door, i: int, hostile: bool, stop: asyncio.Event) -> str:
    scrape = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n"
    if not hostile:
        return await _hold(door, door.metrics_port, scrape, stop)
    try:
        reader, writer = await asyncio.open_connection(door.host, door.metrics_port)
    except OSError:
        return "refused"
    try:
        for byte in scrape * 100:
            if stop.is_set():
                return "held"
            if reader.at_eof():
                return "closed"
            writer.write(bytes([byte]))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
        return "held"
    except OSError:
        return "closed"
    finally:
        writer.close()


async def _unproven(door: Door, i: int, hostile: bool, stop: asyncio.Event) -> str:
    """Hostile: a connection kept open without the token (issue 62, finding 1); control:
    one that asks with it, then is kept open."""
    data = b"" if hostile else _post(INFER, VALID)
    return await _hold(door, door.http_port, data, stop)


QUOTES = b'{"x": ' + b"[" * 20 + b'"' + b'\\"' * ((MIB - 64) // 2)  # unterminated, 1 MiB


async def _quotes(door: Door, i: int, hostile: bool, stop: asyncio.Event) -> str:
    """An MQTT request of 1 MiB of escaped quotes (issue 62, finding 5); control: 1 MiB of
    spaces, the cheapest refusal of a message that size, so the row weighs what reading the
    quotes adds to what carrying a MiB costs. Sent on a connection of its own; the error
    reply is not waited for."""
    client = LoadClient(door.host, door.mqtt_port)
    try:
        payload = QUOTES if hostile else SPACES
        client.send(client.request(door.predict_topic, payload, b"", reply=False))
        return "sent"
    except OSError:
        return "refused"
    finally:
        client.close()


SPACES = b" " * len(QUOTES)

ATTACKS = [
    Attack("stalled 1 MiB bodies", 100, 200, _stalled),
    Attack("1 MiB junk bodies", 20, 100, _junk_body),
    Attack("version cycling (5 versions, 2 kept)", 200, 900, _versions),
    Attack("300 trickling metrics connections", 100, 300, _trickle),
    Attack("300 connections without the token, one host", 100, 300, _unproven),
    Attack("1 MiB MQTT requests of escaped quotes", 10, 40, _quotes),
]


class _Attacker:
    """Runs an attack (or its control) on an asyncio loop in a thread of its own."""

    def __init__(self, door: Door, attack: Attack, hostile: bool) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.door, self.attack, self.hostile = door, attack, hostile
        self.stop: asyncio.Event | None = None
        self.task: concurrent.futures.Future[list[str]] | None = None
        self.outcomes: Counter[str] = Counter()

    async def _main(self) -> list[str]:
        self.stop = asyncio.Event()
        start = time.monotonic()
        tasks = []
        for i in range(self.attack.count):
            delay = start + i / self.attack.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            run = self.attack.run(self.door, i, self.hostile, self.stop)
            tasks.append(asyncio.ensure_future(run))
        return list(await asyncio.gather(*tasks))

    def __enter__(self) -> _Attacker:
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self._main(), self.loop)
        return self

    def __exit__(self, *exc: object) -> None:
        while self.stop is None:
            time.sleep(0.01)
        self.loop.call_soon_threadsafe(self.stop.set)
        assert self.task is not None
        try:
            self.outcomes = Counter(self.task.result(timeout=30))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def _start_actor(stack: Stack, names: Names) -> tuple[Proc, Door]:
    """The demo model's actor with both doors, its bearer token, and `VERSIONS` versions."""
    from bench._serve_actors import publish_weights, wait_serving

    http_port, metrics_port = embedded.free_port(), embedded.free_port()
    toml = DEMO_TOML + f"\n[models.demo.actor]\nhttp_port = {http_port}\nkept_versions = 2\n"
    config = stack.workdir / "hostile-http.toml"
    config.write_text(toml)
    cfg = parse_config(tomllib.loads(toml)).model("demo")
    for version in range(1, VERSIONS + 1):
        publish_weights(stack, cfg, names, version)
    env = stack.env(names.topic_prefix)
    env["STREAMLEARN_METRICS_PORT"] = str(metrics_port)
    env["STREAMLEARN_HTTP_TOKEN"] = TOKEN
    argv = ["workers.actor", "--config", str(config), "--instance", "hostile"]
    proc = Proc([sys.executable, "-m", *argv], env)
    proc.wait_for(" ready")
    wait_serving(stack, names)
    return proc, Door(stack.host, http_port, metrics_port, stack.mqtt_port, names.predict_topic)


def measure(stack: Stack, seconds: float) -> tuple[list[dict], dict[str, bool], dict[str, float]]:
    """One row per attack: legitimate MQTT latency and actor RSS, control and attack."""
    from bench._serve_actors import actor_config, request_payloads

    names = Names("demo", "hostile-http", "hostile-http")
    proc, door = _start_actor(stack, names)
    payloads = request_payloads(actor_config(""))
    # This process imported Keras to publish the versions: without this, a full collection
    # of its heap held the load generator 130-270 ms, the legitimate p99 of a row it fell in.
    settle()
    rows: list[dict] = []
    checks: dict[str, bool] = {}
    figures: dict[str, float] = {}
    try:
        for attack in ATTACKS:
            seen = {}
            for hostile in (False, True):
                with (
                    Usage(proc.proc.pid) as usage,
                    _Attacker(door, attack, hostile) as attacker,
                    LegitHttp(door.host, door.http_port, _post(INFER, VALID)) as legit_http,
                ):
                    time.sleep(0.5)  # the attack is under way
                    load = _serve_load.measure_rate(stack, names, payloads, LEGIT_RATE, seconds)
                seen[hostile] = (load, usage)
                http_p99 = legit_http.p99_ms()
                rows.append(
                    {
                        "attack": attack.name,
                        "run": "attack" if hostile else "control",
                        "legit_p50_ms": load["p50_ms"],
                        "legit_p99_ms": load["p99_ms"],
                        "timed_out": load["timed_out"],
                        "legit_http_ok": legit_http.answered(),
                        "legit_http_p99_ms": None if http_p99 is None else round(http_p99, 1),
                        "actor_rss_mb": round(usage.peak_mb),
                        "actor_threads": usage.peak_threads,
                        "attacker_got": ", ".join(
                            f"{k} x{v}" for k, v in attacker.outcomes.most_common()
                        ),
                    }
                )
                time.sleep(1.0)  # what the attack left settles
            (control, calm), (under, hit) = seen[False], seen[True]
            base = max(control["p99_ms"] or 0.0, P99_FLOOR_MS)
            ratio = (under["p99_ms"] or float("inf")) / base
            grew = hit.peak_mb - calm.peak_mb
            threads = hit.peak_threads - calm.peak_threads
            checks[f"{attack.name}: legitimate MQTT p99 <= {P99_GOAL:g}x control's"] = (
                ratio <= P99_GOAL and under["timed_out"] == 0
            )
            checks[f"{attack.name}: every legitimate HTTP request answered"] = (
                legit_http.statuses[200] == legit_http.statuses.total() > 0  # the attack's
            )
            checks[f"{attack.name}: actor RSS <= control's + {RSS_GOAL_MB:g} MB"] = (
                grew <= RSS_GOAL_MB
            )
            checks[f"{attack.name}: actor threads <= control's + {THREADS_GOAL}"] = (
                threads <= THREADS_GOAL
            )
            figures[f"{attack.name}: p99 x control"] = round(ratio, 2)
            figures[f"{attack.name}: threads over control"] = threads
            figures[f"{attack.name}: RSS over control MB"] = round(grew, 1)
    finally:
        proc.stop(kill=True)
    return rows, checks, figures
