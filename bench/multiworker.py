"""The multi-host learner on this machine: one learner against two lockstep workers
(`learner.distribute = "multi_worker"`, TF_CONFIG on localhost), draining the same backlog.

    .venv/bin/python -m bench.multiworker [--samples 200000] [--batches 256,1024] [--hidden 64]

About 2 minutes on 2 cores.

`--samples` samples of the demo's 9 features, in entries of 64, wait in a stream of two
partitions before the learners start; the rate is samples over the time from the last
worker's "ready" to the chief's publish of the last sample. The baseline, in the same run,
is one learner (`distribute = "none"`) reading both partitions. Replay is off: the rate is
fresh samples trained.

On one host the workers share its cores, and every turn adds an exchange of the rows and
an all-reduce over gRPC: the figures give that overhead, not what more hosts would give.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path

import numpy as np

from bench._report import report
from bench._stack import Proc, Stack, broker
from streamlearn.config import DEMO_TOML, parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.stack import embedded
from streamlearn.store.redis_client import connect
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore

PER_ENTRY = 64


def _config(distribute: str, max_batch: int, hidden: int) -> str:
    return (
        DEMO_TOML.replace("hidden = [64, 64]", f"hidden = [{hidden}, {hidden}]")
        + "\n[models.demo.ingest]\npartitions = 2\n"
        + f'\n[models.demo.learner]\ndistribute = "{distribute}"\nmax_batch = {max_batch}\n'
        + "\n[models.demo.learning]\nreplay_ratio = 0\n"
    )


def _fill(redis_url: str, names: Names, text: str, samples: int) -> None:
    cfg = parse_config(tomllib.loads(text)).model("demo")
    client = connect(redis_url)
    rng = np.random.default_rng(0)
    streams = [SampleStream.of(client, names.of_partition(i), cfg) for i in range(2)]
    for e in range(samples // PER_ENTRY):
        x = rng.uniform(-1, 1, (PER_ENTRY, 9)).astype(np.float32)
        streams[e % 2].write([Samples(x, (x[:, 0] + x[:, 1] > 0).astype(np.float32))])
    client.close()


def _seen(client, names: Names) -> int:
    """Samples the latest published weights have seen."""
    return int(WeightsStore(client, names).metadata()[1].get("samples_seen", 0))


def learn_rate(stack: Stack, workers: int, max_batch: int, args: argparse.Namespace) -> float:
    """Samples/s trained from a prefilled backlog by one learner or `workers` workers."""
    prefix = f"mw{uuid.uuid4().hex[:6]}"
    names = Names("demo", prefix, prefix)
    text = _config("none" if workers == 1 else "multi_worker", max_batch, args.hidden)
    config = stack.workdir / f"{prefix}.toml"
    config.write_text(text)
    _fill(stack.redis_url, names, text, args.samples)
    hosts = [f"localhost:{embedded.free_port()}" for _ in range(workers)]
    procs = []
    for i in range(workers):
        env = stack.env(prefix)
        if workers > 1:
            tf_config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
            env["TF_CONFIG"] = json.dumps(tf_config)
        argv = ["-m", "streamlearn.learner.worker", "--config", str(config), "--instance", f"w{i}"]
        procs.append(Proc([sys.executable, *argv], env))
    client = connect(stack.redis_url)
    try:
        for p in procs:
            p.wait_for(" ready", 180)
        start, total = time.perf_counter(), (args.samples // PER_ENTRY) * PER_ENTRY
        while _seen(client, names) < total:
            if any(p.proc.poll() is not None for p in procs):
                raise RuntimeError("a learner exited:\n" + procs[0].output[-3000:])
            time.sleep(0.02)
        return total / (time.perf_counter() - start)
    finally:
        for p in procs:
            p.stop()
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.multiworker", description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--batches", default="256,1024", help="max_batch values, comma-separated")
    parser.add_argument("--hidden", type=int, default=64, help="units of each hidden layer")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-multiworker-") as tmp:
        work = Path(tmp)
        with (
            broker(work / "mqtt", nagle=False) as mqtt,
            embedded.redis_server(workdir=work / "redis") as redis,
        ):
            stack = Stack(mqtt.port, redis.port, work)
            for max_batch in (int(b) for b in args.batches.split(",")):
                one = None
                for workers in (1, 2):
                    print(f"max_batch {max_batch}: {workers} learner process(es)", flush=True)
                    rate = learn_rate(stack, workers, max_batch, args)
                    one = one or rate
                    rows.append(
                        {
                            "max_batch": max_batch,
                            "learner_processes": workers,
                            "samples_per_s": rate,
                            "vs_one_learner": rate / one,
                        }
                    )
    report("multiworker", rows, None, samples=args.samples, hidden=args.hidden)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
