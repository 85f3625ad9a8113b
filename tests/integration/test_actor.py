"""Actor replies over real MQTT: request/response routing, and what a model answers before
its learner's first version."""

from __future__ import annotations

import json
import uuid

import paho.mqtt.client as paho

from streamlearn.contract.names import Names
from tests.conftest import eventually, plain_paho

TOML = """
[models.a]
inputs = 2
task = "binary"
"""


def test_a_built_in_model_answers_its_prior_before_any_weights(start_role, client_for, settings):
    """No learner, nothing published: the first request gets a prediction, the model's
    initial state (its prior), and `version` 0 says so; served without TensorFlow."""
    actor = start_role("actor", TOML)
    actor.wait_for("forward pass by numpy")
    client = client_for("a")

    reply = client.request({"x": [0.1, 0.2], "id": 42})
    assert reply == {"id": 42, "y": 0.5, "version": 0, "model": "a", "variant": "base"}

    invalid = client.request({"x": [0.1, 0.2, 0.3], "id": "bad"})
    assert invalid["id"] == "bad"
    assert "shape [2]" in invalid["error"]


def test_a_factory_model_says_no_weights_before_the_first_version(start_role, client_for):
    """A user's own model is served by TensorFlow, and its initial state is not known to
    be its prior: an error reply until the learner publishes."""
    toml = '[models.a]\ninputs = 2\nfactory = "tests.factories:tiny_regressor"\n'
    actor = start_role("actor", toml)
    actor.wait_for("forward pass by tensorflow")
    reply = client_for("a").request({"x": [0.1, 0.2], "id": 7})
    assert reply["id"] == 7 and "no weights published yet" in reply["error"], reply


def test_mqtt311_client_gets_the_reply_on_reply_to(start_role, settings):
    names = Names("a", settings.topic_prefix, settings.key_prefix)
    start_role("actor", TOML)
    reply_to = names.topic(f"replies/{uuid.uuid4().hex[:8]}")
    got: list[paho.MQTTMessage] = []
    subscribed: set[int] = set()
    legacy = plain_paho(settings)  # MQTT 3.1.1: no response topic, no correlation data
    legacy.on_message = lambda _c, _u, msg: got.append(msg)
    legacy.on_subscribe = lambda _c, _u, mid, _codes, _props: subscribed.add(mid)
    try:
        mids = {legacy.subscribe(t, qos=1)[1] for t in (reply_to, names.predictions_topic)}
        eventually(lambda: mids <= subscribed, 10, "the SUBACKs of the reply topics")
        legacy.publish(
            names.predict_topic, json.dumps({"x": [1, 2], "id": "r1", "reply_to": reply_to}), qos=1
        )
        legacy.publish(names.predict_topic, json.dumps({"x": [1, 2], "id": "r2"}), qos=1)
        legacy.publish(
            names.predict_topic, json.dumps({"x": [1], "id": "r3", "reply_to": reply_to}), qos=1
        )
        eventually(lambda: len(got) >= 3, 10, "three replies")
    finally:
        legacy.disconnect()
    by_id = {json.loads(m.payload)["id"]: m.topic for m in got}
    assert by_id == {"r1": reply_to, "r2": names.predictions_topic, "r3": reply_to}
    answers = {json.loads(m.payload)["id"]: json.loads(m.payload) for m in got}
    assert answers["r1"]["version"] == answers["r2"]["version"] == 0, "the prior, as version 0"
    assert "error" in answers["r3"], "r3 is invalid"
