"""Serving benchmark: latency under open-loop load, maximum throughput, and freshness.

One run over real MQTT and Redis (its own mosquitto and redis-server, loopback only):

1. Three actors serve the demo model, each a `streamlearn actor` process (the same worker,
   MQTT path and replies), each on its own topics: the batching actor (the library's
   defaults); the same actor with `max_batch = 1`, so one request per pass of the same
   compiled forward function (the fair baseline: only batching differs); and one calling
   `model.predict` per request, as a first attempt would.
2. The actors take turns: each open-loop rate is measured on every actor before the next
   rate (latency from each request's scheduled send time, so a stalled actor cannot hide
   its backlog), then `--rounds` rounds of maximum throughput (a closed loop keeping
   `--window` requests in flight), the actors' order rotating each round; the median per
   actor counts. An actor that saturates is restarted, so it carries no backlog over.
3. Freshness: ingest, learner and actor processes with default settings; the time from a
   sample's publish to the first reply served with a version trained on it, over every
   sample published after the warm-up.
4. Reload cost in this process: staging a version (background) and the swap (serving
   path); and the retraces of serving, counted as runs of the models' Python forward code
   (each trace or eager call runs it), for every batch size from 1 to 2 max_batch + 2.

    .venv/bin/python -m bench.serve          # about 4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis

from bench import _freshness
from bench._report import report
from bench._stack import Proc, Stack, broker
from bench.loadgen import LoadClient, closed_loop, open_loop
from streamlearn import embedded
from streamlearn.actor import Actor
from streamlearn.config import DEMO_TOML, ModelConfig, parse_config
from streamlearn.demo import DemoStream
from streamlearn.names import Names
from streamlearn.redis_client import connect

# label, actor table overrides
VARIANTS = {
    "batching": ("dynamic batching (library)", ""),
    "per_request": ("same forward pass, one request each", "max_batch = 1"),
    "predict": ("model.predict per request", "max_batch = 1"),
}


class PredictEachActor(Actor):
    """Baseline: `model.predict` on each request, as a first attempt would."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.model.predict(x, verbose=0)


def _config(actor_table: str) -> ModelConfig:
    toml = DEMO_TOML + (f"\n[models.demo.actor]\n{actor_table}\n" if actor_table else "")
    return parse_config(tomllib.loads(toml)).model("demo")


def _request_payloads(cfg: ModelConfig, n: int = 256) -> list[bytes]:
    x = DemoStream(cfg, seed=1).sample(n).x
    return [json.dumps({"x": row.tolist()}).encode() for row in x]


def _publish_weights(stack: Stack, cfg: ModelConfig, names: Names, version: int) -> None:
    from streamlearn import codec, models
    from streamlearn.weights import WeightsStore

    arrays = models.get_arrays(models.build_model(cfg))
    store = WeightsStore(connect(stack.redis_url), names)
    store.publish(codec.encode(arrays), after=version - 1)


def _wait_serving(stack: Stack, names: Names, timeout_s: float = 60) -> None:
    client, topic = stack.client(names), names.predict_topic
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            client.send(client.request(topic, b'{"x": [0,0,0,0,0,0,0,0,0]}', b"probe"))
            time.sleep(0.2)
            if any(b'"version"' in r.payload for r in client.replies):
                return
        raise RuntimeError("the actor never served a prediction")
    finally:
        client.close()


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


def _pct(lat: np.ndarray, q: float) -> float | None:
    value = float(np.percentile(lat, q, method="higher"))
    return None if np.isinf(value) else value


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
    ok = lat[np.isfinite(lat)]
    return {
        "load": f"{rate}/s",
        "sent": count,
        "answered": len(ok),
        "errors": errors,
        "timed_out": count - len(ok) - errors,
        "p50_ms": _pct(lat, 50),
        "p99_ms": _pct(lat, 99),
        "max_ms": float(ok.max()) if len(ok) == count else None,
    }


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


class _Served:
    """One actor variant: its process, topics and how to restart it."""

    def __init__(self, stack: Stack, variant: str) -> None:
        self.variant, self.label = variant, VARIANTS[variant][0]
        self.stack, self.prefix = stack, f"serve-{variant}"
        self.names = Names("demo", self.prefix, self.prefix)
        table = VARIANTS[variant][1]
        config = stack.workdir / f"{variant}.toml"
        config.write_text(DEMO_TOML + (f"\n[models.demo.actor]\n{table}\n" if table else ""))
        self.argv = ["bench.serve", "--serve", variant, "--config", str(config)]
        _publish_weights(stack, _config(table), self.names, 1)
        self.proc = self.start()

    def start(self) -> Proc:
        proc = self.stack.start(self.argv, self.prefix)
        try:
            _wait_serving(self.stack, self.names)
        except RuntimeError as exc:
            raise RuntimeError(f"{self.label}: {exc}\n{proc.output[-2000:]}") from None
        return proc

    def restart(self) -> None:
        self.proc.stop(kill=True)  # without its backlog
        self.proc = self.start()


