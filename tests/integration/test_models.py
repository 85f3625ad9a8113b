"""Several models on one stack: isolation, and a user's own Keras model from a factory."""

from __future__ import annotations

import signal

import numpy as np

from streamlearn.contract.names import Names
from tests.conftest import eventually, plain_paho, samples_seen, served

TOML = """
[models.good]
inputs = 2
task = "regression"
factory = "tests.factories:tiny_regressor"

[models.good.learner]
buckets = [256]  # one padded size, one trace at each start: batch sizes are not this test's

[models.bad]
inputs = 2
task = "binary"

[models.bad.learner]
buckets = [256]
"""


def test_one_models_bad_input_and_crash_do_not_touch_another(
    start_role, client_for, redis, settings
):
    good, bad = (Names(m, settings.topic_prefix, settings.key_prefix) for m in ("good", "bad"))
    for model in ("good", "bad"):
        start_role("ingest", TOML, model)
    start_role("learner", TOML, "good")
    bad_learner = start_role("learner", TOML, "bad")
    start_role("actor", TOML, "good")

    bad_learner.proc.kill()  # the other model's learner dies
    device = plain_paho(settings)
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (400, 2))
    for i in range(0, 400, 20):
        chunk = x[i : i + 20]
        device.publish(good.samples_topic, _columnar(chunk, chunk[:, 0] - 2 * chunk[:, 1]), qos=1)
        device.publish(bad.samples_topic, b'{"x": [1, "nan"], "y": 3}', qos=1)
        device.publish(bad.samples_topic, b"\xff\xfe not json", qos=1).wait_for_publish(10)
    for i in range(5):  # valid samples of the model whose learner is dead wait in its stream
        device.publish(bad.samples_topic, f'{{"x": [{i}, 1], "y": 1}}', qos=1).wait_for_publish(10)
    device.disconnect()

    eventually(lambda: redis.xlen(bad.deadletter_key) == 40, 30, "bad input dead-lettered")
    assert redis.xlen(good.deadletter_key) == 0

    def trained_all() -> bool:
        groups = redis.xinfo_groups(good.samples_key)
        appended = int(redis.get(good.ingest_count_key) or 0)  # 20 messages of 20 samples
        return (
            appended == 400 and bool(groups) and (groups[0]["lag"], groups[0]["pending"]) == (0, 0)
        )

    eventually(trained_all, 60, "the good model trained on all its samples")
    client = client_for("good")
    probe = np.array([[0.5, 0.25], [-0.5, 0.5]])
    latest = int(redis.get(good.latest_key))
    # Served by an actor that built the factory's architecture and loaded its weights.
    reply = served(client, {"x": probe.tolist()}, latest)
    assert latest > 0
    assert len(reply["y"]) == 2 and all(np.isfinite(reply["y"]))
    # still dead, by the kill above: wait() rather than poll(), which reads None while a
    # SIGKILLed process has not exited yet (it read None once under pytest -n 4, loaded)
    assert bad_learner.proc.wait(30) == -signal.SIGKILL, "still dead"
    eventually(
        lambda: int(redis.get(bad.ingest_count_key) or 0) == 5, 30, "the bad model's valid samples"
    )
    # its initial weights, if it got that far
    assert samples_seen(redis, bad) == 0, "nobody learned them while its learner was dead"
    start_role("learner", TOML, "bad")  # restarted, it learns what waited for it
    eventually(lambda: redis.get(bad.latest_key) is not None, 60, "the bad model learned")
    eventually(lambda: redis.xpending(bad.samples_key, "learners")["pending"] == 0, 30, "acked")


def _columnar(x: np.ndarray, y: np.ndarray) -> str:
    import json

    return json.dumps({"x": x.tolist(), "y": y.tolist()})
