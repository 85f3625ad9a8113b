"""Actor replies over real MQTT: request/response routing and errors before any weights."""

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


def test_requests_before_any_weights_get_an_error_reply(start_role, client_for, settings):
    start_role("actor", TOML)
    client = client_for("a")

    reply = client.request({"x": [0.1, 0.2], "id": 42})
    assert reply["id"] == 42
    assert "no weights published yet" in reply["error"]
    assert reply["model"] == "a"

    invalid = client.request({"x": [0.1, 0.2, 0.3], "id": "bad"})
    assert invalid["id"] == "bad"
    assert "shape [2]" in invalid["error"]


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
    assert all("error" in json.loads(m.payload) for m in got), "no weights yet, r3 invalid too"
