"""Learner throughput on a pre-filled Redis stream, against `train_on_batch` in memory.

    .venv/bin/python -m bench.learner [--samples 500000] [--batch 256]

Rows, all with the same model and batch size, measured in one run:
- `train_on_batch` on arrays already in memory (the ceiling: plain Keras, which zeroes
  the metrics eagerly at every call; the learner's step does it inside its graph);
- the per-message loop: one `train_on_batch` per sample, as people first write it;
- the learner draining a stream of `--samples` samples, with entries of 64 samples and of
  1 sample (ingest writes one entry per MQTT message), with and without read-ahead, as
  deployed (`Learner.run` with replay on: it replays only once caught up, so a full
  backlog gets fresh steps alone; `replay steps` counts any that ran);
- steps of random drained sizes 1..batch (padded to buckets) against full steps, and the
  same sizes unpadded, to show what the buckets save.

The in-memory ceiling and the learner runs alternate for `--rounds` rounds and each row
keeps its best, so that load from other processes on a shared machine, which only ever
slows a run down, weighs on both sides alike; every round is in the JSON.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid

import keras
import numpy as np
import redis

from bench._report import report
from streamlearn import embedded, models
from streamlearn.batching import Batch, samples_batch
from streamlearn.config import LearnerConfig, ModelConfig
from streamlearn.learner import Learner
from streamlearn.names import Names
from streamlearn.records import Samples
from streamlearn.stream import SampleStream
from streamlearn.weights import WeightsStore

INPUTS = 9
WEIGHTS = np.linspace(-1, 1, INPUTS).astype(np.float32)


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).normal(size=(n, INPUTS)).astype(np.float32)
    return x, (x @ WEIGHTS > 0).astype(np.float32)


def model_config(batch: int, **learner: object) -> ModelConfig:
    policy = LearnerConfig(max_batch=batch, **learner)
    return ModelConfig(name="bench", inputs=INPUTS, task="binary", hidden=(64, 64), learner=policy)


def in_memory(cfg: ModelConfig, steps: int) -> float:
    """samples/s of `train_on_batch` on ready arrays of `max_batch` rows."""
    model, batch = models.build_model(cfg), cfg.learner.max_batch
    x, y = data(batch * 16, seed=1)
    batches = [(x[i : i + batch], y[i : i + batch, None]) for i in range(0, len(x), batch)]
    for xb, yb in batches:
        model.train_on_batch(xb, yb)
    start = time.perf_counter()
    for i in range(steps):
        model.train_on_batch(*batches[i % len(batches)])
    return steps * batch / (time.perf_counter() - start)


def per_message(cfg: ModelConfig, samples: int) -> float:
    """samples/s of one `train_on_batch` per sample."""
    model = models.build_model(cfg)
    x, y = data(samples + 10, seed=2)
    for i in range(10):
        model.train_on_batch(x[i : i + 1], y[i : i + 1, None])
    start = time.perf_counter()
    for i in range(10, samples + 10):
        model.train_on_batch(x[i : i + 1], y[i : i + 1, None])
    return samples / (time.perf_counter() - start)


def prefill(queue: SampleStream, samples: int, per_entry: int) -> int:
    x, y = data(samples, seed=3)
    entries = [
        Samples(x[i : i + per_entry], y[i : i + per_entry]) for i in range(0, samples, per_entry)
    ]
    for i in range(0, len(entries), 5000):
        queue.write(entries[i : i + 5000])
    return len(entries)


def drain_stream(client: redis.Redis, cfg: ModelConfig, samples: int, per_entry: int) -> dict:
    """A learner draining a pre-filled stream; the clock runs from its first read."""
    names = Names(cfg.name, "bench", f"b{uuid.uuid4().hex[:8]}")
    queue = SampleStream(client, names, cfg.sample_shape)
    entries = prefill(queue, samples, per_entry)
    learner = Learner(cfg, queue, WeightsStore(client, names), consumer="bench")
    learner.start()  # resume and warm-up: not timed
    last = [0.0]
    step = learner.train_step

    trained = threading.Event()

    def timed_step(batch: Batch) -> None:  # when the last sample was trained
        step(batch)
        last[0] = time.perf_counter()
        if learner.state.samples_seen >= samples:
            trained.set()

    learner.train_step = timed_step  # type: ignore[method-assign]
    start = time.perf_counter()
    steps = learner.run(trained)  # as deployed: replay on, in spare time only
    seconds = last[0] - start
    status = learner.status()
    assert status["samples_seen"] == samples, status
    group = client.xinfo_groups(queue.key)[0]
    assert group["pending"] == 0 and group["lag"] == 0, group
    for key in client.scan_iter(f"{names.key_prefix}:*"):
        client.delete(key)
    return {
        "entries": entries,
        "samples/s": samples / seconds,
        "step ms": 1000 * seconds / steps,
        "retraces": status["retraces"],
        "versions": status["version"],
        "replay steps": status["replay_steps"],
    }


def random_sizes(client: redis.Redis, cfg: ModelConfig, steps: int) -> tuple[dict, dict, dict]:
    """Mean step time of random drained sizes, padded, against full steps and unpadded."""
    batch = cfg.learner.max_batch
    names = Names(cfg.name, "bench", f"r{uuid.uuid4().hex[:8]}")
    queue = SampleStream(client, names, cfg.sample_shape)
    learner = Learner(cfg, queue, WeightsStore(client, names), consumer="bench")
    learner.warm_up()  # train_step is driven directly with padded in-memory batches
    plain = models.build_model(cfg)
    probe = models.TrainProbe(plain)
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, batch + 1, steps)
    x, y = data(batch, seed=5)
    plain.train_on_batch(x, y[:, None])
    traced = probe.traces
    padded = [samples_batch(Samples(x[:n], y[:n]), learner.buckets) for n in sizes]
    full = samples_batch(Samples(x, y), learner.buckets)
    kinds = {
        "random": lambda i: learner.train_step(padded[i]),
        "full": lambda i: learner.train_step(full),
        "unpadded": lambda i: plain.train_on_batch(x[: sizes[i]], y[: sizes[i], None]),
    }
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for block in range(0, steps, 50):  # interleaved blocks: all see the same load
        for kind, step in kinds.items():
            for i in range(block, min(block + 50, steps)):
                start = time.perf_counter()
                step(i)
                times[kind].append(time.perf_counter() - start)
    ms = {k: 1000 * statistics.mean(v) for k, v in times.items()}
    return (
        {"step ms": ms["random"], "retraces": learner.status()["retraces"]},
        {"step ms": ms["full"]},
        {
            "step ms": ms["unpadded"],
            "retraces": probe.traces - traced,
            "worst step ms": 1000 * max(times["unpadded"]),
        },
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.learner", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500_000, help="samples in the stream")
    parser.add_argument("--batch", type=int, default=256, help="max_batch of the learner")
    parser.add_argument("--steps", type=int, default=1500, help="in-memory steps per baseline")
    parser.add_argument("--messages", type=int, default=2000, help="per-message loop samples")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each row keeps its best")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    cfg = model_config(args.batch)
    cases = {  # (samples per entry, read-ahead)
        (64, True): cfg,
        (64, False): model_config(args.batch, prefetch_batches=0),
        (1, True): cfg,
    }
    memory: list[float] = []
    runs: dict[tuple[int, bool], list[dict]] = {case: [] for case in cases}
    with (
        tempfile.TemporaryDirectory(prefix="sl-bench-") as tmp,
        embedded.redis_server(workdir=tmp) as server,
    ):
        client = redis.Redis(port=server.port)
        loop = per_message(cfg, args.messages)
        for _ in range(args.rounds):  # alternate, so that both sides see the same load
            memory.append(in_memory(cfg, args.steps))
            for case, case_cfg in cases.items():
                runs[case].append(drain_stream(client, case_cfg, args.samples, case[0]))
        memory.append(in_memory(cfg, args.steps))
        padded_row, full_row, unpadded_row = random_sizes(client, cfg, 400)
        client.close()

    ceiling = max(memory)
    best = {case: max(found, key=lambda r: r["samples/s"]) for case, found in runs.items()}
    rows = [
        {"case": "train_on_batch, arrays in memory", "samples/s": ceiling},
        {"case": "per-message loop (batch 1)", "samples/s": loop, "step ms": 1000 / loop},
    ]
    rows[0]["step ms"] = 1000 * args.batch / ceiling
    for (per_entry, ahead), run in best.items():
        ahead_note = "" if ahead else ", no read-ahead"
        rows.append({"case": f"learner, entries of {per_entry}{ahead_note}", **run})
    for row in rows:
        row["vs memory"] = row["samples/s"] / ceiling
        row["vs per-message"] = row["samples/s"] / loop
    rows.append({"case": f"steps of random sizes 1..{args.batch}, padded", **padded_row})
    rows.append({"case": f"steps of {args.batch} (full)", **full_row})
    rows.append({"case": f"steps of random sizes 1..{args.batch}, not padded", **unpadded_row})

    ratio = padded_row["step ms"] / full_row["step ms"]
    checks = {}
    for per_entry in (64, 1):
        speed = best[(per_entry, True)]["samples/s"]
        checks[
            f"entries of {per_entry}: learner >= 70% of train_on_batch in memory "
            f"({speed / ceiling:.0%})"
        ] = speed >= 0.7 * ceiling
        checks[
            f"entries of {per_entry}: learner >= 100x the per-message loop ({speed / loop:.0f}x)"
        ] = speed >= 100 * loop
    checks["random sizes: 0 retraces after warm-up"] = padded_row["retraces"] == 0
    checks[f"random sizes: step time within 1.2x of full steps ({ratio:.2f}x)"] = ratio <= 1.2
    report(
        "learner",
        rows,
        checks,
        samples=args.samples,
        batch=args.batch,
        rounds=args.rounds,
        model="mlp 9-64-64-1, binary, adam",
        in_memory_samples_per_s=memory,
        learner_rounds={f"entries of {k[0]}, read-ahead {k[1]}": v for k, v in runs.items()},
        load_average=[load_before, os.getloadavg()[0]],
        devices=keras.distribution.list_devices(),
        hiredis=redis.utils.HIREDIS_AVAILABLE,
    )


if __name__ == "__main__":
    main()
