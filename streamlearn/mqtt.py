"""MQTT v5 client construction shared by every role (what goes in its packets, and how
paho reads theirs: `streamlearn.mqtt_packets`, imported here so that every client has it).

Subscriptions are made inside on_connect so that a reconnect resubscribes; the broker URL
carries the credentials (`mqtt://user:pass@host:port`, `mqtts://` for TLS).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from streamlearn.config.runfile import redact
from streamlearn.errors import ConfigError, StreamlearnError
from streamlearn.mqtt_packets import PUBACK, puback

log = logging.getLogger(__name__)


_READ_BYTES = 1 << 16  # a read from the socket: ~600 single-sample messages
# What `publish_many` tells paho its joined write is: not a PUBLISH, so paho looks for no
# MQTTMessageInfo and calls no on_publish per write (as for `ack_many`'s PUBACKs).
_JOINED = 0x00


class BufferedClient(mqtt.Client):
    """paho's client, reading the socket in large chunks and acknowledging in bulk.

    paho reads each packet with three or more `recv` calls (the command byte, each byte of
    the remaining length, the rest) and sends each PUBACK as a packet of its own, two more
    system calls: ~6 per message, each one a hand-over of the GIL that a busy second thread
    can hold for up to 5 ms. Here `recv` is served from a buffer filled 64 KiB at a time,
    `loop_read` parses everything buffered before it returns (select() cannot see it), and
    `ack_many` queues the PUBACKs of a whole run as one write. A subscriber draining a
    backlog took ~45,000 messages/s against paho's ~26,000 (on 2 cores).

    It overrides paho's private `_sock_recv` and uses `_packet_queue`, as of paho 2.1-2.2
    (bounded in pyproject.toml); `tests/integration/test_mqtt.py` checks both against a real
    broker.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rbuf = b""
        self._rpos = 0
        self._ack_lock = threading.Lock()
        # Incremented before each reconnect: an ack is sent only on the connection that
        # delivered its message (after a reconnect a packet id may name another message).
        self.generation = 0

    def _sock_recv(self, bufsize: int) -> bytes:
        buf, pos = self._rbuf, self._rpos
        if pos >= len(buf):
            buf = super()._sock_recv(max(bufsize, _READ_BYTES))
            if not buf:
                return buf
            pos = 0
        out = buf[pos : pos + bufsize]
        self._rbuf, self._rpos = buf, pos + len(out)
        return out

    def loop_read(self, max_packets: int = 1) -> mqtt.MQTTErrorCode:
        while True:
            rc = super().loop_read(max_packets)
            if rc or self._rpos >= len(self._rbuf):
                return rc

    def reconnect(self) -> mqtt.MQTTErrorCode:
        with self._ack_lock:
            self.generation += 1
            self._rbuf, self._rpos = b"", 0  # the old connection's bytes
        return super().reconnect()

    def ack_many(self, acks: Iterable[tuple[int, int]]) -> None:
        """PUBACK each (generation, mid) of a QoS 1 message in one write; those of an older
        connection are left for the broker to redeliver."""
        with self._ack_lock:
            now = self.generation
            packet = b"".join(puback(mid) for generation, mid in acks if generation == now)
            if packet:
                self._packet_queue(PUBACK, packet, 0, 0)

    def publish_many(self, packets: Sequence[bytes]) -> bool:
        """Queue packets built by `publish_packet` as one write: one wake-up of the network
        thread and one `send` for a batch's replies, where paho's `publish` costs both per
        message. False (nothing queued) while not connected, as paho drops a QoS 0 PUBLISH."""
        if self._sock is None:
            return False
        if packets:
            self._packet_queue(_JOINED, b"".join(packets), 0, 0)
        return True


MessageHandler = Callable[[BufferedClient, object, mqtt.MQTTMessage], None]  # `connect`'s client


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def parse(cls, url: str) -> BrokerAddress:
        """Parse `mqtt://` or `mqtts://` URLs.

        >>> BrokerAddress.parse("mqtts://dev:s%40cret@broker:8883")
        BrokerAddress(host='broker', port=8883, username='dev', password='s@cret', tls=True)
        """
        parts = urlsplit(url)
        if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
            raise ConfigError(
                f"STREAMLEARN_MQTT_URL: scheme must be mqtt:// or mqtts://, got {redact(url)!r}"
            )
        tls = parts.scheme in ("mqtts", "ssl")
        try:
            port = parts.port or (8883 if tls else 1883)
        except ValueError:
            raise ConfigError(f"STREAMLEARN_MQTT_URL: invalid port in {redact(url)!r}") from None
        return cls(
            host=parts.hostname or "localhost",
            port=port,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=tls,
        )


# How long the broker keeps a persistent session (ingest's queued QoS 1 samples) after its
# client went away: past it, what it queued for that client is dropped.
SESSION_EXPIRY_S = 3600


