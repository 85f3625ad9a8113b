"""MQTT v5 client construction shared by every role.

Subscriptions are made inside on_connect so that a reconnect resubscribes; the broker URL
carries the credentials (`mqtt://user:pass@host:port`, `mqtts://` for TLS).
"""

from __future__ import annotations

import logging
import ssl
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from streamlearn.errors import ConfigError, StreamlearnError

log = logging.getLogger(__name__)

MessageHandler = Callable[[mqtt.Client, object, mqtt.MQTTMessage], None]


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
                f"STREAMLEARN_MQTT_URL: scheme must be mqtt:// or mqtts://, got {url!r}"
            )
        tls = parts.scheme in ("mqtts", "ssl")
        try:
            port = parts.port or (8883 if tls else 1883)
        except ValueError:
            raise ConfigError(f"STREAMLEARN_MQTT_URL: invalid port in {url!r}") from None
        return cls(
            host=parts.hostname or "localhost",
            port=port,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=tls,
        )


def connect(
    url: str,
    client_id: str | None = None,
    *,
    subscriptions: Sequence[tuple[str, int]] = (),
    on_message: MessageHandler | None = None,
    manual_ack: bool = False,
    persistent: bool = False,
    receive_maximum: int | None = None,
    ca_file: str | None = None,
    timeout_s: float = 10.0,
) -> mqtt.Client:
    """A connected (and subscribed) MQTT v5 client running its network loop in a thread.

    `persistent` keeps the broker session (clean start off, one hour expiry) so that
    QoS 1 messages queued while the client was away are delivered when it returns.
    """
    addr = BrokerAddress.parse(url)
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id or f"sl-{uuid.uuid4().hex[:12]}",
        protocol=mqtt.MQTTv5,
        manual_ack=manual_ack,
    )
    if addr.username:
        client.username_pw_set(addr.username, addr.password)
    if addr.tls:
        client.tls_set(ca_certs=ca_file, tls_version=ssl.PROTOCOL_TLS_CLIENT)
    client.reconnect_delay_set(min_delay=1, max_delay=10)
    client.max_queued_messages_set(0)
    connected = threading.Event()
    failure: list[str] = []

    def on_connect(c: mqtt.Client, _u: object, _f: object, reason: object, _p: object) -> None:
        if getattr(reason, "is_failure", False):
            failure.append(str(reason))
            connected.set()
            return
        if subscriptions:
            c.subscribe(list(subscriptions))
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
    if on_message is not None:
        client.on_message = on_message
    props = Properties(PacketTypes.CONNECT)
    if persistent:
        props.SessionExpiryInterval = 3600
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


def close(client: mqtt.Client) -> None:
    client.disconnect()
    client.loop_stop()


def reply_properties(correlation: bytes | None) -> Properties | None:
    """PUBLISH properties echoing a request's Correlation Data."""
    if correlation is None:
        return None
    props = Properties(PacketTypes.PUBLISH)
    props.CorrelationData = correlation
    return props


def request_properties(response_topic: str, correlation: bytes) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = response_topic
    props.CorrelationData = correlation
    return props
