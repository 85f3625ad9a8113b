"""bench.quality: its streams stay fixed and its learners score every sample once, before
learning it. The streams that need River or scikit-learn (`.[bench]`) are not loaded here:
the numpy stream `linear4` goes through the same code."""

from __future__ import annotations

import re
from pathlib import Path

import keras
import numpy as np

from bench import _quality_learners as learners
from bench import _quality_streams as streams
from bench._quality_service import Service
from bench._stack import Stack
from streamlearn.online.evaluate import rolling

ROOT = Path(__file__).resolve().parents[2]


def _linear4(n: int) -> streams.Stream:
    return streams.load(next(s for s in streams.specs() if s.name == "linear4"), n)


def test_river_real_world_datasets_stay_out_of_benches_and_tests() -> None:
    """They are kept for independent evaluation: only `river.datasets.synth` is used."""
    reserved = re.compile(
        r"river\.datasets\.(?!synth\b)|from river\.datasets import (?!synth\b)"
        r"|from river import datasets"
    )
    offending = [
        str(path.relative_to(ROOT))
        for folder in ("bench", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != Path(__file__).name and reserved.search(path.read_text())
    ]
    assert offending == []


def test_a_stream_is_the_same_every_run() -> None:
    a, b = _linear4(300), _linear4(300)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    assert a.x.dtype == np.float32 and a.x.shape == (300, 4)


def test_in_process_predicts_each_message_before_learning_it() -> None:
    stream = _linear4(200)
    cfg = learners.model_config(stream)
    keras.utils.set_random_seed(0)
    untrained = learners.in_process(cfg)
    keras.utils.set_random_seed(0)
    outcome = learners.run_in_process(stream, 40, learners.in_process(cfg))
    expected = np.abs(untrained.predict_many(stream.x[:40]) - stream.y[:40])
    assert np.allclose(outcome.scores[:40], expected, atol=1e-5)
    assert len(outcome.scores) == stream.n and np.isfinite(outcome.scores).all()
    # and it learned from them: the second message is not scored by the untrained model
    untrained_next = np.abs(untrained.predict_many(stream.x[40:80]) - stream.y[40:80])
    assert not np.allclose(outcome.scores[40:80], untrained_next, atol=1e-5)


def test_river_given_the_labels_a_message_at_a_time_predicts_each_message_first() -> None:
    """The same-protocol reference: no label of a message is learned before all its rows
    are predicted. River's linear regression predicts 0 until it learns."""
    stream = _linear4(120)
    per_message = learners.run_river("linear", stream, message_size=40)
    assert np.allclose(per_message.scores[:40], np.abs(stream.y[:40]), atol=1e-6)
    assert not np.allclose(per_message.scores[40:80], np.abs(stream.y[40:80]), atol=1e-6)
    per_sample = learners.run_river("linear", stream)
    assert not np.allclose(per_sample.scores[1:40], np.abs(stream.y[1:40]), atol=1e-6)


def test_rolling_means_the_last_window() -> None:
    assert rolling(np.array([1.0, 0.0, 1.0, 1.0]), 2).tolist() == [1.0, 0.5, 0.5, 1.0]


def test_the_service_answers_or_counts_every_request(
    redis_server: object, mosquitto_server: object, tmp_path: Path
) -> None:
    """Through the real worker processes: every message is asked for, and each request is
    answered or its error counted (the first ones come before any weights exist)."""
    stream = _linear4(160)
    stack = Stack(mosquitto_server.port, redis_server.port, tmp_path)
    service = Service(stack, stream, tmp_path)
    try:
        service.wait_ready()
        outcome = service.run(message_size=40, rate=0)
    finally:
        service.close()
    info = outcome.info
    assert info["requests"] == 4
    assert info["answered"] + sum(info["errors"].values()) == 4
    assert len(outcome.scores) == stream.n and np.isfinite(outcome.scores).all()