def serve_benchmark(stack: Stack, args: argparse.Namespace) -> tuple[list[dict], dict]:
    """Every actor runs at once, idle but for the one being measured: they take turns."""
    payloads = _request_payloads(_config(""))
    actors = [_Served(stack, variant) for variant in VARIANTS]
    rows: list[dict] = []
    saturated: dict[str, str] = {}
    try:
        for r, rate in enumerate(args.rates):
            for a in _turns(actors, r):
                if a.variant in saturated:
                    rows.append(
                        {"actor": a.label, "load": f"{rate}/s", "note": saturated[a.variant]}
                    )
                    continue
                row = measure_rate(stack, a.names, payloads, rate, args.seconds)
                rows.append({"actor": a.label, **row})
                print(
                    f"  {a.label} @ {rate}/s: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
                    f"answered {row['answered']} of {row['sent']}",
                    flush=True,
                )
                if row["timed_out"] or row["errors"] or (row["p99_ms"] or 0) > 1000:
                    saturated[a.variant] = f"skipped: saturated at {rate}/s"
                    a.restart()
        rounds: dict[str, list[float]] = {a.variant: [] for a in actors}
        for r in range(args.rounds):
            for a in _turns(actors, r):
                row = measure_max(stack, a.names, payloads, args.window, args.max_seconds)
                rounds[a.variant].append(row["replies_per_s"])
                rows.append({"actor": a.label, **row, "round": r + 1})
                print(
                    f"  {a.label} round {r + 1}: {row['replies_per_s']:.0f} replies/s", flush=True
                )
                if row["replies"] < row["sent"] - args.window:
                    a.restart()  # replies still due would land in the next one's turn
    finally:
        for a in actors:
            a.proc.stop(kill=True)
    maxima = {v: float(np.median(values)) for v, values in rounds.items()}
    return rows, {"median": maxima, "rounds": rounds}


def _turns(actors: list[_Served], r: int) -> list[_Served]:
    """The actors in a rotated order: none always goes first (or last)."""
    k = r % len(actors)
    return actors[k:] + actors[:k]


def reload_cost(stack: Stack, reloads: int = 30) -> dict:
    """Staging (background thread) against the swap (serving thread), in this process."""
    from streamlearn import codec, models
    from streamlearn.weights import WeightsStore

    cfg = _config("")
    names = Names("demo", "reload", "reload")
    store = WeightsStore(redis.Redis.from_url(stack.redis_url), names)
    actor = Actor(cfg, store, names, lambda *_: None)
    arrays = models.get_arrays(actor.model)
    stage, swap, assign = [], [], []
    for version in range(1, reloads + 1):
        shifted = {k: v + np.float32(version * 1e-3) for k, v in arrays.items()}
        store.publish(codec.encode(shifted))
        t = time.perf_counter()
        actor.reloader.poll(block=True)
        stage.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        actor.reload()
        swap.append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        spare = actor.reloader._spares["base"][0]
        models.set_arrays(spare, shifted)  # what a swap by assignment costs
        assign.append((time.perf_counter() - t) * 1000)
    runs = _count_forward_code(actor)
    for n in range(1, 2 * cfg.actor.max_batch + 3):
        actor.predict(np.zeros((n, *cfg.sample_shape), np.float32))
    return {
        "stage_ms_p50": float(np.median(stage)),
        "swap_us_p50": float(np.median(swap)),
        "swap_us_max": float(np.max(swap)),
        "assign_in_place_ms_p50": float(np.median(assign)),
        "retraces_after_warmup": runs[0],
        "batch_sizes_checked": 2 * cfg.actor.max_batch + 2,
        "version": actor.version,
    }


