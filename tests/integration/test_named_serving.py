"""A categorical input through the whole service: named samples with extra and missing fields
on a device topic are learned, and the actor's replies depend on the category, one-hot
inside the model; an unseen value and a missing input are answered, not refused.
Real mosquitto, Redis, ingest, learner and actor."""

from __future__ import annotations

import json
import random

from streamlearn import Client, PredictionError
from streamlearn.contract.names import Names
from tests.conftest import eventually, plain_paho, trained

TOML = """
[models.press]
inputs = ["temperature", "load", "machine_type"]
target = "failed"
task = "binary"
hidden = [16]
learning_rate = 0.02
categorical = { machine_type = ["press", "lathe", "mill"] }

[[models.press.sources]]
topic = "plant/+/telemetry"
"""


def test_a_categorical_input_decides_the_served_prediction(start_role, settings):
    for role in ("ingest", "learner", "actor"):
        start_role(role, TOML)
    names = Names("press", settings.topic_prefix, settings.key_prefix)
    rng = random.Random(7)
    device = plain_paho(settings)
    sent = 1200
    try:  # only mills fail, whatever their temperature and load
        for i in range(sent):
            kind = ("press", "lathe", "mill")[i % 3]
            doc = {
                "temperature": round(rng.uniform(60, 90), 1),
                "load": round(rng.uniform(0, 1), 2),
                "machine_type": kind,
                "failed": int(kind == "mill"),
                "rssi": -60,  # a field the model does not use
                "firmware": "2.1",
            }
            if i % 10 == 0:
                del doc["load"]  # missing now and then: imputed with its running mean
            topic = f"plant/m{i % 5}/telemetry"
            device.publish(topic, json.dumps(doc), qos=1).wait_for_publish(10)
    finally:
        device.loop_stop()
        device.disconnect()

    eventually(
        lambda: trained(settings, names) >= sent, 120, "the learner trained on every named sample"
    )

    with Client(settings.mqtt, topic_prefix=settings.topic_prefix) as client:

        def predict(kind: str, **fields: object) -> float:
            return client.predict(
                "press", {"temperature": 75.0, "load": 0.5, "machine_type": kind, **fields}
            ).y

        def learned() -> bool:
            try:
                return predict("mill") > 0.8 and predict("press") < 0.2
            except PredictionError:  # no version yet
                return False

        eventually(learned, 60, "replies that follow the category")
        assert predict("lathe") < 0.2
        assert predict("mill", load=None) > 0.8, "a missing input is imputed, not refused"
        unseen = predict("drill")  # all zeros one-hot: between what the model knows
        assert 0.0 <= unseen <= 1.0
