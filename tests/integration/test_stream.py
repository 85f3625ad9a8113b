"""End to end, every hop real: paho device -> mosquitto -> ingest -> Redis -> learner ->
Redis weights -> actor processes -> MQTT replies."""

from __future__ import annotations

import json
import threading
import time

import numpy as np

from streamlearn.contract.names import Names
from tests.conftest import eventually, plain_paho, samples_seen, settled

TOML = """
[models.f]
inputs = 4
task = "regression"
architecture = "mlp"
hidden = [32]
learning_rate = 0.02

[models.f.learner]
max_batch = 16
"""
SAMPLES = 3000
# Tolerance on held-out points; always predicting the mean would be off by ~1.0 on average.
MEAN_ABS_TOLERANCE = 0.15
MAX_ABS_TOLERANCE = 0.5


def known(x: np.ndarray) -> np.ndarray:
    return 2 * x[:, 0] - x[:, 1] + 0.5 * x[:, 2] + 0.3


def announced_versions(redis, channel: str, stop: threading.Event, out: list[int]) -> None:
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    while not stop.is_set():
        msg = pubsub.get_message(timeout=0.2)
        if msg is not None:
            out.append(int(msg["data"]))
    pubsub.close()


def test_stream_learns_a_known_function_and_actors_serve_it(
    start_role, client_for, redis, settings
):
    names = Names("f", settings.topic_prefix, settings.key_prefix)
    start_role("learner", TOML)
    start_role("ingest", TOML)
    actor = start_role("actor", TOML)
    versions: list[int] = []
    stop = threading.Event()
    listener = threading.Thread(
        target=announced_versions, args=(redis, names.weights_channel, stop, versions)
    )
    listener.start()

    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (SAMPLES, 4))
    y = known(x)
    device = plain_paho(settings)  # a device with nothing but paho
    started = time.monotonic()
    infos = [
        device.publish(
            names.samples_topic,
            json.dumps({"x": xi.tolist(), "y": float(yi), "id": f"s{i}"}),
            qos=1,
        )
        for i, (xi, yi) in enumerate(zip(x, y, strict=True))
    ]
    for info in infos:
        info.wait_for_publish(30)
    published = time.monotonic()

    def all_trained() -> bool:
        groups = redis.xinfo_groups(names.samples_key)
        appended = int(redis.get(names.ingest_count_key) or 0)  # samples, whatever the entries
        return (
            appended == SAMPLES
            and bool(groups)
            and (groups[0]["lag"], groups[0]["pending"]) == (0, 0)
        )

    eventually(all_trained, 120, "learner trained on every sample")
    trained = time.monotonic()

    def trained_on_all() -> bool:
        return samples_seen(redis, names) == SAMPLES

    eventually(trained_on_all, 10, "a version trained on every sample published")
    eventually(
        lambda: settled(settings, redis, names, SAMPLES),
        60,
        "the learner replayed its budget and published what it learned",
    )
    eventually(lambda: versions[-1] == int(redis.get(names.latest_key)), 5, "it was announced")
    stop.set()
    listener.join()
    print(
        f"\n{SAMPLES} samples: published in {published - started:.2f} s, all trained after "
        f"{trained - started:.2f} s ({SAMPLES / (trained - started):,.0f} samples/s through "
        f"the stack), {len(versions)} versions"
    )

    assert versions == sorted(set(versions)), "versions only increase"
    latest = int(redis.get(names.latest_key))
    x_test = rng.uniform(-1, 1, (20, 4))
    client = client_for("f")
    replies = [client.request({"x": x_test.tolist(), "id": "eval"})]
    # The actor swaps the announced version in between batches, within moments.
    while replies[-1]["version"] < latest and len(replies) < 50:
        time.sleep(0.1)
        replies.append(client.request({"x": x_test.tolist(), "id": "eval"}))
    reply = replies[-1]
    assert reply["version"] == latest > 0
    assert reply["id"] == "eval" and reply["model"] == "f"
    err = np.abs(np.array(reply["y"]) - known(x_test))
    assert err.mean() < MEAN_ABS_TOLERANCE, err
    assert err.max() < MAX_ABS_TOLERANCE, err

    # A second actor started later serves the same version with the same predictions.
    start_role("actor", TOML, instance="1")
    actor.stop()
    reply2 = client_for("f").request({"x": x_test.tolist()})
    assert reply2["version"] == latest
    np.testing.assert_allclose(reply2["y"], reply["y"], rtol=1e-5, atol=1e-6)