def _count_forward_code(actor: Actor) -> list[int]:
    """From now on, count the runs of the Python forward code of every model the actor may
    serve: a compiled pass runs none, a trace or an eager call runs it once."""
    runs = [0]
    for forward in actor._forward.values():
        model, call = forward.model, forward.model.call

        def counting(*a: object, _call: Callable = call, **k: object) -> object:
            runs[0] += 1
            return _call(*a, **k)

        object.__setattr__(model, "call", counting)  # past Keras' attribute tracking
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="200,500,1000", help="open-loop requests/s")
    parser.add_argument("--seconds", type=float, default=5.0, help="per open-loop rate")
    parser.add_argument("--window", type=int, default=256, help="closed-loop requests in flight")
    parser.add_argument("--max-seconds", type=float, default=3.0, help="closed-loop duration")
    parser.add_argument("--rounds", type=int, default=3, help="closed-loop turns per actor")
    parser.add_argument("--fresh-rate", type=float, default=100.0, help="samples/s published")
    parser.add_argument("--fresh-seconds", type=float, default=12.0)
    parser.add_argument("--fresh-warmup", type=float, default=2.0, help="seconds not counted")
    parser.add_argument("--nagle", action="store_true", help="broker without TCP_NODELAY")
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:  # a child: one actor variant through the real worker
        from workers import actor as worker

        actor_class = PredictEachActor if args.serve == "predict" else Actor
        return worker.main(["--config", args.config, "--instance", args.serve], actor_class)
    args.rates = [int(r) for r in args.rates.split(",")]

    started = time.monotonic()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        with (
            broker(work / "mqtt", args.nagle) as mqtt,
            embedded.redis_server(workdir=work / "redis") as store,
        ):
            stack = Stack(mqtt.port, store.port, work)
            print("serving: open loop and closed loop per actor", flush=True)
            rows, throughput = serve_benchmark(stack, args)
            print("freshness: ingest + learner + actor, default settings", flush=True)
            fresh = _freshness.measure(stack, args)
            print("reload cost", flush=True)
            reload = reload_cost(stack)

    rows.append(
        {
            "actor": "freshness: ingest+learner+actor",
            "load": f"{args.fresh_rate:g} samples/s",
            "sent": fresh["eligible"],  # after the warm-up
            "answered": fresh["measured"],
            "timed_out": fresh["eligible"] - fresh["measured"],
            "p50_ms": fresh["p50_ms"],
            "p99_ms": fresh["p99_ms"],
            "max_ms": fresh["max_ms"],
            "note": "publish -> first reply by a version trained on it",
        }
    )
    by = {(r["actor"], r["load"]): r for r in rows}
    batching = VARIANTS["batching"][0]
    p99_500 = by.get((batching, "500/s"), {}).get("p99_ms")
    maxima = throughput["median"]
    ratio = maxima["batching"] / max(maxima["per_request"], 1e-9)
    clean = all(
        r.get("timed_out") == 0 and r.get("errors") == 0
        for r in rows
        if r["actor"] == batching and "sent" in r and "/s" in r["load"] and "max" not in r["load"]
    )
    checks = {
        f"batching p99 at 500 req/s <= 20 ms (got {p99_500 or float('inf'):.1f} ms)": (
            p99_500 is not None and p99_500 <= 20
        ),
        f"batching max throughput >= 3x the same forward pass per request (got {ratio:.2f}x)": (
            ratio >= 3
        ),
        "batching: no failed or timed-out request at any rate": clean,
        f"freshness p50 <= 300 ms (got {fresh['p50_ms'] or float('inf'):.0f} ms)": (
            fresh["p50_ms"] is not None and fresh["p50_ms"] <= 300
        ),
        f"freshness: every sample served by a version trained on it "
        f"({fresh['measured']} of {fresh['eligible']})": (
            fresh["eligible"] > 0 and fresh["measured"] == fresh["eligible"]
        ),
        f"no retrace while serving after warm-up, batch sizes 1..{reload['batch_sizes_checked']} "
        f"(got {reload['retraces_after_warmup']})": (reload["retraces_after_warmup"] == 0),
    }
    meta = {
        "max_throughput_per_s": throughput,
        "freshness": fresh,
        "reload": reload,
        "load_average": {"start": load, "end": os.getloadavg()[0]},
        "broker": "mosquitto default (Nagle)" if args.nagle else "set_tcp_nodelay true",
        "wall_s": round(time.monotonic() - started, 1),
        "settings": {k: v for k, v in vars(args).items() if k not in ("serve", "config")},
    }
    print(f"\nload average {load:.2f} at start, {os.getloadavg()[0]:.2f} at the end")
    print(f"freshness: {fresh}")
    print(f"reload: {reload}\n")
    report("serve", rows, checks, **meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
