"""Learner processes that die: SIGKILL mid-stream, then a restart that loses nothing.

Also data-parallel training over two logical CPU devices (`tf.distribute`), in a child
process because logical devices must be set before TensorFlow starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.learner.state import CheckpointDir
from streamlearn.store.stream import SampleStream
from tests.conftest import ROOT, eventually, role_env
from tests.conftest import published as published_meta

SAMPLES = 6000
TOML = """
[models.k]
inputs = 4
task = "regression"
hidden = [16]

[models.k.learner]
max_batch = 32
buckets = [32]  # one padded size: one trace before ready (batch sizes are not this test's)
max_wait_ms = 5
publish.every_ms = 100
checkpoint.dir = "{dir}"
checkpoint.every_s = 0.3
"""


def produce(queue: SampleStream, stop: threading.Event) -> None:
    """One entry per sample (single-sample messages at a trickle: ingest appends a run of
    messages as one entry), at ~1,500 samples/s."""
    rng = np.random.default_rng(3)
    for start in range(0, SAMPLES, 60):
        x = rng.uniform(-1, 1, (60, 4)).astype(np.float32)
        y = x @ np.array([1, -2, 0.5, 0], np.float32)
        queue.write(
            [Samples(x[i : i + 1], y[i : i + 1], (f"s{start + i}",)) for i in range(60)],
            entry_each=True,
        )
        if stop.wait(0.04):
            return


def published(redis, names: Names) -> dict[str, str]:
    latest, meta = published_meta(redis, names)
    return {"samples_seen": "0", **meta, "version": str(latest)}


def test_sigkilled_learner_restarts_from_its_checkpoint_and_loses_no_sample(
    start_role, redis, settings, tmp_path
):
    names = Names("k", settings.topic_prefix, settings.key_prefix)
    toml = TOML.format(dir=tmp_path / "ckpt")
    first = start_role("learner", toml)
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(SampleStream(redis, names, (4,)), stop))
    producer.start()
    try:
        checkpoint = CheckpointDir(tmp_path / "ckpt" / "k")
        eventually(lambda: int(published(redis, names)["samples_seen"]) >= 1500, 30, "training")
        eventually(lambda: checkpoint.path.exists(), 10, "a checkpoint")
        first.proc.kill()  # SIGKILL: no last publish, no last checkpoint
        first.proc.wait()
        assert producer.is_alive(), "killed mid-stream"
        before = int(redis.get(names.latest_key))
        saved = checkpoint.load().state
        group = redis.xinfo_groups(names.samples_key)[0]
        acked = group["entries-read"] - group["pending"]  # one sample each, by the dead one

        second = start_role("learner", toml)
        second.wait_for(f"resumed from checkpoint {checkpoint.path}, step {saved['step']},")
        producer.join(60)

        def all_trained() -> bool:
            group = redis.xinfo_groups(names.samples_key)[0]
            return group["entries-read"] == SAMPLES and group["lag"] == 0 and not group["pending"]

        eventually(all_trained, 60, "every entry trained and acknowledged")
    finally:
        stop.set()
        producer.join()
    # The checkpoint's lineage: the restart learns, on top of the checkpoint, each entry the
    # dead learner had not acknowledged, once: those it learned after the checkpoint again.
    learned = saved["samples_seen"] + SAMPLES - acked
    eventually(lambda: int(published(redis, names)["samples_seen"]) >= learned, 10, "published")
    meta = published(redis, names)
    assert int(meta["samples_seen"]) == learned, (meta, saved, acked)
    assert learned >= SAMPLES, "nothing acknowledged that the checkpoint lacks: none lost"
    assert int(meta["version"]) > before >= saved["version"]
    assert redis.xlen(names.deadletter_key) == 0


MIRRORED = r"""
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import redis
from streamlearn.online import tensors
from streamlearn.config import LearnerConfig, ModelConfig
from streamlearn.learner.loop import Learner
from streamlearn.contract.names import Names
from streamlearn.store.stream import SampleStream
from streamlearn.contract.records import Samples
from streamlearn.store.weights import WeightsStore

url, prefix = sys.argv[1:3]
policy = dict(max_batch=50, max_wait_ms=5, publish={"every_steps": 1000}, prefetch_batches=0)
mirrored = LearnerConfig(distribute="mirrored", devices=["/cpu:0", "/cpu:1"], **policy)
cfg = ModelConfig(name="m", inputs=3, task="binary", hidden=(8,), learner=mirrored)
client = redis.Redis.from_url(url)
names = Names("m", prefix, prefix)
queue = SampleStream(client, names, cfg.sample_shape)
rng = np.random.default_rng(0)
x = rng.normal(size=(230, 3)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.float32)
queue.write([Samples(x[i : i + 23], y[i : i + 23]) for i in range(0, 230, 23)])
learner = Learner(cfg, queue, WeightsStore(client, names), consumer="m")
# the same model on one device (a mirrored learner has no memory head)
single_cfg = cfg.model_copy(update={"learner": LearnerConfig(**policy), "memory": 0})
single = Learner(single_cfg, queue, None)
tensors.set_arrays(single.model, tensors.get_arrays(learner.model))
learner.start()
single.warm_up()
batches = []
learner.train_step = lambda batch, step=learner.train_step: (batches.append(batch), step(batch))
learner.run(burst=True)
for batch in batches:
    single.train_step(batch)
out = learner.status()
out["replicas"] = learner.replicas
out["buckets"] = list(learner.buckets)
out["sizes"] = [b.n for b in batches]
out["single_loss"] = single.state.online_loss
single.trainer.flush_statistics()  # as the mirrored learner's last publish did
mirrored_w, single_w = tensors.get_arrays(learner.model), tensors.get_arrays(single.model)
out["max_weight_diff"] = max(float(np.abs(mirrored_w[k] - single_w[k]).max()) for k in single_w)
print("RESULT " + json.dumps(out))
"""


def test_mirrored_over_two_devices_trains_like_one_device(redis, settings):
    run = subprocess.run(
        [sys.executable, "-c", MIRRORED, settings.redis, settings.key_prefix],
        cwd=ROOT,
        env=role_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(lines[0].removeprefix("RESULT "))
    assert out["replicas"] == 2 and out["buckets"] == [16, 50]  # padded to split evenly
    assert out["samples_seen"] == 230 and out["retraces"] == 0
    assert out["online_loss"] == pytest.approx(out["single_loss"], rel=1e-4)
    assert out["max_weight_diff"] < 1e-5, "each replica's share adds up to the one-device step"
