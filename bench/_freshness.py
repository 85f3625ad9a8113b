"""Freshness: from a sample's publish to the first reply served by a version trained on it.

Ingest, learner and actor run as the real worker processes with default settings. A
sample is in version v when v's blob says it was trained on more samples than came before
it (one publisher, one ingest worker: the stream keeps the publish order).
"""

from __future__ import annotations

import argparse
import bisect
import json
import threading
import time
import tomllib

import numpy as np
import redis

from bench._stack import Stack
from bench.loadgen import open_loop
from streamlearn import codec
from streamlearn.config import DEMO_TOML, parse_config
from streamlearn.demo import DemoStream
from streamlearn.names import Names


def measure(stack: Stack, args: argparse.Namespace) -> dict:
    """Publish samples at a fixed rate while probing the actor at 200 requests/s."""
    prefix = "fresh"
    names = Names("demo", prefix, prefix)
    cfg = parse_config(tomllib.loads(DEMO_TOML)).model("demo")
    config = stack.workdir / "fresh.toml"
    config.write_text(DEMO_TOML)
    procs = [
        stack.start([f"workers.{role}", "--config", str(config)], prefix)
        for role in ("learner", "ingest", "actor")
    ]
    r = redis.Redis.from_url(stack.redis_url)
    seen: dict[int, int] = {}  # version -> samples trained on
    stop = threading.Event()

    def listen() -> None:
        pubsub = r.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(names.weights_channel)
        while not stop.is_set():
            msg = pubsub.get_message(timeout=0.2)
            if msg is not None:
                version = int(msg["data"])
                blob = r.get(names.weights_key(version))
                if blob is not None:
                    seen[version] = int(codec.decode(blob)[1]["samples_seen"])
        pubsub.close()

    listener = threading.Thread(target=listen)
    listener.start()
    stream = DemoStream(cfg, seed=3)
    n = int(args.fresh_rate * args.fresh_seconds)
    samples, probes = stack.client(), stack.client()
    sample_packets = [
        samples.request(
            names.samples_topic,
            json.dumps({**stream.payload(1), "id": f"s{i}"}).encode(),
            b"",
            reply=False,
        )
        for i in range(n)
    ]
    probe_rate, probe_n = 200, int(200 * (args.fresh_seconds + 2))
    probe_packets = [
        probes.request(names.predict_topic, b'{"x": [0,0,0,0,0,0,0,0,0]}', i.to_bytes(8, "big"))
        for i in range(probe_n)
    ]
    sent_at: list[float] = []
    sender = threading.Thread(
        target=lambda: sent_at.extend(open_loop(samples, sample_packets, args.fresh_rate))
    )
    sender.start()
    open_loop(probes, probe_packets, probe_rate)
    sender.join()
    time.sleep(0.5)
    stop.set()
    listener.join()
    for c in (samples, probes):
        c.close()
    for proc in procs:
        proc.stop()

    versions = sorted(seen.items())  # samples_seen grows with the version
    trained = [s for _, s in versions]
    served = sorted(
        (reply.at, json.loads(reply.payload).get("version", 0)) for reply in probes.replies
    )
    times = [t for t, _ in served]
    running = np.maximum.accumulate([v for _, v in served]) if served else np.array([])
    fresh = []
    for i, t_pub in enumerate(sent_at):
        if t_pub < sent_at[0] + args.fresh_warmup:
            continue
        k = bisect.bisect_left(trained, i + 1)  # first version trained on sample i
        if k == len(versions):
            continue
        j = bisect.bisect_left(running, versions[k][0])
        if j < len(times):
            fresh.append((times[j] - t_pub) * 1000)
    fresh_ms = np.array(fresh)
    return {
        "samples": n,
        "rate_per_s": args.fresh_rate,
        "measured": len(fresh),
        "versions": len(versions),
        "trained_on": trained[-1] if trained else 0,
        "p50_ms": float(np.percentile(fresh_ms, 50)) if len(fresh) else None,
        "p90_ms": float(np.percentile(fresh_ms, 90)) if len(fresh) else None,
        "p99_ms": float(np.percentile(fresh_ms, 99)) if len(fresh) else None,
        "max_ms": float(fresh_ms.max()) if len(fresh) else None,
    }
