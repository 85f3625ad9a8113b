"""Where a prediction's reply may go: the reply space of a model, checked before publishing.

Replies live under `{prefix}/{model}/replies/{client}/...`. A request on
`{prefix}/{model}/predict/{client}` (the topic the deployed ACL lets a device publish on,
`%c` being its broker-enforced client id) may ask for a reply topic under
`.../replies/{client}/` or `.../replies/{client}` itself, and without one gets its reply
on `.../replies/{client}`. A request on the bare `{prefix}/{model}/predict` may ask for
one anywhere under `.../replies/`, and otherwise gets it on `{prefix}/{model}/predictions`.

A reply topic outside that space, or one a broker or client would refuse, is never
published to: a broker disconnects a publisher that sends a control character, and a
topic like `.../actors/x` would let any client write into another's space. The request
gets an error reply on its default topic instead, naming the reason.

Routes are remembered (`ROUTES_KEPT` pairs of request and asked topics of up to
`ROUTE_KEY_CHARS` characters together: under 2 MiB), since a client asks for the same
topics again and again; a full memory is emptied, so a client asking for ever-new topics
costs the others only routes found afresh (~3 us a request).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from paho.mqtt.properties import Properties

from streamlearn.contract.names import Names
from streamlearn.mqtt_packets import publish_packet, reply_properties

log = logging.getLogger(__name__)

# paho's `Client.publish(topic, payload, qos, retain, properties)`.
Publish = Callable[[str, bytes, int, bool, Properties | None], object]
# `BufferedClient.publish_many`: packets of `publish_packet` as one write; False unconnected.
PublishMany = Callable[[Sequence[bytes]], bool]
# A reply's body handed to the HTTP door's waiting request (`streamlearn.actor.http`).
Answer = Callable[[dict], object]

MAX_TOPIC_BYTES = 512
ROUTES_KEPT = 1024
ROUTE_KEY_CHARS = 256

# Refused in topic names: wildcards; what Mosquitto refuses as malformed UTF-8 (control
# characters, surrogates, noncharacters); U+FEFF, which paho refuses in a Response Topic.
_NONCHARACTERS = "".join(chr(plane << 16 | low) for plane in range(17) for low in (0xFFFE, 0xFFFF))
_FORBIDDEN = re.compile(f"[+#\x00-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufeff{_NONCHARACTERS}]")


def topic_problem(topic: object) -> str | None:
    """Why `topic` cannot be published to, or None when it can.

    >>> topic_problem("a/b"), topic_problem("a/+"), topic_problem("a//b")
    (None, 'wildcard character +', 'empty topic level')
    >>> topic_problem("a/\\x01")
    'control character U+0001'
    """
    if not isinstance(topic, str):
        return f"must be a string, got {type(topic).__name__}"
    if not topic:
        return "empty topic"
    bad = _FORBIDDEN.search(topic)
    if bad is not None:
        char = bad.group()
        if char in "+#":
            return f"wildcard character {char}"
        kind = "control character" if ord(char) <= 0x9F else "invalid character"
        return f"{kind} U+{ord(char):04X}"
    if len(topic) > MAX_TOPIC_BYTES // 4 and len(topic.encode()) > MAX_TOPIC_BYTES:
        return f"longer than {MAX_TOPIC_BYTES} bytes"
    if "" in topic.split("/"):
        return "empty topic level"
    return None


@dataclass(frozen=True, slots=True)
class Route:
    """Where a reply goes; `refused` says why the asked-for topic was not taken."""

    topic: str | None  # None: nowhere valid (a request topic no broker would deliver)
    refused: str | None = None
    client: str | None = None  # the request topic's client level (`ReplyRoutes.client_of`)


class ReplyRoutes:
    """The reply space of one model's requests (see the module docstring)."""

    def __init__(self, names: Names) -> None:
        self.predict = names.predict_topic
        self.replies = names.topic("replies")
        self.predictions = names.predictions_topic
        self._kept: dict[tuple[str, str | None], Route] = {}  # (request, asked topic): route

    def client_of(self, request_topic: str) -> str | None:
        """The client a request topic names (`predict/{client}`); None for bare `predict`."""
        if request_topic.startswith(self.predict + "/"):
            return request_topic[len(self.predict) + 1 :]
        return None

    def default(self, request_topic: str) -> Route:
        """Where a request's reply goes when it asks for no topic (or a refused one)."""
        return self.route(request_topic, None)

    def route(
        self, request_topic: str, asked: object | None, default: Route | None = None
    ) -> Route:
        """The reply topic for a request on `request_topic` that asked for `asked`;
        `default` is `self.default(request_topic)` where the caller has it already."""
        key = None
        length = len(request_topic) + (len(asked) if isinstance(asked, str) else 0)
        if (asked is None or isinstance(asked, str)) and length <= ROUTE_KEY_CHARS:
            key = (request_topic, asked)
            known = self._kept.get(key)
            if known is not None:
                return known
        if asked is None:
            found = self._default(request_topic)
        else:
            found = self._asked(request_topic, asked, default or self.default(request_topic))
        if key is not None:
            if len(self._kept) >= ROUTES_KEPT:
                self._kept.clear()
            self._kept[key] = found
        return found

    def _default(self, request_topic: str) -> Route:
        client = self.client_of(request_topic)
        topic = self.predictions if client is None else f"{self.replies}/{client}"
        problem = topic_problem(topic) if client is not None else None
        return Route(None, problem, client) if problem else Route(topic, None, client)

    def _asked(self, request_topic: str, asked: object, default: Route) -> Route:
        if default.topic is None:
            return default
        problem = topic_problem(asked)
        if problem is None:
            assert isinstance(asked, str)
            client = default.client
            space = self.replies if client is None else f"{self.replies}/{client}"
            if not (asked.startswith(space + "/") or (client is not None and asked == space)):
                problem = f"outside this request's reply space {space}/..."
        if problem is None:
            assert isinstance(asked, str)  # as above
            return Route(asked, None, default.client)
        refused = f"reply topic {_shown(asked)} refused: {problem}"
        return Route(default.topic, refused, default.client)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Replier:
    """Publishes replies (QoS 0) that a broker will take, and counts them.

    A reply whose JSON is over `max_bytes`, or over what the broker's maximum packet size
    leaves for it (a broker disconnects a client that sends a larger packet), is replaced
    by an error reply saying so. `publish` is paho's `Client.publish`; with `publish_many`,
    the replies sent inside `joined()` (a batch's) go out as one write.
    """

    def __init__(
        self, publish: Publish, model: str, max_bytes: int, publish_many: PublishMany | None = None
    ) -> None:
        self.publish = publish
        self.publish_many = publish_many
        self._held: list[bytes] | None = None  # inside `joined()`: the packets to write
        self.model = model
        self.max_bytes = max_bytes
        self.max_packet: int | None = None  # the broker's, from its CONNACK (MQTT v5)
        self.sent = 0
        self.errors = 0
        self.too_big = 0
        self.unsent = 0  # no valid topic, or refused by paho

    def error(
        self,
        topic: str | None,
        correlation: bytes | None,
        rid: object,
        reason: str,
        answer: Answer | None = None,
    ) -> None:
        self.errors += 1
        body = {"id": rid, "error": reason, "model": self.model}
        self.send(topic, correlation, body, answer)

    def send(
        self,
        topic: str | None,
        correlation: bytes | None,
        body: dict,
        answer: Answer | None = None,
    ) -> None:
        """Publish `body` on `topic`; or, for a request of the HTTP door, hand it to
        `answer` (its waiting request, which writes its own response)."""
        if answer is not None:
            try:
                answer(body)
            except Exception:  # the door's client went away; the loop must go on
                log.exception("handing a reply to the HTTP door failed")
                self.unsent += 1
                return
            self.sent += 1
            return
        if topic is None:
            self.unsent += 1
            return
        payload = json.dumps(body).encode()
        limit = self.limit(topic, correlation)
        if len(payload) > limit:
            self.too_big += 1
            reason = (
                f"reply of {len(payload)} bytes exceeds the {limit} bytes a reply may have "
                f"(max_reply_bytes, the broker's maximum packet size): ask for fewer rows"
            )
            self.errors += 1
            body = {"id": body.get("id"), "error": reason, "model": self.model}
            payload = json.dumps(body).encode()
            if len(payload) > limit:  # only an id of thousands of digits gets here
                self.unsent += 1
                return
        try:
            if self._held is not None:
                self._held.append(publish_packet(topic, payload, correlation))
                return  # counted when written
            self.publish(topic, payload, 0, False, reply_properties(correlation))
        except (ValueError, TypeError, OverflowError) as exc:  # the broker never sees it
            log.warning("reply to %r not sent: %s", topic, exc)
            self.unsent += 1
            return
        self.sent += 1

    @contextmanager
    def joined(self) -> Iterator[None]:
        """The MQTT replies sent inside go out together at the end, in one write (one
        wake-up of paho's network thread and one `send`, not one of each per reply)."""
        if self.publish_many is None or self._held is not None:
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held and self.publish_many(held):
                self.sent += len(held)
            else:
                self.unsent += len(held)  # not connected: dropped, as paho drops QoS 0

    def limit(self, topic: str, correlation: bytes | None) -> int:
        """The largest reply payload for this topic and correlation data."""
        if self.max_packet is None:
            return self.max_bytes
        overhead = 16 + len(topic.encode()) + (len(correlation) if correlation else 0)
        return min(self.max_bytes, self.max_packet - overhead)