def connect(
    url: str,
    client_id: str | None = None,
    *,
    subscriptions: Sequence[tuple[str, int]] = (),
    unsubscribe: Sequence[str] = (),
    on_message: MessageHandler | None = None,
    manual_ack: bool = False,
    persistent: bool = False,
    receive_maximum: int | None = None,
    ca_file: str | None = None,
    will: tuple[str, bytes] | None = None,
    online: tuple[str, bytes] | None = None,
    gone: bytes = b"",
    no_delay: bool = False,
    on_connack: Callable[[Properties | None], None] | None = None,
    timeout_s: float = 10.0,
) -> BufferedClient:
    """A connected (and subscribed) MQTT v5 client running its network loop in a thread.

    `persistent` keeps the broker session (clean start off, one hour expiry) so that
    QoS 1 messages queued while the client was away are delivered when it returns.
    `unsubscribe` names filters to drop from such a session after `subscriptions` are
    made, at every connect: those an older release subscribed to instead (what the session
    already queued for them is still delivered).
    `will` is a (topic, payload) the broker publishes retained if the client dies.
    `online` is a (topic, marker) published retained at every connect (a reconnect too, as
    the broker may have published the will meanwhile), with a will that clears it: the
    marker is there exactly while the client is (`streamlearn.observe.presence.Presence`);
    `gone` replaces it instead of clearing it, for as long as a persistent session outlives
    the client (the broker keeps it SESSION_EXPIRY_S, then counts down its expiry).
    `no_delay` turns Nagle's algorithm off, so that a small reply is not held back until
    the broker acknowledges the previous packet (up to its delayed-ACK timeout, ~40 ms).
    `on_connack` gets the properties of each successful CONNACK (e.g. the broker's
    Maximum Packet Size: a client sending a larger packet is disconnected).
    """
    addr = BrokerAddress.parse(url)
    client = BufferedClient(
        CallbackAPIVersion.VERSION2,
        client_id=client_id or f"sl-{uuid.uuid4().hex[:12]}",
        protocol=mqtt.MQTTv5,
        manual_ack=manual_ack,
    )
    if addr.username:
        client.username_pw_set(addr.username, addr.password)
    if addr.tls:
        client.tls_set(ca_certs=ca_file, tls_version=ssl.PROTOCOL_TLS_CLIENT)
    if will is not None and online is not None:
        raise ValueError("connect: give `will` or `online`, not both (one will per client)")
    will_props = None
    if online is not None:
        will = (online[0], gone)
        if gone:
            will_props = Properties(PacketTypes.WILLMESSAGE)
            will_props.MessageExpiryInterval = SESSION_EXPIRY_S
    if will is not None:
        client.will_set(will[0], will[1], qos=1, retain=True, properties=will_props)
    client.reconnect_delay_set(min_delay=1, max_delay=10)
    client.max_queued_messages_set(0)
    connected = threading.Event()
    failure: list[str] = []

    def on_connect(c: mqtt.Client, _u: object, _f: object, reason: object, props: object) -> None:
        if getattr(reason, "is_failure", False):
            failure.append(str(reason))
            connected.set()
            return
        if on_connack is not None:
            on_connack(props if isinstance(props, Properties) else None)
        if online is not None:
            c.publish(online[0], online[1], qos=1, retain=True)
        if subscriptions:
            c.subscribe(list(subscriptions))
            if unsubscribe:  # after: a message is delivered twice rather than lost
                c.unsubscribe(list(unsubscribe))
        else:
            connected.set()

    def on_subscribe(_c: mqtt.Client, _u: object, _mid: int, codes: list, _p: object) -> None:
        refused = [str(code) for code in codes if code.is_failure]
        if refused:
            log.error("subscription refused: %s", refused)
        connected.set()

    def on_disconnect(_c: mqtt.Client, _u: object, _f: object, reason: object, _p: object) -> None:
        log.info("mqtt %s disconnected: %s", client._client_id.decode(), reason)

    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    client.on_subscribe = on_subscribe
    if no_delay:  # paho types the socket as its SocketLike; over TCP or TLS, a socket
        client.on_socket_open = _no_delay  # type: ignore[assignment]
    if on_message is not None:  # paho calls it with itself, a BufferedClient
        client.on_message = on_message  # type: ignore[assignment]
    props = Properties(PacketTypes.CONNECT)
    if persistent:
        props.SessionExpiryInterval = SESSION_EXPIRY_S
    if receive_maximum:
        props.ReceiveMaximum = receive_maximum
    try:
        client.connect(
            addr.host, addr.port, keepalive=30, clean_start=not persistent, properties=props
        )
    except OSError as exc:
        raise StreamlearnError(f"cannot reach MQTT broker {addr.host}:{addr.port}: {exc}") from None
    client.loop_start()
    if not connected.wait(timeout_s) or failure:
        client.loop_stop()
        client.disconnect()
        why = failure[0] if failure else f"no CONNACK within {timeout_s} s"
        raise StreamlearnError(f"MQTT connect to {addr.host}:{addr.port} refused: {why}")
    return client


def _no_delay(_c: mqtt.Client, _u: object, sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def close(client: mqtt.Client) -> None:
    client.disconnect()
    client.loop_stop()
