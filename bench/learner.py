"""Learner throughput on a pre-filled Redis stream, against `train_on_batch` in memory.

    .venv/bin/python -m bench.learner [--samples 500000] [--batch 256]
    .venv/bin/python -m bench.learner --quick   # the CI smoke: < 60 s, half of each goal

Rows, all with the same model and batch size, measured in one run:
- `train_on_batch` on arrays already in memory (the ceiling: plain Keras, which zeroes
  the metrics eagerly at every call; the learner's step does it inside its graph);
- the per-message loop: one `train_on_batch` per sample, as people first write it;
- the learner draining a stream of `--samples` samples, as deployed (`Learner.run` with
  replay on, holding its lease: each publish fenced, each turn checked; it replays
  only once caught up, so a full backlog gets fresh steps alone;
  `replay steps` counts any that ran), in three layouts: 64-sample messages, an entry
  each; single-sample messages as ingest appends them, a run of `RUN` messages to an
  entry (its runs live at ~13,000 messages/s; under a backlog they are longer); and
  entries of 1 sample (what a trickle of single-sample messages gets, or a stream written
  an entry a sample: Redis's work is per entry, so this is the floor). Each with the
  reading thread as this machine gets it by default (`LearnerConfig.prefetch_depth`: by
  cores) and, for 64 and 1, the other setting (not in `--quick`), which shows whether the
  default pays here; under a backlog the next read goes out while a batch trains either
  way (`batching.Drainer`);
- steps of random drained sizes 1..batch (padded to buckets) against full steps, and the
  same sizes unpadded, to show what the buckets save.

The in-memory ceiling and the learner runs alternate for `--rounds` rounds and each row
keeps its best, so that load from other processes on a shared machine, which only ever
slows a run down, weighs on both sides alike; every round is in the JSON. The last
release's model runs right beside the hedge model on the same layout, first in every other
round, so that the two the check compares see the same load.
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

from bench._report import exit_status, goal, report
from streamlearn.config import LearnerConfig, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.learner.batching import samples_batch
from streamlearn.learner.lease import LeaseKeeper
from streamlearn.learner.loop import Learner
from streamlearn.nn import networks
from streamlearn.online.batch import Batch
from streamlearn.online.guard import TrainProbe
from streamlearn.stack import embedded
from streamlearn.store.lease import Lease
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore

INPUTS = 9
WEIGHTS = np.linspace(-1, 1, INPUTS).astype(np.float32)


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).normal(size=(n, INPUTS)).astype(np.float32)
    return x, (x @ WEIGHTS > 0).astype(np.float32)


def model_config(batch: int, heads: str = "hedge", **learner: object) -> ModelConfig:
    policy = LearnerConfig(max_batch=batch, **learner)
    return ModelConfig(
        name="bench", inputs=INPUTS, task="binary", hidden=(64, 64), heads=heads, learner=policy
    )


def in_memory(cfg: ModelConfig, steps: int) -> float:
    """samples/s of `train_on_batch` on ready arrays of `max_batch` rows."""
    model, batch = networks.build_model(cfg), cfg.learner.max_batch
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
    model = networks.build_model(cfg)
    x, y = data(samples + 10, seed=2)
    for i in range(10):
        model.train_on_batch(x[i : i + 1], y[i : i + 1, None])
    start = time.perf_counter()
    for i in range(10, samples + 10):
        model.train_on_batch(x[i : i + 1], y[i : i + 1, None])
    return samples / (time.perf_counter() - start)


def prefill(queue: SampleStream, samples: int, per_entry: int, run: int = 1) -> int:
    """`samples` samples in messages of `per_entry` samples, appended as ingest appends
    them, `run` messages a call (`Appender.append`: a call's messages make one entry), so
    a stream of entries of `per_entry * run` samples; returns the entries."""
    x, y = data(samples, seed=3)
    messages = [
        Samples(x[i : i + per_entry], y[i : i + per_entry]) for i in range(0, samples, per_entry)
    ]
    calls = [messages[i : i + run] for i in range(0, len(messages), run)]
    for i in range(0, len(calls), 5000):
        pipe = queue.redis.pipeline(transaction=False)
        for call in calls[i : i + 5000]:
            queue.appender.append(pipe, call, window_s=0)
        pipe.execute()
    return len(calls)


def drain_stream(
    client: redis.Redis, cfg: ModelConfig, samples: int, per_entry: int, run: int = 1
) -> dict:
    """A learner draining a pre-filled stream (`prefill`); the clock runs from its first
    read."""
    names = Names(cfg.name, "bench", f"b{uuid.uuid4().hex[:8]}")
    queue = SampleStream(client, names, cfg.sample_shape)
    queue.load_scripts()
    entries = prefill(queue, samples, per_entry, run)
    lease = Lease(client, names, cfg.learner.lease.ttl_s)
    keeper = LeaseKeeper(lease, cfg.learner.lease)
    keeper.wait(threading.Event())
    store = WeightsStore(client, names, lease=lease)
    learner = Learner(cfg, queue, store, consumer="bench", lease=keeper)
    learner.start()  # resume and warm-up: not timed
    while learner.trainer.warm_next():  # the buckets a deployed learner traces in spare time
        pass
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
    keeper.release()
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
    while learner.trainer.warm_next():
        pass
    plain = networks.build_model(cfg)
    plain.jit_compile = False  # each new size a trace (with XLA, also a compile: ~1 s)
    probe = TrainProbe(plain)
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


RUN = 64  # messages a call when ingest appends single-sample messages: its runs at ~13k/s
RELEASE = ((64, 1), (1, RUN))  # a backlog's layouts, also learned by a one-head model
LABELS = {
    (64, 1): "entries of 64",
    (1, RUN): f"single-sample messages, ingest's runs of {RUN}",
    (1, 1): "entries of 1",
}


def thread_of(depth: int, deployed: int) -> str:
    thread = f"reading thread {depth}" if depth else "no reading thread"
    return thread + (" (this machine's default)" if depth == deployed else "")


# `--quick`'s defaults: the CI smoke, under 60 s on 2 cores with TensorFlow's import
QUICK = {"samples": 40_000, "steps": 400, "messages": 300, "rounds": 2, "random_steps": 100}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.learner", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500_000, help="samples in the stream")
    parser.add_argument("--batch", type=int, default=256, help="max_batch of the learner")
    parser.add_argument("--steps", type=int, default=1500, help="in-memory steps per baseline")
    parser.add_argument("--messages", type=int, default=2000, help="per-message loop samples")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each row keeps its best")
    parser.add_argument("--random-steps", type=int, default=400, help="steps of random sizes")
    parser.add_argument("--quick", action="store_true", help="CI smoke: < 60 s, half of each goal")
    args = parser.parse_args(argv)
    if args.quick:  # shorter defaults; options given still count
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    cfg = model_config(args.batch)
    deployed = cfg.learner.prefetch_depth()  # this machine's default
    other = 0 if deployed else 2
    # (samples per message, messages per append call, reading thread's depth)
    cases = [(64, 1, deployed), (1, RUN, deployed), (1, 1, deployed)]
    if not args.quick:  # the other reading thread is shown, not checked: not in the smoke
        cases += [(64, 1, other), (1, 1, other)]
    configs = {case: model_config(args.batch, prefetch_batches=case[2]) for case in cases}
    memory: list[float] = []
    runs: dict[tuple[int, int, int], list[dict]] = {case: [] for case in cases}
    one_head = model_config(args.batch, heads="last")  # the last release's model
    release: dict[tuple[int, int], list[dict]] = {layout: [] for layout in RELEASE}
    with (
        tempfile.TemporaryDirectory(prefix="sl-bench-") as tmp,
        embedded.redis_server(workdir=tmp) as server,
    ):
        client = redis.Redis(port=server.port)
        loop = per_message(cfg, args.messages)
        for i in range(args.rounds):  # alternate, so that both sides see the same load
            memory.append(in_memory(cfg, args.steps))
            for case, case_cfg in configs.items():
                per_entry, run, depth = case
                pair = [(runs[case], case_cfg)]
                if case[:2] in RELEASE and depth == deployed:  # its one-head run beside it,
                    pair.append((release[case[:2]], one_head))  # first every other round
                for found, model_cfg in pair[:: -1 if i % 2 else 1]:
                    found.append(drain_stream(client, model_cfg, args.samples, per_entry, run))
        memory.append(in_memory(cfg, args.steps))
        padded_row, full_row, unpadded_row = random_sizes(client, cfg, args.random_steps)
        client.close()

    ceiling = max(memory)
    best = {case: max(found, key=lambda r: r["samples/s"]) for case, found in runs.items()}
    rows = [
        {"case": "train_on_batch, arrays in memory", "samples/s": ceiling},
        {"case": "per-message loop (batch 1)", "samples/s": loop, "step ms": 1000 / loop},
    ]
    rows[0]["step ms"] = 1000 * args.batch / ceiling
    for case, run in best.items():
        rows.append({"case": f"learner, {LABELS[case[:2]]}, {thread_of(case[2], deployed)}", **run})
    kept = {layout: max(found, key=lambda r: r["samples/s"]) for layout, found in release.items()}
    for layout, run in kept.items():
        rows.append({"case": f"last release's model (one head), {LABELS[layout]}", **run})
    for row in rows:
        row["vs memory"] = row["samples/s"] / ceiling
        row["vs per-message"] = row["samples/s"] / loop
    rows.append({"case": f"steps of random sizes 1..{args.batch}, padded", **padded_row})
    rows.append({"case": f"steps of {args.batch} (full)", **full_row})
    rows.append({"case": f"steps of random sizes 1..{args.batch}, not padded", **unpadded_row})

    q = args.quick
    ratio = padded_row["step ms"] / full_row["step ms"]
    vs = {case: run["samples/s"] / ceiling for case, run in best.items()}
    checks, figures_release = {}, {}
    for case, target in (((64, 1), 0.9), ((1, RUN), 0.85), ((1, 1), 0.7)):
        speed, share = best[(*case, deployed)]["samples/s"], vs[(*case, deployed)]
        checks[
            f"{LABELS[case]}: learner >= {target:.0%} of train_on_batch in memory ({share:.0%})"
        ] = goal(share, target, q)
        checks[f"{LABELS[case]}: learner >= 100x the per-message loop ({speed / loop:.0f}x)"] = (
            goal(speed / loop, 100, q)
        )
    for layout, run in kept.items():
        share = best[(*layout, deployed)]["samples/s"] / run["samples/s"]
        checks[
            f"{LABELS[layout]}: hedge model >= 0.9x the last release's one head ({share:.2f}x)"
        ] = goal(share, 0.9, q)
        figures_release[f"{LABELS[layout]}: vs the last release's model"] = share
    checks["random sizes: 0 retraces after warm-up"] = padded_row["retraces"] == 0
    checks[f"random sizes: step time within 1.2x of full steps ({ratio:.2f}x)"] = goal(
        1 / ratio, 1 / 1.2, q
    )
    figures = {
        f"messages_of_{e}_runs_of_{r}_thread_{d}_vs_memory": v for (e, r, d), v in vs.items()
    }
    figures |= {
        "single_sample_messages_vs_memory": vs[(1, RUN, deployed)],
        "entries_1_vs_memory": vs[(1, 1, deployed)],
        "entries_64_vs_memory": vs[(64, 1, deployed)],
        "default_prefetch_batches": deployed,
        "random_sizes_vs_full_steps": ratio,
        **figures_release,
    }
    report(
        "learner",
        rows,
        checks,
        quick=q,
        figures=figures,
        samples=args.samples,
        batch=args.batch,
        rounds=args.rounds,
        model="mlp 9-64-64-1, binary, adam, hedge heads (the last release's: one head)",
        in_memory_samples_per_s=memory,
        learner_rounds={f"{LABELS[c[:2]]}, reading thread {c[2]}": v for c, v in runs.items()},
        release_rounds={LABELS[layout]: v for layout, v in release.items()},
        load_average=[load_before, os.getloadavg()[0]],
        devices=keras.distribution.list_devices(),
        hiredis=redis.utils.HIREDIS_AVAILABLE,
        cores=len(os.sched_getaffinity(0)),
    )
    return exit_status(checks)


if __name__ == "__main__":
    raise SystemExit(main())
