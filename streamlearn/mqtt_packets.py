"""MQTT v5 packets and properties as paho reads and writes them, at a fraction of its cost.

paho builds and reads every packet's properties with its generic `Properties` (tables built
per packet, names scanned per property); at thousands of messages a second that was as
much as the rest of a request's or reply's way. Here: received properties read with shared
tables (`ReadProperties`, installed in paho's decoders on import), request and reply
properties packed once (`PackedProperties`), whole QoS 0 PUBLISH and PUBACK packets built
as bytes for `mqtt.BufferedClient`'s joined writes, and U+FEFF accepted in a string, as
MQTT 5 requires. Figures: docs/benchmarks/index.md.
"""

from __future__ import annotations

from typing import Any

import paho.mqtt.client as mqtt
import paho.mqtt.properties as _paho_properties
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import MalformedPacket, MQTTException, Properties, VariableByteIntegers

PUBACK = 0x40
_PUBLISH_QOS0 = 0x30


def _read_utf(buffer: bytes, maxlen: int) -> tuple[str, int]:
    """paho's `readUTF`, except that U+FEFF is accepted, as MQTT 5 requires (1.5.4-3: it
    "MUST NOT be skipped over or stripped off by a packet receiver").

    paho 2.2 treats U+FEFF in any string property as a malformed packet and drops the
    connection, and Mosquitto passes such a Response Topic on: one request carrying it
    would disconnect every actor it reached. The actor refuses the topic itself and
    answers with an error reply instead.
    """
    if maxlen < 2:
        raise MalformedPacket("Not enough data to read string length")
    length = _paho_properties.readInt16(buffer)
    if length > maxlen - 2:
        raise MalformedPacket("Length delimited string too long")
    text = buffer[2 : 2 + length].decode("utf-8")
    if "\x00" in text:
        raise MalformedPacket("[MQTT-1.5.4-2] Null found in UTF-8 data")
    # No scan for U+D800-DFFF (MQTT-1.5.4-1), as paho's: a strict UTF-8 decode refuses
    # them already (UnicodeDecodeError, a malformed packet to paho's decoders).
    return text, length + 2


_paho_properties.readUTF = _read_utf


_PAHO = Properties(PacketTypes.PUBLISH)  # paho's tables, built once: its property types


class ReadProperties(Properties):
    """paho's `Properties` as its decoders read them from a packet, at a fraction of the
    cost: the same attributes, checks and errors.

    paho builds three tables for each packet it reads and scans its 27 property names for
    each property: 28 us to decode a request's PUBLISH (its Response Topic and Correlation
    Data), 6 us here, where the tables are shared and the names looked up. A property
    paho's `__setattr__` checks (a range, a list, the packet type) still goes through it.
    paho's decoders use it (`paho.mqtt._packet.Properties`, paho 2.1's
    `paho.mqtt.client.Properties`: set below); `tests/unit/test_mqtt_packets.py` holds
    it to paho's own for every property.
    """

    types, names, properties = _PAHO.types, _PAHO.names, _PAHO.properties

    def __init__(self, packetType: int) -> None:
        object.__setattr__(self, "packetType", packetType)

    def getIdentFromName(self, compressedName: str) -> int:
        return _IDENTS.get(compressedName, -1)

    def getNameFromIdent(self, identifier: int) -> str | None:
        return _SPACED.get(identifier)

    def allowsMultiple(self, compressedName: str) -> bool:
        return _IDENTS.get(compressedName) in _MULTIPLE

    def clear(self) -> None:
        for name in [n for n in vars(self) if n in _IDENTS]:
            object.__delattr__(self, name)

    def readProperty(self, buffer: bytes, type: int, propslen: int) -> tuple[Any, int]:
        if type == _UTF8:
            return _read_utf(buffer, propslen)
        return super().readProperty(buffer, type, propslen)

    def unpack(self, buffer: bytes) -> tuple[ReadProperties, int]:
        """paho's `unpack`, step for step."""
        self.clear()
        propslen, used = VariableByteIntegers.decode(buffer)
        buffer, left = buffer[used:], propslen
        while left > 0:
            ident, n = VariableByteIntegers.decode(buffer)
            buffer, left = buffer[n:], left - n
            kind, packets = self.properties[ident]
            value, n = self.readProperty(buffer, kind, left)
            buffer, left = buffer[n:], left - n
            name = _NAMES[ident]
            if ident not in _MULTIPLE and name in vars(self):
                raise MQTTException(f"Property '{name}' must not exist more than once")
            if ident in _CHECKED or self.packetType not in packets:
                setattr(self, name, value)  # paho's checks and messages
            else:
                object.__setattr__(self, name, value)
        return self, propslen + used


