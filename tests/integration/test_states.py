"""Device states through a real broker, Redis and actor process: readings on a source topic
become retained per-device predictions with the version that served them, a flood of new
keys leaves at most `max_devices` states retained (the evicted ones cleared), and Home
Assistant's discovery configs are retained beside them."""

from __future__ import annotations

import json
import threading
import tomllib
import uuid
from collections.abc import Iterator

import paho.mqtt.client as paho
import pytest

from streamlearn.actor.discovery import object_id
from streamlearn.config import ModelConfig, Settings, parse_config
from streamlearn.contract.names import Names
from streamlearn.online import codec
from streamlearn.online.numpy_model import NumpyModel, initial
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually, plain_paho

TOML = """
[models.room]
inputs = ["temperature", "humidity"]
architecture = "linear"
sources = [{{ topic = "{devices}/+/SENSOR", key = "topic:1" }}]

[models.room.state]
every_s = 0
max_devices = 3
discovery = true
discovery_prefix = "{discovery}"
"""


class Watcher:
    """A subscriber that keeps every message it receives, in order."""

    def __init__(self, settings: Settings, filters: list[str]) -> None:
        self.got: list[paho.MQTTMessage] = []
        self._cond = threading.Condition()
        self.client = plain_paho(settings)
        self.client.on_message = self._on_message
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.subscribe([(f, 1) for f in filters])
        assert subscribed.wait(10), "SUBACK"

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.got.append(msg)
            self._cond.notify_all()

    def latest(self, prefix: str) -> dict[str, bytes]:
        """The last payload seen on each topic under `prefix` (b"": cleared)."""
        with self._cond:
            return {
                m.topic[len(prefix) :]: m.payload for m in self.got if m.topic.startswith(prefix)
            }

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def retained_under(settings: Settings, filters: list[str], marker: str) -> list[paho.MQTTMessage]:
    """What the broker retains under `filters`: all delivered once `marker` (retained,
    subscribed after them) arrives, as the broker sends a SUBSCRIBE's retained in order."""
    watcher = Watcher(settings, filters)
    try:
        watcher.client.subscribe(marker, 1)
        eventually(lambda: any(m.topic == marker for m in watcher.got), 10, "the marker")
        return [m for m in watcher.got if m.topic != marker and m.payload]
    finally:
        watcher.close()


@pytest.fixture
def service(start_role, settings, redis) -> Iterator[tuple[Names, str, str, str]]:
    """An actor serving version 1 of `room`, its state table on; the devices' topic root and
    the discovery prefix, both the test's own, and the config."""
    tag = settings.topic_prefix.replace("/", "-")
    devices, discovery = f"dev-{tag}", f"ha-{tag}"
    toml = TOML.format(devices=devices, discovery=discovery)
    cfg: ModelConfig = parse_config(tomllib.loads(toml)).model("room")
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    arrays = initial(cfg.spec, NumpyModel(cfg.spec).spec)
    assert WeightsStore(redis, names).publish(codec.encode(arrays)) == (1, True)
    start_role("actor", toml)
    yield names, devices, discovery, toml


