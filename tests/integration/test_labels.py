"""Labels that come later, joined by id to the predictions actors served: each becomes one
sample, a repeated label none, an unknown id a dead letter; and the served score in the
learner's status is the one the replies make."""

from __future__ import annotations

import json
import math
import random
import time

import numpy as np

from streamlearn.contract.names import Names
from tests.conftest import eventually, plain_paho, published, retained

TOML = """
[models.l]
inputs = 2
task = "binary"
architecture = "linear"
"""
N = 600


def stored(redis, names: Names) -> int:
    """Samples ever appended (the learner may have trimmed the stream since)."""
    return int(redis.get(names.ingest_count_key) or 0)


def test_labels_join_served_predictions_once_and_score_them(
    start_role, client_for, redis, settings
):
    names = Names("l", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML)
    start_role("learner", TOML)
    start_role("actor", TOML)
    client = client_for("l")
    rng = random.Random(7)
    client.publish_samples([{"x": [rng.random(), rng.random()], "y": i % 2} for i in range(64)])
    eventually(lambda: published(redis, names)[0] >= 1, 60, "a first version")

    replies = [client.request({"x": [rng.random(), rng.random()], "id": f"r{i}"}) for i in range(N)]
    assert all("error" not in r for r in replies)
    served = time.time()
    labels = {r["id"]: rng.randint(0, 1) for r in replies}
    time.sleep(5)  # the labels come later

    device = plain_paho(settings)
    try:

        def send(items: list[dict]) -> None:
            body = json.dumps({"labels": items})
            device.publish(names.labels_topic, body, qos=1).wait_for_publish(10)

        items = [{"id": i, "y": y} for i, y in labels.items()]
        for start in range(0, N, 100):
            send(items[start : start + 100])
        arrived = time.time()
        eventually(lambda: stored(redis, names) == 64 + N, 30, "a sample per label")
        send(items[:50])  # a second copy adds nothing
        send([{"id": "never-served", "y": 1}, {"id": "r1", "y": 7}])
    finally:
        device.disconnect()
    # one ingest takes the messages in order: the copies were judged before these
    eventually(lambda: redis.xlen(names.deadletter_key) == 2, 30, "the dead letters")
    assert stored(redis, names) == 64 + N

    letters = [f for _, f in redis.xrange(names.deadletter_key)]
    kinds = sorted(f[b"kind"].decode() for f in letters)
    assert kinds == ["bad_target", "unknown_id"]
    assert any(b"never-served" in f[b"reason"] for f in letters)

    def score() -> dict | None:
        status = retained(settings, names.status_topic)
        done = status and status.get("served") and status["served"]["unknown"] == 1
        return status["served"] if done else None

    got = eventually(score, 60, "the served score in the status")
    p = np.clip([r["y"] for r in replies], 1e-7, 1 - 1e-7)
    y = np.array([labels[r["id"]] for r in replies], np.float64)
    loss = float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))
    accuracy = sum((r["y"] > 0.5) == (labels[r["id"]] > 0.5) for r in replies) / N
    assert got["labels"] == N
    assert math.isclose(got["loss"], loss, abs_tol=1e-4)
    assert got["accuracy"] == accuracy
    assert 5 <= got["delay_p50_s"] <= got["delay_p95_s"] <= arrived - served + 5 + 1