_IDENTS = {name.replace(" ", ""): ident for name, ident in ReadProperties.names.items()}
_NAMES = {ident: name for name, ident in _IDENTS.items()}
_SPACED = {ident: name for name, ident in ReadProperties.names.items()}
_MULTIPLE = {_IDENTS["SubscriptionIdentifier"], _IDENTS["UserProperty"]}
# What paho's `__setattr__` checks beyond the packet type: a range, or a list to extend.
_CHECKED = _MULTIPLE | {
    _IDENTS[name]
    for name in (
        "ReceiveMaximum",
        "TopicAlias",
        "TopicAliasMaximum",
        "MaximumPacketSize",
        "RequestResponseInformation",
        "RequestProblemInformation",
        "PayloadFormatIndicator",
    )
}
_UTF8 = ReadProperties.types.index("UTF-8 Encoded String")
try:  # paho 2.2 decodes packets in `_packet`, 2.1 in its client module
    import paho.mqtt._packet as _paho_decoders
except ImportError:  # paho 2.1
    _paho_decoders = mqtt  # type: ignore[misc]
_paho_decoders.Properties = ReadProperties  # type: ignore[misc]


def puback(mid: int) -> bytes:
    """A PUBACK with reason Success and no properties: MQTT 5 lets both be left out."""
    return bytes((PUBACK, 2, mid >> 8, mid & 0xFF))


class PackedProperties(Properties):
    """PUBLISH properties of request/response, packed once.

    paho's generic `Properties` costs ~50 us to build and pack per message, as much as the
    rest of a reply; paho's publish only calls `pack()`, so this packs at construction.
    """

    types, names, properties = _PAHO.types, _PAHO.names, _PAHO.properties
    _packed: bytes  # set at construction

    def __init__(self, response_topic: str | None, correlation: bytes | None) -> None:
        set_ = object.__setattr__
        set_(self, "packetType", PacketTypes.PUBLISH)
        if response_topic is not None:
            set_(self, "ResponseTopic", response_topic)
        if correlation is not None:
            set_(self, "CorrelationData", correlation)
        set_(self, "_packed", _packed_properties(response_topic, correlation))

    def pack(self) -> bytes:
        return self._packed


def _packed_properties(response_topic: str | None, correlation: bytes | None) -> bytes:
    """A PUBLISH's properties as MQTT v5 packs them: Response Topic, Correlation Data."""
    packed = b""
    if response_topic is not None:
        topic = response_topic.encode()
        packed += b"\x08" + len(topic).to_bytes(2, "big") + topic
    if correlation is not None:
        packed += b"\x09" + len(correlation).to_bytes(2, "big") + correlation
    return VariableByteIntegers.encode(len(packed)) + packed


def publish_packet(topic: str, payload: bytes, correlation: bytes | None) -> bytes:
    """A QoS 0 MQTT v5 PUBLISH of `payload` echoing `correlation`, byte for byte as paho's
    `publish` builds it (for `BufferedClient.publish_many`)."""
    name = topic.encode()
    rest = len(name).to_bytes(2, "big") + name + _packed_properties(None, correlation) + payload
    return bytes((_PUBLISH_QOS0,)) + VariableByteIntegers.encode(len(rest)) + rest


def reply_properties(correlation: bytes | None) -> Properties | None:
    """PUBLISH properties echoing a request's Correlation Data."""
    return None if correlation is None else PackedProperties(None, correlation)


def request_properties(response_topic: str, correlation: bytes) -> Properties:
    return PackedProperties(response_topic, correlation)