def test_readings_become_retained_per_device_predictions_bounded_with_discovery(
    service, settings, start_role, redis
):
    names, devices, discovery, toml = service
    states = names.topic("state/")
    watcher = Watcher(settings, [states + "+", f"{discovery}/#"])
    device = plain_paho(settings)
    # a second actor: the broker hands each reading to either, and one bound holds for both
    start_role("actor", toml, instance="1")
    try:

        def read(key: str, t: float) -> None:
            payload = json.dumps({"temperature": t, "humidity": 40, "linkquality": 90})
            device.publish(f"{devices}/{key}/SENSOR", payload, qos=1).wait_for_publish(10)

        read("kitchen", 21.5)
        read("hall", 18.0)
        seen = eventually(
            lambda: (got := watcher.latest(states)).keys() >= {"kitchen", "hall"} and got,
            15,
            "both devices' states",
        )
        for key in ("kitchen", "hall"):
            state = json.loads(seen[key])
            assert state["key"] == key and state["version"] == 1 and state["model"] == "room"
            assert isinstance(state["y"], float) and state["at"] > 0

        flood = [f"flood-{i}" for i in range(12)]
        for i, key in enumerate(flood):
            read(key, i)
        # either actor may serve any reading, so the last one read is not the last state
        # out; what stays is the states the model's index keeps, the newest
        eventually(
            lambda: any(m.topic == states + flood[-1] and m.payload for m in watcher.got),
            15,
            "the last key's state",
        )

        def settled() -> bool:
            indexed = {k.decode() for k in redis.zrange(names.states_key, 0, -1)}
            shown = {k for k, p in watcher.latest(states).items() if p}
            configs = [json.loads(p) for p in watcher.latest(discovery + "/").values() if p]
            return shown == indexed == {c["state_topic"][len(states) :] for c in configs}

        # an actor's config may reach the broker after the other's clear of its key: the
        # actor checks the key once acknowledged, and clears it too
        eventually(settled, 15, "the retained states and configs those of the index")
    finally:
        device.loop_stop()
        device.disconnect()
        watcher.close()

    marker = names.topic("marker")
    marking = plain_paho(settings)
    marking.publish(marker, b"1", qos=1, retain=True).wait_for_publish(10)
    marking.disconnect()
    kept = retained_under(settings, [states + "+", f"{discovery}/#"], marker)
    kept_states = {
        m.topic[len(states) :]: json.loads(m.payload) for m in kept if m.topic.startswith(states)
    }
    assert 1 <= len(kept_states) <= 3, sorted(kept_states)  # 3 for both actors, not 3 each
    assert set(kept_states) <= set(flood), "kitchen and hall, the oldest, cleared"
    assert all(s["version"] == 1 for s in kept_states.values())
    configs = [json.loads(m.payload) for m in kept if m.topic.startswith(discovery + "/")]
    assert sorted(c["state_topic"] for c in configs) == sorted(states + k for k in kept_states)
    assert all(
        m.topic == f"{discovery}/sensor/{json.loads(m.payload)['unique_id']}/config"
        for m in kept
        if m.topic.startswith(discovery + "/")
    )

    # An actor that starts (a restart, or one more) takes in the states retained before
    # it, and clears those past its bound: none stays retained unbounded.
    watcher = Watcher(settings, [states + "+"])
    try:
        start_role("actor", toml.replace("max_devices = 3", "max_devices = 1"), instance="2")
        eventually(
            lambda: sum(not p for p in watcher.latest(states).values()) >= len(kept_states) - 1,
            15,
            "the states past the new actor's bound cleared",
        )
    finally:
        watcher.close()
    after = retained_under(settings, [states + "+"], marker)
    assert len(after) == 1, [m.topic for m in after]


def test_under_the_deploy_acl_only_actors_retain_states_and_a_device_reads_its_own(broker):
    """deploy/mosquitto/acl and the guard: the actor account retains states and discovery
    configs; a device reads its own state (`state/%c`), not another's, and retains none."""
    from tests.deployed import mqtt_url
    from tests.integration.test_deploy import NOT_AUTHORIZED, Peer, device

    names = Names(f"m{uuid.uuid4().hex[:8]}")
    config = f"homeassistant/sensor/{object_id(names.model, 'alice')}/config"
    actor = Peer(mqtt_url(broker, "actor"))
    alice = None
    try:
        for topic in (names.topic("state/alice"), names.topic("state/bob"), config):
            assert retain(actor, topic, b'{"y": 1}') in ACCEPTED, topic
        alice = device(broker, "alice", client_id="alice")
        assert retain(alice, names.topic("state/alice"), b'{"y": 2}') == NOT_AUTHORIZED
        alice.client.subscribe([(names.topic("state/#"), 1), (names.topic("replies/alice/#"), 1)])
        eventually(lambda: names.topic("state/alice") in alice.topics(), 10, "her own state")
        assert actor.publish(names.topic("replies/alice/1")) == 0  # after the retained ones
        alice.wait_for(names.topic("replies/alice/1"))
        assert alice.topics() == [names.topic("state/alice"), names.topic("replies/alice/1")]
        assert [m.payload for m in alice.got][0] == b'{"y": 1}', "the actor's, not hers"
    finally:
        for topic in (names.topic("state/alice"), names.topic("state/bob"), config):
            retain(actor, topic, b"")
        for peer in (actor, alice):
            if peer is not None:
                peer.close()


ACCEPTED = (0, 0x10)  # success; "no matching subscribers" (retained all the same)


def retain(peer, topic: str, payload: bytes) -> int:
    """Publish retained with QoS 1; the broker's PUBACK reason code."""
    mid = peer.client.publish(topic, payload, qos=1, retain=True).mid
    with peer._cond:
        assert peer._cond.wait_for(lambda: mid in peer.acks, 10), f"no PUBACK for {topic}"
        return peer.acks[mid]
