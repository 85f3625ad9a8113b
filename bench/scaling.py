"""Scaling out on this machine: ingest workers and actors, 1 to 4 of each, on a local Redis
Cluster (three masters) and, as the baseline in the same run, on one redis-server.

    .venv/bin/python -m bench.scaling [--messages 3000] [--seconds 4] [--max-workers 4]

About 4 minutes on 2 cores.

Ingest: N `workers.ingest` processes share one subscription (MQTT v5 `$share`); one
publisher sends `--messages` messages of 40 samples with ids (QoS 1, 100 in flight) and the
rate is samples over the time from the first publish to the last sample counted in Redis.
Actors: N `workers.actor` processes share the requests of a closed loop (256 in flight) for
`--seconds`; the rate is good replies per second. Each figure is also given as a ratio to
one worker on the same Redis, and the cluster's to the single server's.

Partitions: one model's stream spread over 1 to 3 partitions (`ingest.partitions`) on the
cluster, two ingest workers, samples/s into Redis as above.

Every process shares the machine's cores with the servers and the load generator, so on a
2-core machine the curves say where the cores run out, not what more hosts would give.
No learner runs: back-pressure is set out of the way (`max_backlog_samples`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

import streamlearn
from bench._report import report
from bench._serve_actors import actor_config, publish_weights, request_payloads, wait_serving
from bench._serve_load import measure_max
from bench._stack import Proc, Stack, broker
from streamlearn.config import DEMO_TOML
from streamlearn.contract.names import Names
from streamlearn.stack import cluster as cluster_lib
from streamlearn.stack import embedded
from streamlearn.store.redis_client import connect

PER_MESSAGE = 40
ONE, CLUSTER = "one server", "cluster, 3 masters"
CONFIG = DEMO_TOML + "\n[models.demo.ingest]\nmax_backlog_samples = 1000000000\n"


def _config_text(partitions: int) -> str:
    return CONFIG + f"partitions = {partitions}\n"


def _payloads(messages: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for m in range(messages):
        x = rng.uniform(-1, 1, (PER_MESSAGE, 9)).round(4)
        ids = [f"{m}-{i}" for i in range(PER_MESSAGE)]
        doc = {"x": x.tolist(), "y": (x[:, 0] > 0).astype(int).tolist(), "ids": ids}
        out.append(json.dumps(doc).encode())
    return out


def _start(stack: Stack, role: str, prefix: str, n: int, partitions: int = 1) -> list[Proc]:
    config = stack.workdir / f"scaling-{prefix}.toml"
    config.write_text(_config_text(partitions))
    argv = [f"streamlearn.{role}.worker", "--config", str(config)]
    return [stack.start([*argv, "--instance", f"{role}{i}"], prefix) for i in range(n)]


def _stop(procs: list[Proc]) -> None:
    for p in procs:
        p.stop()


def ingest_rate(stack: Stack, workers: int, payloads: list[bytes], partitions: int = 1) -> float:
    """Samples per second into Redis through `workers` ingest processes."""
    prefix = f"ing{uuid.uuid4().hex[:6]}"
    names = Names("demo", prefix, prefix)
    procs = _start(stack, "ingest", prefix, workers, partitions)
    store = connect(stack.redis_url)
    want = len(payloads) * PER_MESSAGE
    counts = [names.of_partition(i).ingest_count_key for i in range(partitions)]
    try:
        with streamlearn.Client(f"mqtt://{stack.host}:{stack.mqtt_port}", topic_prefix=prefix) as c:
            t0 = time.monotonic()
            c.publish_payloads("demo", payloads, timeout=60)
            deadline = time.monotonic() + 120
            while sum(int(store.get(key) or 0) for key in counts) < want:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ingest x{workers}: not all samples stored in 120 s")
                time.sleep(0.005)
            return want / (time.monotonic() - t0)
    finally:
        _stop(procs)
        store.close()


def actor_rate(stack: Stack, actors: int, seconds: float) -> float:
    """Good replies per second from `actors` actor processes, 256 requests in flight."""
    prefix = f"act{uuid.uuid4().hex[:6]}"
    names = Names("demo", prefix, prefix)
    publish_weights(stack, actor_config(""), names, 1)
    procs = _start(stack, "actor", prefix, actors)
    try:
        wait_serving(stack, names)
        payloads = request_payloads(actor_config(""))
        return measure_max(stack, names, payloads, 256, seconds)["replies_per_s"]
    finally:
        _stop(procs)


def curves(stacks: dict[str, Stack], args: argparse.Namespace) -> list[dict]:
    """Each worker count on each Redis in turn, so that a slow phase of the machine
    falls on both alike."""
    payloads = _payloads(args.messages)
    rows = []
    for n in range(1, args.max_workers + 1):
        for label, stack in stacks.items():
            print(f"{label}: {n} ingest worker(s), {n} actor(s)", flush=True)
            row = {"redis": label, "workers": n}
            row["ingest_samples_per_s"] = ingest_rate(stack, n, payloads)
            row["actor_replies_per_s"] = actor_rate(stack, n, args.seconds)
            rows.append(row)
    first = {r["redis"]: r for r in rows if r["workers"] == 1}
    single = {r["workers"]: r for r in rows if r["redis"] == ONE}
    for row in rows:
        one, base = first[row["redis"]], single[row["workers"]]
        row["ingest_vs_1"] = row["ingest_samples_per_s"] / one["ingest_samples_per_s"]
        row["actors_vs_1"] = row["actor_replies_per_s"] / one["actor_replies_per_s"]
        row["ingest_vs_one_server"] = row["ingest_samples_per_s"] / base["ingest_samples_per_s"]
        row["actors_vs_one_server"] = row["actor_replies_per_s"] / base["actor_replies_per_s"]
    return rows


def partition_curve(stack: Stack, args: argparse.Namespace) -> list[dict]:
    """Samples/s into the cluster against the partitions of one model (two ingest workers)."""
    payloads = _payloads(args.messages)
    rows = []
    for p in range(1, 4):
        print(f"{CLUSTER}: {p} partition(s), 2 ingest workers", flush=True)
        rate = ingest_rate(stack, 2, payloads, partitions=p)
        rows.append({"redis": CLUSTER, "workers": 2, "partitions": p, "ingest_samples_per_s": rate})
    for row in rows:
        row["ingest_vs_1"] = row["ingest_samples_per_s"] / rows[0]["ingest_samples_per_s"]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=3000, help="ingest: messages of 40")
    parser.add_argument("--seconds", type=float, default=4.0, help="actors: closed-loop time")
    parser.add_argument("--max-workers", type=int, default=4)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        work = Path(tmp)
        with (
            broker(work / "mqtt", nagle=False) as mqtt,
            embedded.redis_server(workdir=work / "redis") as single,
            cluster_lib.LocalCluster(masters=3, replicas=0, workdir=work / "rc") as cluster,
        ):
            stacks = {
                ONE: Stack(mqtt.port, single.port, work),
                CLUSTER: Stack(mqtt.port, cluster.nodes[0].port, work),
            }
            rows = curves(stacks, args)
            rows += partition_curve(stacks[CLUSTER], args)
    cluster_rows = [r for r in rows if r["redis"] == CLUSTER and "partitions" not in r]
    checks = {
        "every role runs on the cluster: ingest and actors at every worker count": all(
            r["ingest_samples_per_s"] > 0 and r["actor_replies_per_s"] > 0 for r in cluster_rows
        ),
        "a partitioned stream takes every sample, 1 to 3 partitions": all(
            r["ingest_samples_per_s"] > 0 for r in rows if "partitions" in r
        ),
    }
    report("scaling", rows, checks, messages=args.messages, per_message=PER_MESSAGE)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
