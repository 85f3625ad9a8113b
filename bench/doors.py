"""The actor's doors under NVIDIA's own clients: tritonclient over HTTP and gRPC, and MQTT.

What perf_analyzer would show (it is not on PyPI, but as a placeholder), with the client
it is built on: one real actor (its own mosquitto and redis-server, loopback only, a
published version, the HTTP and gRPC doors open), its model config as `get_model_config`
reads it over HTTP and over gRPC, then a closed loop on each door at 1, 8 and 64 requests
in flight (`tritonclient.http.aio`, `tritonclient.grpc.aio`; one row a request, each
request followed by the next at once), and the same on one gRPC stream (`stream_infer`,
Triton's streaming API, as perf_analyzer's `--streaming`): requests/s, p50 and p99 of
each. Last, the same rows asked over HTTP, gRPC, a gRPC stream and MQTT
(`streamlearn.Client`) must get the same answers from the same version, within 1e-5.

The figures are the client's as much as the actor's: tritonclient spends its own CPU on
each request, on the same 2 cores (`bench.serve` measures the doors with lean load
generators instead).

    .venv/bin/python -m bench.doors          # about a minute on 2 cores
    .venv/bin/python -m bench.doors --quick  # a smoke: 1 s a door and level, not recorded
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as triton_http
import tritonclient.http.aio as http_aio

from bench._report import exit_status, report
from bench._serve_actors import actor_config, wait_serving
from bench._stack import Stack, broker
from streamlearn import Client
from streamlearn.config import DEMO_TOML
from streamlearn.contract.names import Names
from streamlearn.stack import embedded
from streamlearn.stack.demo import DemoStream
from streamlearn.store.redis_client import connect

MODEL = "demo"
PREFIX = "doors"
TOLERANCE = 1e-5
DOORS = ("HTTP", "gRPC", "gRPC stream")


class Actor:
    """One actor process with every door open, its version 1 published."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.names = Names(MODEL, PREFIX, PREFIX)
        self.http_port, self.grpc_port = embedded.free_port(), embedded.free_port()
        config = stack.workdir / "doors.toml"
        config.write_text(
            f"{DEMO_TOML}\n[models.demo.actor]\n"
            f"http_port = {self.http_port}\ngrpc_port = {self.grpc_port}\n"
        )
        publish_random_weights(stack, self.names)
        self.proc = stack.start(["workers.actor", "--config", str(config)], PREFIX)
        wait_serving(stack, self.names)

    def url(self, door: str) -> str:
        return f"127.0.0.1:{self.http_port if door == 'HTTP' else self.grpc_port}"


def publish_random_weights(stack: Stack, names: Names) -> None:
    """Version 1: the demo model with weights drawn at random (its initial ones answer 0.5
    to every row, which would make any two doors agree)."""
    from streamlearn.nn import networks
    from streamlearn.online import codec, tensors
    from streamlearn.store.weights import WeightsStore

    template = tensors.get_arrays(networks.build_model(actor_config("")))
    rng = np.random.default_rng(1)
    arrays = {
        path: (a if "standardize" in path or "alpha" in path else rng.normal(0, 0.7, a.shape))
        for path, a in template.items()
    }
    arrays = {path: a.astype(template[path].dtype) for path, a in arrays.items()}
    WeightsStore(connect(stack.redis_url), names).publish(codec.encode(arrays), after=0)


def model_configs(actor: Actor) -> dict[str, dict[str, Any]]:
    """`get_model_config` over each door, as the fields both carry (gRPC's JSON writes
    int64 dims as strings)."""
    http = triton_http.InferenceServerClient(actor.url("HTTP"))
    grpc = triton_grpc.InferenceServerClient(actor.url("gRPC"))
    try:
        raw = {
            "HTTP": http.get_model_config(MODEL),
            "gRPC": grpc.get_model_config(MODEL, as_json=True)["config"],
        }
    finally:
        http.close()
        grpc.close()

    def tensors(config: dict[str, Any], key: str) -> list[tuple[str, str, list[int]]]:
        return [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config[key]]

    return {
        door: {
            "name": config["name"],
            "max_batch_size": int(config["max_batch_size"]),
            "input": tensors(config, "input"),
            "output": tensors(config, "output"),
        }
        for door, config in raw.items()
    }


