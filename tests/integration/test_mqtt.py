"""`mqtt.BufferedClient` against a real mosquitto: what its overrides of paho's private
read and acknowledgement paths must keep (every message whole, in order; a PUBACK for
exactly what `ack_many` was given, on the connection that delivered it)."""

from __future__ import annotations

import threading
import uuid

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from streamlearn import mqtt, mqtt_packets
from streamlearn.config import Settings
from tests.conftest import eventually, plain_paho


def _sizes() -> list[int]:
    """Tiny, ordinary and larger than one 64 KiB read, so packets straddle the reads."""
    return [1, 100, 70_000, 5, 200_000, *([120] * 900), 65_536, 3]  # < max_inflight_messages


def _payload(i: int, size: int) -> bytes:
    return (b"%d:" % i + bytes(range(256)) * (size // 256 + 1))[:size]


def _subscriber(settings: Settings, topic: str, got: list, client_id: str) -> mqtt.BufferedClient:
    def on_message(_c: object, _u: object, msg: object) -> None:
        got.append((msg.mid, msg.payload))  # type: ignore[attr-defined]

    return mqtt.connect(
        settings.mqtt,
        client_id,
        subscriptions=[(topic, 1)],
        on_message=on_message,
        manual_ack=True,
        persistent=True,
    )


def _publish(settings: Settings, topic: str, payloads: list[bytes]) -> None:
    device = plain_paho(settings)
    for info in [device.publish(topic, p, qos=1) for p in payloads]:
        info.wait_for_publish(30)
    device.disconnect()
    device.loop_stop()


def test_every_message_arrives_whole_and_in_order_across_buffered_reads(settings):
    topic = f"{settings.topic_prefix}/buffered"
    sent = [_payload(i, n) for i, n in enumerate(_sizes())]
    got: list = []
    client = _subscriber(settings, topic, got, f"t-{uuid.uuid4().hex[:8]}")
    try:
        _publish(settings, topic, sent)
        eventually(lambda: len(got) >= len(sent), 30, "every message")
        assert [p for _, p in got] == sent
    finally:
        mqtt.close(client)


def test_ack_many_acknowledges_exactly_what_it_was_given(settings):
    """Half acknowledged in one write: after a reconnect (same session), the broker
    redelivers the other half and nothing of the first."""
    topic = f"{settings.topic_prefix}/acks"
    client_id = f"t-{uuid.uuid4().hex[:8]}"
    sent = [b"m%d" % i for i in range(400)]
    got: list = []
    client = _subscriber(settings, topic, got, client_id)
    _publish(settings, topic, sent)
    # Distinct payloads: a redelivery (after a reconnect under load) must not pass for
    # a message that has not come yet, which would then go unacknowledged.
    eventually(lambda: len({p for _, p in got}) >= len(sent), 30, "every message")
    client.ack_many((client.generation, mid) for mid, p in got if int(p[1:]) % 2 == 0)
    eventually(lambda: not client.want_write(), 10, "the PUBACKs written")
    mqtt.close(client)

    again: list = []
    client = _subscriber(settings, topic, again, client_id)
    try:
        eventually(lambda: len(again) >= len(sent) // 2, 30, "the redelivery")
        threading.Event().wait(0.5)  # nothing more comes
        assert sorted(p for _, p in again) == sorted(p for p in sent if int(p[1:]) % 2)
        client.ack_many((client.generation, mid) for mid, _ in again)
    finally:
        mqtt.close(client)


def test_acks_of_an_earlier_connection_are_not_sent():
    """After a reconnect a packet id may name another message: an ack taken on the old
    connection is dropped (the broker redelivers that message)."""
    client = mqtt.BufferedClient(CallbackAPIVersion.VERSION2)  # never connected
    client.generation = 2
    client.ack_many([(1, 5), (1, 6)])
    assert not client.want_write()
    client.ack_many([(1, 5), (2, 7), (2, 8)])
    assert [p["packet"] for p in client._out_packet] == [b"\x40\x02\x00\x07\x40\x02\x00\x08"]


def test_puback_packet():
    assert mqtt_packets.puback(0x1234) == b"\x40\x02\x12\x34"


def test_publish_many_delivers_each_reply_as_pahos_publish_would(settings):
    """A batch's replies in one write: a plain paho v5 subscriber gets each one whole, in
    order, on its topic, with its correlation data (or none), as from paho's `publish`."""
    topic = f"{settings.topic_prefix}/replies"
    got: list = []
    subscriber = plain_paho(settings, paho.MQTTv5)
    subscriber.on_message = lambda _c, _u, m: got.append(
        (m.topic, m.payload, getattr(m.properties, "CorrelationData", None))
    )
    subscriber.subscribe(f"{topic}/#")
    replies = [
        (f"{topic}/a", b'{"y": 1}', b"\x00\x01"),
        (f"{topic}/b/c", _payload(1, 70_000), None),  # over one 64 KiB read
        (f"{topic}/a", b"", b"c" * 300),  # correlation data longer than one length byte
    ]
    client = mqtt.connect(settings.mqtt, f"t-{uuid.uuid4().hex[:8]}")
    try:
        # subscribed once its own message comes back
        eventually(lambda: subscriber.publish(f"{topic}/x", b"-") and got, 10, "the subscription")
        client.publish(*replies[0][:2], properties=mqtt_packets.reply_properties(replies[0][2]))
        assert client.publish_many([mqtt_packets.publish_packet(*r) for r in replies])
        ours = lambda: [g for g in got if g[0] != f"{topic}/x"]  # noqa: E731
        eventually(lambda: len(ours()) >= 4, 10, "every reply")
        assert ours() == [replies[0], *replies]
    finally:
        mqtt.close(client)
        subscriber.disconnect()
        subscriber.loop_stop()


def test_publish_many_queues_nothing_while_not_connected():
    client = mqtt.BufferedClient(CallbackAPIVersion.VERSION2)  # never connected
    assert not client.publish_many([mqtt_packets.publish_packet("a/b", b"1", None)])
    assert not client.want_write()
