"""Pure checks of the actor's reply path: packed MQTT v5 properties, padded batch sizes and
remembered reply routes."""

from __future__ import annotations

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from streamlearn.actor.replies import ROUTE_KEY_CHARS, ROUTES_KEPT, ReplyRoutes
from streamlearn.contract.names import Names
from streamlearn.mqtt_packets import reply_properties, request_properties
from streamlearn.online.buckets import ladder


@pytest.mark.parametrize(
    ("topic", "correlation"),
    [("t/replies/x", b"\x00\x01id"), (None, b"k" * 300), ("r" * 200, b""), (None, bytes(16))],
)
def test_packed_properties_are_what_paho_packs_and_reads_back(topic, correlation):
    generic = Properties(PacketTypes.PUBLISH)
    if topic is not None:
        generic.ResponseTopic = topic
    generic.CorrelationData = correlation
    packed = request_properties(topic, correlation) if topic else reply_properties(correlation)

    assert packed.pack() == generic.pack()
    back = Properties(PacketTypes.PUBLISH)
    back.unpack(packed.pack())
    assert back.CorrelationData == correlation
    assert getattr(back, "ResponseTopic", None) == topic
    assert "CorrelationData" in str(packed)


def test_no_correlation_means_no_properties():
    assert reply_properties(None) is None


@pytest.mark.parametrize("max_batch", [1, 2, 4, 5, 16, 64, 100, 256])
def test_every_batch_size_pads_to_a_bucket_no_larger_than_max_batch(max_batch):
    buckets = ladder(max_batch)
    assert buckets == tuple(sorted(set(buckets)))
    assert buckets[0] == 1 and buckets[-1] == max_batch
    assert len(buckets) <= 6, "few sizes: each is compiled and warmed up once"


def test_routes_are_remembered_within_their_bound_and_answered_alike():
    """A remembered route is the one found afresh, refused ones too; the memory holds at
    most `ROUTES_KEPT` and no pair longer than `ROUTE_KEY_CHARS`, however many a client
    asks for."""
    routes, fresh = ReplyRoutes(Names("m", "p")), lambda: ReplyRoutes(Names("m", "p"))
    asked = [f"p/m/replies/me/{i}" for i in range(2 * ROUTES_KEPT)] + ["p/m/replies/you", None]
    for topic in asked + asked[-3:]:
        assert routes.route("p/m/predict/me", topic) == fresh().route("p/m/predict/me", topic)
        assert len(routes._kept) <= ROUTES_KEPT
    assert routes.route("p/m/predict/me", "p/m/replies/you").refused
    long = "p/m/replies/me/" + "x" * ROUTE_KEY_CHARS
    assert routes.route("p/m/predict/me", long).topic == long
    assert all(len(a or "") <= ROUTE_KEY_CHARS for _, a in routes._kept)
