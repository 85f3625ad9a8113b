"""Versions per request against a real actor, Redis and Mosquitto: the right weights for
each version asked, unknown versions and labels refused from a cache, and loads off the
serving thread.

One actor serves the module (`kept_versions = 4`). Version v of the base model answers
exactly 1004 * v whatever x is (first layer: zero kernel, bias v; head: kernel of ones,
bias 1000 * v), so a reply shows which weights computed it.
"""

from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Iterator

import numpy as np
import paho.mqtt.client as paho
import pytest
import redis as redis_lib
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from streamlearn.config import Settings, parse_config
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.store.weights import WeightsStore
from tests.conftest import Client, eventually, launch_role, own_settings

TOML = """
[models.v]
inputs = 2
task = "regression"
hidden = [4]
heads = "last"  # one head: its weights make the reply name the version (see above)

[models.v.actor]
kept_versions = 4
reload_check_ms = 600000  # polls when a version or label is announced, not on a timer
status_every_ms = 200
"""
CFG = parse_config(tomllib.loads(TOML)).model("v")
X = [0.5, -0.5]


def answer(v: int) -> float:
    """What version v alone answers."""
    return 1004.0 * v


def weights(template: dict[str, np.ndarray], v: int) -> dict[str, np.ndarray]:
    out = {}
    for path, array in template.items():
        head = path.startswith("head")
        if "standardize" in path:
            out[path] = array
        elif path.endswith("bias"):
            out[path] = np.full_like(array, v * (1000 if head else 1))
        else:
            out[path] = np.ones_like(array) if head else np.zeros_like(array)
    return out


def blob(v: int) -> bytes:
    template = tensors.get_arrays(networks.build_model(CFG))
    return codec.encode(weights(template, v), {"version": str(v)})


class Asker(Client):
    """Publishes requests at once and keeps the replies in the order they came."""

    def __init__(self, settings: Settings, model: str) -> None:
        super().__init__(settings, model)
        self.topic = self.names.topic(f"predict/{self.device.client_id}")
        self.seq = 0

    def send(self, body: dict, expiry_s: int | None = None) -> int:
        self.seq += 1
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic, props.CorrelationData = self.reply_topic, self.seq.to_bytes(4, "big")
        if expiry_s is not None:
            props.MessageExpiryInterval = expiry_s
        self.client.publish(self.topic, json.dumps(body), qos=1, properties=props)
        return self.seq

    def replies(self, seqs: list[int], timeout_s: float = 30) -> list[tuple[int, dict]]:
        """(seq, reply) of each of `seqs`, in the order the replies came."""
        mine = set(seqs)

        def done() -> bool:
            return mine <= {_seq(m) for m in self.received}

        with self._cond:
            if not self._cond.wait_for(done, timeout_s):
                raise AssertionError(f"no reply to all of {seqs} within {timeout_s} s")
            got = [(_seq(m), json.loads(m.payload)) for m in self.received]
        return [(s, r) for s, r in got if s in mine]


def _seq(msg: paho.MQTTMessage) -> int:
    return int.from_bytes(msg.properties.CorrelationData, "big")


@pytest.fixture(scope="module")
def served(redis_server, mosquitto_server, tmp_path_factory) -> Iterator[tuple]:
    """The module's actor, versions 1..7 published (7 served) -> (settings, store, redis)."""
    settings = own_settings(redis_server, mosquitto_server)
    client = redis_lib.Redis.from_url(settings.redis)
    store = WeightsStore(client, Names("v", settings.topic_prefix, settings.key_prefix), keep=20)
    for v in range(1, 8):
        assert store.publish(blob(v))[0] == v
    config = tmp_path_factory.mktemp("versions") / "streamlearn.toml"
    config.write_text(TOML)
    actor = launch_role(settings, "actor", config)
    try:
        actor.wait_for(" ready")
        yield settings, store, client
    finally:
        actor.stop()
        for key in client.scan_iter(f"{settings.key_prefix}:*"):
            client.delete(key)
        client.close()


@pytest.fixture
def asker(served) -> Iterator[Asker]:
    made = Asker(served[0], "v")
    yield made
    made.close()


def store_reads(client) -> int:
    """Redis calls that read a blob, the versions kept or the labels (HGET, HKEYS, HGETALL)."""
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("hget", "hkeys", "hgetall"))