def answers(actor: Actor, x: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """The same rows, one request per door: (the version that answered, y per row)."""
    http = triton_http.InferenceServerClient(actor.url("HTTP"))
    grpc = triton_grpc.InferenceServerClient(actor.url("gRPC"))
    mqtt = Client(f"mqtt://{actor.stack.host}:{actor.stack.mqtt_port}", topic_prefix=PREFIX)
    try:
        out: dict[str, tuple[str, np.ndarray]] = {}
        for door, client, module in (("HTTP", http, triton_http), ("gRPC", grpc, triton_grpc)):
            tensor = module.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            result = client.infer(MODEL, [tensor])
            response = result.get_response()
            version = response["model_version"] if door == "HTTP" else response.model_version
            out[door] = (str(version), result.as_numpy("y").reshape(len(x), -1))
        out["gRPC stream"] = asyncio.run(streamed(actor, x))
        reply = mqtt.request(MODEL, {"x": x.tolist()})
        out["MQTT"] = (str(reply["version"]), np.asarray(reply["y"]).reshape(len(x), -1))
        return out
    finally:
        http.close()
        grpc.close()
        mqtt.close()


async def streamed(actor: Actor, x: np.ndarray) -> tuple[str, np.ndarray]:
    """The rows of `x` on one stream, a request each (their ids: their rows)."""
    client = grpc_aio.InferenceServerClient(actor.url("gRPC"))

    async def requests() -> Any:
        for i, row in enumerate(x):
            tensor = triton_grpc.InferInput("x", [1, x.shape[1]], "FP32")
            tensor.set_data_from_numpy(row[None, :])
            yield {"model_name": MODEL, "inputs": [tensor], "request_id": str(i)}

    y, versions = np.full((len(x), 1), np.nan, np.float32), set()
    try:
        async for result, error in client.stream_infer(inputs_iterator=requests()):
            if error is not None:
                raise error
            response = result.get_response()
            y[int(response.id)] = result.as_numpy("y")[0]
            versions.add(response.model_version)
    finally:
        await client.close()
    return ",".join(sorted(versions)), y


async def stream_loop(
    client: Any, inputs: list[list[Any]], in_flight: int, warmup_s: float, secs: float
) -> dict[str, Any]:
    """As `closed_loop`, on one stream of tritonclient.grpc.aio's: `in_flight` requests
    unanswered, each answer followed by the next request (without ids, so as not to keep
    each prediction for a label: one stream's answers come in the order sent)."""
    start = time.monotonic() + warmup_s
    end = start + secs
    slots = asyncio.Semaphore(in_flight)
    sent: deque[float] = deque()
    latencies: list[float] = []
    failed: list[str] = []

    async def requests() -> Any:
        i = 0
        while time.monotonic() < end:
            await slots.acquire()
            sent.append(time.monotonic())
            yield {"model_name": MODEL, "inputs": inputs[i % len(inputs)]}
            i += 1

    async for _result, error in client.stream_infer(inputs_iterator=requests()):
        slots.release()
        at, done = sent.popleft(), time.monotonic()
        if error is not None:
            failed.append(f"{type(error).__name__}: {error}"[:200])
        elif start <= at and done < end:
            latencies.append((done - at) * 1000)
    return _figures(latencies, failed, secs)


async def closed_loop(
    client: Any, inputs: list[list[Any]], in_flight: int, warmup_s: float, secs: float
) -> dict[str, Any]:
    """`in_flight` callers on `client` (tritonclient's, either door), each sending its
    next request as its last is answered: the requests answered inside the `secs` after
    `warmup_s`, their latencies, the failures."""
    start = time.monotonic() + warmup_s
    end = start + secs
    latencies: list[float] = []
    failed: list[str] = []

    async def caller(k: int) -> None:
        i = k
        while (sent := time.monotonic()) < end:
            try:
                await client.infer(MODEL, inputs[i % len(inputs)])
            except Exception as exc:  # an error status or a broken connection: counted
                failed.append(f"{type(exc).__name__}: {exc}"[:200])
            else:
                done = time.monotonic()
                if start <= sent and done < end:
                    latencies.append((done - sent) * 1000)
            i += in_flight

    await asyncio.gather(*(caller(k) for k in range(in_flight)))
    return _figures(latencies, failed, secs)


def _figures(latencies: list[float], failed: list[str], secs: float) -> dict[str, Any]:
    lat = np.asarray(latencies)
    return {
        "requests": len(lat),
        "failed": len(failed),
        "per_s": len(lat) / secs,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
        "first_failure": failed[0] if failed else None,
    }


async def load(actor: Actor, x: np.ndarray, levels: list[int], secs: float) -> list[dict]:
    """Each door at each number of requests in flight, one row of `x` a request."""
    rows = []
    for door, client_module, module in (
        ("HTTP", http_aio, triton_http),
        ("gRPC", grpc_aio, triton_grpc),
        ("gRPC stream", grpc_aio, triton_grpc),
    ):
        inputs = []
        for row in x:
            tensor = module.InferInput("x", [1, x.shape[1]], "FP32")
            tensor.set_data_from_numpy(row[None, :])
            inputs.append([tensor])
        for in_flight in levels:
            options = {"conn_limit": in_flight} if door == "HTTP" else {}
            client = client_module.InferenceServerClient(actor.url(door), **options)
            loop = stream_loop if door == "gRPC stream" else closed_loop
            try:
                result = await loop(client, inputs, in_flight, 0.5, secs)
            finally:
                await client.close()
            row = {"door": door, "client": client_module.__name__, "in flight": in_flight}
            rows.append({**row, **result})
            print(
                f"  {door} at {in_flight} in flight: {result['per_s']:.0f} requests/s, "
                f"p50 {result['p50_ms'] or 0:.2f} ms, p99 {result['p99_ms'] or 0:.2f} ms, "
                f"{result['failed']} failed",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.doors", description=__doc__.split("\n")[0])
    parser.add_argument("--in-flight", default="1,8,64", help="requests in flight, per run")
    parser.add_argument("--seconds", type=float, default=4.0, help="per door and level")
    parser.add_argument("--rows", type=int, default=64, help="rows asked of every door")
    parser.add_argument("--quick", action="store_true", help="1 s a door and level, not recorded")
    args = parser.parse_args(argv)
    if args.quick:  # shorter defaults; options given still count
        parser.set_defaults(seconds=1.0)
        args = parser.parse_args(argv)
    levels = [int(n) for n in args.in_flight.split(",")]
    x = DemoStream(actor_config(""), seed=2).sample(args.rows).x.astype(np.float32)

    started = time.monotonic()
    load_average = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-doors-") as tmp:
        work = Path(tmp)
        with (
            broker(work / "mqtt", nagle=False) as mqtt,
            embedded.redis_server(workdir=work / "redis") as store,
        ):
            actor = Actor(Stack(mqtt.port, store.port, work))
            try:
                print("get_model_config over HTTP and gRPC", flush=True)
                configs = model_configs(actor)
                for door, config in configs.items():
                    print(f"  {door}: {config}", flush=True)
                print(f"closed loops: {levels} requests in flight, {args.seconds:g} s each")
                rows = asyncio.run(load(actor, x, levels, args.seconds))
                print(f"the same {len(x)} rows over HTTP, gRPC, a gRPC stream and MQTT", flush=True)
                given = answers(actor, x)
            finally:
                actor.proc.stop()

    versions = {door: version for door, (version, _) in given.items()}
    mqtt_y = given["MQTT"][1]
    diff = max(float(np.abs(y - mqtt_y).max()) for _, y in given.values())
    for door, (version, y) in given.items():
        print(f"  {door}: version {version}, y[:3] {y[:3, 0].round(6).tolist()}")
    failed = sum(r["failed"] for r in rows)
    checks = {
        f"the same {len(x)} rows get the same answers over HTTP, gRPC, a gRPC stream and MQTT "
        f"within "
        f"{TOLERANCE:g}, from the same version (largest difference {diff:.2g}; versions "
        f"{versions})": diff <= TOLERANCE and len(set(versions.values())) == 1,
        f"no failed request over any door at {args.in_flight} in flight (got {failed})": (
            failed == 0 and all(r["requests"] > 0 for r in rows)
        ),
        "get_model_config: the same config over HTTP and gRPC": (
            configs["HTTP"] == configs["gRPC"]
        ),
    }
    figures: dict[str, Any] = {"largest_difference": diff}
    for r in rows:
        name = f"{r['door']} {r['in flight']} in flight"
        figures[f"{name}: requests/s"] = r["per_s"]
        figures[f"{name}: p50 ms"] = r["p50_ms"]
        figures[f"{name}: p99 ms"] = r["p99_ms"]
    print(f"\nload average {load_average:.2f} at start, {os.getloadavg()[0]:.2f} at the end\n")
    report(
        "doors",
        rows,
        checks,
        quick=args.quick,
        figures=figures,
        configs=configs,
        load_average={"start": load_average, "end": os.getloadavg()[0]},
        wall_s=round(time.monotonic() - started, 1),
        settings=vars(args),
    )
    return exit_status(checks)


if __name__ == "__main__":
    raise SystemExit(main())
