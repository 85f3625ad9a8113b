"""Freshness: from a sample's publish to the first reply served by a version trained on it.

Ingest, learner and actor run as the real worker processes with default settings. A
sample is in version v when v's blob says it was trained on more samples than came before
it (one publisher, one ingest worker: the stream keeps the publish order). Every sample
published after the warm-up is in the figures: one never served by a version trained on
it counts as infinitely late, and the counts say how many of each kind there were.
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
from bench.loadgen import open_loop, without_collection
from streamlearn.config import DEMO_TOML, parse_config
from streamlearn.contract.names import Names
from streamlearn.stack.demo import DemoStream
from streamlearn.store.weights import WeightsStore


@without_collection
def measure(stack: Stack, args: argparse.Namespace) -> dict:
    """Publish samples at a fixed rate while probing the actor at 200 requests/s."""
    prefix = "fresh"
    names = Names("demo", prefix, prefix)
    cfg = parse_config(tomllib.loads(DEMO_TOML)).model("demo")
    config = stack.workdir / "fresh.toml"
    config.write_text(DEMO_TOML)
    procs = [
        stack.start([f"streamlearn.{role}.worker", "--config", str(config)], prefix)
        for role in ("learner", "ingest", "actor")
    ]
    r = redis.Redis.from_url(stack.redis_url)
    store = WeightsStore(r, names)
    seen: dict[int, int] = {}  # version -> samples trained on
    announced: dict[int, float] = {}  # version -> when its notification came (monotonic)
    stop = threading.Event()

    def listen() -> None:
        pubsub = r.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(names.weights_channel)
        while not stop.is_set():
            msg = pubsub.get_message(timeout=0.2)
            if msg is not None:
                version = int(msg["data"])
                announced[version] = time.monotonic()
                found, meta = store.metadata(version)
                if found:
                    seen[version] = int(meta["samples_seen"])
        pubsub.close()

    listener = threading.Thread(target=listen)
    listener.start()
    stream = DemoStream(cfg, seed=3)
    n = int(args.fresh_rate * args.fresh_seconds)
    samples, probes = stack.client(), stack.client(names)
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
    # Every sample after the warm-up counts: one never served by a version trained on it
    # (not in any version, or no reply by one) is inf, so it weighs on the percentiles.
    eligible = [i for i, t in enumerate(sent_at) if t >= sent_at[0] + args.fresh_warmup]
    fresh_ms = np.full(len(eligible), np.inf)
    # the two halves: until the version trained on it is announced (ingest and learner),
    # and from then until a reply comes from it (the actor's reload, the probes' spacing)
    learned_ms, served_ms = [], []
    not_trained = 0
    for slot, i in enumerate(eligible):
        k = bisect.bisect_left(trained, i + 1)  # first version trained on sample i
        if k == len(versions):
            not_trained += 1
            continue
        j = bisect.bisect_left(running, versions[k][0])
        if j < len(times):
            fresh_ms[slot] = (times[j] - sent_at[i]) * 1000
            if versions[k][0] in announced:
                learned_ms.append((announced[versions[k][0]] - sent_at[i]) * 1000)
                served_ms.append((times[j] - announced[versions[k][0]]) * 1000)
    measured = int(np.isfinite(fresh_ms).sum())
    return {
        "samples": n,
        "rate_per_s": args.fresh_rate,
        "eligible": len(eligible),  # after the warm-up: the denominator of the figures
        "measured": measured,
        "not_trained": not_trained,  # in no version published before the end
        "not_served": len(eligible) - measured - not_trained,  # trained, never replied with
        "versions": len(versions),
        "trained_on": trained[-1] if trained else 0,
        **{f"p{q}_ms": _pct(fresh_ms, q) for q in (50, 90, 99)},
        "max_ms": _pct(fresh_ms, 100),
        "learned_p50_ms": _pct(np.array(learned_ms), 50),  # sample -> its version announced
        "served_p50_ms": _pct(np.array(served_ms), 50),  # announced -> a reply by it
    }


def _pct(values: np.ndarray, q: float) -> float | None:
    """The q-th percentile, None when it falls on a sample never served (or none counted)."""
    if not len(values):
        return None
    value = float(np.percentile(values, q, method="higher"))
    return None if np.isinf(value) else value