def test_each_version_of_a_batch_answers_with_its_own_weights(served, asker):
    """Versions 2, 3, 4, 5, 1 in one batch with 4 models kept: none gets another's model
    (a version loaded for the batch once took the model of one the batch still used)."""
    asked = [2, 2, 3, 4, 5, 1]  # the first alone: the others queue while it loads
    seqs = [asker.send({"x": X, "version": v}) for v in asked]
    replies = dict(asker.replies(seqs))
    for seq, v in zip(seqs, asked, strict=True):
        assert "error" not in replies[seq], replies[seq]
        assert (replies[seq]["version"], replies[seq]["y"]) == (v, pytest.approx(answer(v)))


def test_unknown_versions_and_labels_are_refused_from_a_cache_until_announced(served, asker):
    _, store, client = served
    first = asker.replies([asker.send({"x": X, "version": ref}) for ref in (8, "canary")])
    assert "version 8 is not kept" in first[0][1]["error"]
    assert "no version is labelled 'canary'" in first[1][1]["error"]

    before = store_reads(client)
    again = [asker.send({"x": X, "version": ref}) for _ in range(10) for ref in (8, "canary")]
    for _, reply in asker.replies(again):
        assert "not kept" in reply["error"] or "no version is labelled" in reply["error"]
    assert store_reads(client) - before < 5, "refused from the cache: no store read each"

    assert store.publish(blob(8))[0] == 8  # announced; then 9, so that 8 is not the one served
    assert store.publish(blob(9))[0] == 9
    store.label("canary", 3)

    def served_by(ref: int | str, v: int) -> bool:
        reply = asker.replies([asker.send({"x": X, "version": ref})])[0][1]
        return reply.get("version") == v and reply["y"] == pytest.approx(answer(v))

    eventually(lambda: served_by(8, 8), 10, "version 8 served once announced")
    eventually(lambda: served_by("canary", 3), 10, "the label served once set")


def test_a_default_request_is_not_held_up_by_a_version_being_loaded(served, asker):
    """While Redis holds up the fetch of a version not loaded, a request for the version
    served, sent after it, is answered first (it needs no Redis)."""
    _, _, client = served
    client.client_pause(1500, all=True)  # every Redis client's commands wait 1.5 s
    slow = asker.send({"x": X, "version": 6})
    time.sleep(0.2)  # the actor has taken the first request before this one comes
    fast = asker.send({"x": X})
    replies = asker.replies([slow, fast])
    assert [seq for seq, _ in replies] == [fast, slow], replies
    for _, reply in replies:
        assert reply["y"] == pytest.approx(answer(reply["version"]))
    assert dict(replies)[slow]["version"] == 6


def test_a_request_whose_label_loads_past_its_deadline_gets_the_deadline_error(served, asker):
    """Its Message Expiry (1 s) passes while Redis holds up the read of its label (2 s)."""
    _, _, client = served
    client.client_pause(2000, all=True)
    late = asker.send({"x": X, "version": "late"}, expiry_s=1)
    reply = asker.replies([late])[0][1]
    assert reply.get("error", "").startswith("deadline exceeded"), reply


def test_one_clients_flood_of_versions_to_load_leaves_room_for_anothers(served, asker):
    """Issue 62, finding 8: while Redis holds up the loads (paused 2 s), one client asks for
    80 labels never set: past its share of the loader's queue (8 of 64) each is refused at
    once; another client's request for a label just set still waits its turn, and is
    served by that label's version. Before, the flood took all 64 places."""
    settings, store, client = served
    store.label("ctl", 2)
    flooder = Asker(settings, "v")

    def refused() -> int:
        with flooder._cond:
            return sum(b"retry later" in m.payload for m in flooder.received)

    try:
        client.client_pause(2000, all=True)
        flood = [flooder.send({"x": X, "version": f"bogus-{i}"}) for i in range(80)]
        eventually(lambda: refused() >= 10, 10, "the flood's requests past the queue refused")
        mine = asker.send({"x": X, "version": "ctl"})
        [(_, reply)] = asker.replies([mine])
        assert (reply.get("version"), reply.get("y")) == (2, pytest.approx(answer(2))), reply
        flooded = [r for _, r in flooder.replies(flood)]
    finally:
        flooder.close()
    assert sum("its share (1/8)" in r.get("error", "") for r in flooded) >= 70, flooded[-3:]
    assert sum("no version is labelled" in r.get("error", "") for r in flooded) <= 9
