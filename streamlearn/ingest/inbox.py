"""Ingest's inbox: sample messages handed over by paho's network thread to the ingest
loop, and their PUBACKs handed back.

paho's thread only appends here and returns at once; the loop takes runs of messages and,
once Redis holds a run, queues its PUBACKs as one write (`mqtt.BufferedClient.ack_many`). QoS 1
messages are bounded by the client's receive maximum, and their bytes by `max_inbox_bytes`:
a QoS 1 message that would take the inbox past it holds paho's thread until the loop has
taken enough (or the inbox is empty: one message larger than the bound is taken alone), so
the client reads no more and the broker keeps the rest, unacknowledged, as it does beyond
the receive maximum. QoS 0 messages are not held by the broker: the inbox takes them up to
`max_inbox_messages` and `max_inbox_bytes`, and drops (and counts) the rest; QoS 0
promises nothing more.

Held longer than the broker's keepalive allowance (1.5 x 30 s: back-pressure with the
byte bound reached), the connection is dropped by the broker; the session stays, and what
was not acknowledged is delivered again after the reconnect (exactly once by sample id).

A message is acknowledged only on the connection that delivered it (its client's
`generation`): after a reconnect the broker redelivers what the old connection left
unacknowledged, and an old packet id may by then name another message.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import NamedTuple, cast

import paho.mqtt.client as paho

from streamlearn.config.ingest import IngestConfig
from streamlearn.mqtt import BufferedClient

log = logging.getLogger("streamlearn.ingest")  # its warnings are the ingest worker's

_DROP_LOG_EVERY_S = 10.0
_HOLD_CHECK_S = 0.1  # how often a held message looks whether its client is closing


class Delivery(NamedTuple):
    """What the loop needs of a received message, taken out of paho's `MQTTMessage`.

    paho's message brings a dozen containers (its properties, a lock, a condition); a
    thousand of them alive in the inbox made the cyclic collector run over and over,
    several times the cost of the ingest work itself (`bench.ingest`'s backlog case).
    """

    generation: int  # of the client's connection that delivered it
    client: BufferedClient
    mid: int
    qos: int
    topic: str
    payload: bytes


class IngestInbox:
    """Messages waiting for the ingest loop, and the PUBACKs of those Redis holds."""

    def __init__(self, cfg: IngestConfig) -> None:
        self.cfg = cfg
        self.dropped = 0  # QoS 0 messages dropped, inbox full (written by paho's thread)
        self._messages: deque[Delivery] = deque()
        # Payload bytes in the inbox: in - out, each written by one thread only.
        self._bytes_in = self._bytes_out = 0
        self._drop_logged_at = self._hold_logged_at = -math.inf
        self._arrived = threading.Event()
        self._wanted = 1  # how many messages the loop waits for
        self._taken = threading.Event()  # set when the loop takes messages
        self._last_run = 0  # messages the loop took last time
        self.held = 0  # times a QoS 1 message waited for room (written by paho's thread)

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def bytes(self) -> int:
        """Payload bytes waiting."""
        return self._bytes_in - self._bytes_out

    # -- paho callbacks (network thread): hand over, and return unless over the byte bound --

    def on_message(self, client: BufferedClient, _userdata: object, msg: paho.MQTTMessage) -> None:
        size = len(msg.payload)
        if msg.qos == 0 and (
            len(self._messages) >= self.cfg.max_inbox_messages
            or self._bytes_in - self._bytes_out + size > self.cfg.max_inbox_bytes
        ):
            self._drop()
            return
        if msg.qos and not self._room_for(size, client):
            return  # the client is closing: never acknowledged, the broker delivers it again
        self._bytes_in += size
        self._messages.append(
            Delivery(
                client.generation, client, msg.mid, msg.qos, msg.topic, cast(bytes, msg.payload)
            )
        )
        waiting = len(self._messages)
        if waiting == 1 or waiting >= self._wanted:
            self._arrived.set()

    def _room_for(self, size: int, client: BufferedClient) -> bool:
        """Hold paho's thread until `size` more bytes fit in `max_inbox_bytes` (or the inbox
        is empty); False when the client is disconnecting meanwhile."""
        limit = self.cfg.max_inbox_bytes
        if not self._messages or self.bytes + size <= limit:
            return True
        self.held += 1
        while self._messages and self.bytes + size > limit:
            now = time.monotonic()
            if now - self._hold_logged_at >= _DROP_LOG_EVERY_S:
                self._hold_logged_at = now
                log.warning(
                    "inbox full (%d bytes, max_inbox_bytes=%d): holding QoS 1 messages at the "
                    "broker until it drains",
                    self.bytes,
                    limit,
                )
            self._taken.wait(_HOLD_CHECK_S)
            self._taken.clear()
            if not client.is_connected():
                return False
        return True

    def _drop(self) -> None:
        """A QoS 0 message with the inbox full: QoS 0 promises no delivery, and the broker
        keeps none for us (QoS 1 messages are bounded by the receive maximum instead)."""
        self.dropped += 1
        now = time.monotonic()
        if now - self._drop_logged_at >= _DROP_LOG_EVERY_S:
            self._drop_logged_at = now
            log.warning(
                "inbox full (%d messages, %d bytes): dropping QoS 0 messages, %d so far",
                len(self._messages),
                self.bytes,
                self.dropped,
            )

    # -- the loop's side -------------------------------------------------------------------

    def take(self, limit: int, linger_s: float) -> list[Delivery]:
        """Up to `limit` messages: wait for the first, then, while they come faster than
        one a run (the last run, or those waiting now, more than one), up to `linger_s`
        for more.

        Long runs keep the Redis round trips, and the hand-overs of the GIL between this
        thread and paho's, few per message. A trickle's message is written at once: a
        linger cost each sample of a stream of 100 a second its whole length (5 ms of the
        ~27 from its publish to a version trained on it).
        """
        self._wanted = limit
        if not self._wait_for(1, 0.1):
            return []
        if self._last_run > 1 or len(self._messages) > 1:
            self._wait_for(limit, linger_s)
        batch: list[Delivery] = []
        while len(batch) < limit:
            try:
                batch.append(self._messages.popleft())
            except IndexError:
                break
            self._bytes_out += len(batch[-1].payload)
        if batch:
            self._taken.set()
        self._last_run = len(batch)
        return batch

    def _wait_for(self, count: int, timeout_s: float) -> bool:
        """Wait until `count` messages are in the inbox, at most `timeout_s`; True if any."""
        if len(self._messages) < count:
            self._arrived.clear()
            if len(self._messages) < count:
                self._arrived.wait(timeout_s)
        return bool(self._messages)

    def acknowledge(self, batch: list[Delivery]) -> None:
        """PUBACK the QoS 1 messages of `batch` (Redis holds them), one write per client."""
        acks: dict[BufferedClient, list[tuple[int, int]]] = {}
        for d in batch:
            if d.qos == 1:
                acks.setdefault(d.client, []).append((d.generation, d.mid))
        for client, mids in acks.items():
            client.ack_many(mids)
