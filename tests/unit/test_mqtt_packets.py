"""`mqtt_packets.ReadProperties`, what paho's decoders now build for every packet's properties,
read exactly as paho's own `Properties` reads them: the same attributes for every
property a packet can carry, the same refusals for a malformed one."""

from __future__ import annotations

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import MQTTException, Properties

from streamlearn import mqtt, mqtt_packets

PUBLISH = {
    "PayloadFormatIndicator": 1,
    "MessageExpiryInterval": 60,
    "TopicAlias": 3,
    "ResponseTopic": "m/replies/\ufeffa",  # U+FEFF: MQTT 5 allows it (`mqtt_packets._read_utf`)
    "CorrelationData": b"\x00\x01\xff",
    "UserProperty": [("a", "1"), ("b", "2")],
    "SubscriptionIdentifier": [1, 300_000],
    "ContentType": "application/json",
}
CONNACK = {
    "SessionExpiryInterval": 3600,
    "ReceiveMaximum": 20,
    "MaximumQoS": 1,
    "RetainAvailable": 0,
    "MaximumPacketSize": 1 << 20,
    "AssignedClientIdentifier": "auto-1",
    "TopicAliasMaximum": 10,
    "ReasonString": "fine",
    "UserProperty": [("k", "v")],
    "WildcardSubscriptionAvailable": 1,
    "SubscriptionIdentifierAvailable": 1,
    "SharedSubscriptionAvailable": 0,
    "ServerKeepAlive": 30,
    "ResponseInformation": "r",
    "ServerReference": "s",
    "AuthenticationMethod": "m",
    "AuthenticationData": b"d",
}


def _packed(packet_type: int, values: dict) -> bytes:
    props = Properties(packet_type)
    for name, value in values.items():
        setattr(props, name, value)
    return props.pack()


def _read(cls: type[Properties], packet_type: int, data: bytes) -> dict | str:
    """The attributes read, or the refusal's type as paho's decoders raise it."""
    try:
        props, used = cls(packet_type).unpack(data)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return type(exc).__name__
    return {**props.json(), "used": used, "str": str(props), "empty": props.isEmpty()}


def _vbi(n: int) -> bytes:
    return bytes((n,))  # < 128 here


def _raw(*props: bytes) -> bytes:
    body = b"".join(props)
    return _vbi(len(body)) + body


def _string(ident: int, text: bytes) -> bytes:
    return bytes((ident,)) + len(text).to_bytes(2, "big") + text


MALFORMED = {
    "a property twice": _raw(_string(8, b"a"), _string(8, b"b")),
    "an unknown identifier": _raw(b"\x7f\x00"),
    "a CONNECT property in a PUBLISH": _raw(b"\x11\x00\x00\x00\x01"),
    "a payload format of 2": _raw(b"\x01\x02"),
    "a string past the properties": _raw(b"\x08\x00\x09ab"),
    "a surrogate": _raw(_string(8, b"\xed\xa0\x80")),
    "a NUL": _raw(_string(8, b"a\x00")),
    "no value": _raw(b"\x02"),
    "a length past the packet": b"\x20\x08",
}


@pytest.mark.parametrize(
    ("packet_type", "values"),
    [
        (PacketTypes.PUBLISH, PUBLISH),
        (PacketTypes.PUBLISH, {}),
        (PacketTypes.PUBLISH, {"CorrelationData": b"c", "ResponseTopic": "t"}),
        (PacketTypes.CONNACK, CONNACK),
    ],
)
def test_every_property_reads_as_pahos_own(packet_type, values):
    data = _packed(packet_type, values) + b"payload"
    ours = _read(mqtt_packets.ReadProperties, packet_type, data)
    assert ours == _read(Properties, packet_type, data)
    assert isinstance(ours, dict)
    assert {k: ours[k] for k in values} == {
        k: v.hex() if k == "CorrelationData" else list(v) if isinstance(v, list) else v
        for k, v in values.items()
    }


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_property_is_refused_as_paho_refuses_it(data):
    ours = _read(mqtt_packets.ReadProperties, PacketTypes.PUBLISH, data)
    assert isinstance(ours, str)
    assert ours == _read(Properties, PacketTypes.PUBLISH, data)


def test_pahos_client_reads_a_publish_with_it_and_a_malformed_one_stays_malformed():
    client = mqtt.BufferedClient(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    got: list = []
    client.on_message = lambda _c, _u, message: got.append(message)
    topic = b"m/predict/c"
    head = len(topic).to_bytes(2, "big") + topic
    client._in_packet = {"command": 0x30, "packet": head + _packed(PacketTypes.PUBLISH, PUBLISH)}
    client._handle_publish()
    assert type(got[0].properties) is mqtt_packets.ReadProperties
    assert got[0].properties.ResponseTopic == PUBLISH["ResponseTopic"]
    client._in_packet["packet"] = head + MALFORMED["a property twice"]
    with pytest.raises(MQTTException):  # paho 2.2: MalformedPacket, one
        client._handle_publish()
    assert len(got) == 1
