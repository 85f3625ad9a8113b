"""The actor's inbox: requests handed over by paho's network thread, bounded, with
deadlines; and their admission, which reads each into a pending request or an error reply.

paho calls `put` on its network thread, which must never block: when the inbox holds
`max_requests` requests or `max_bytes` of payload, a new request is shed, counted and
not answered. Past half of either bound, a client (`predict/{client}`, or an address of
the HTTP door) that holds more than `1 / CLIENT_SHARE` of it has its new requests shed
too: one client's flood leaves the other half to everyone else. An overloaded actor
answering every excess request would spend on replies the capacity it lacks, and a client
that gets no reply times out and retries, as it does for a lost QoS 0 reply. A payload
over the size limit is kept as its size only.

Each request carries a deadline: `deadline_ms` after it arrived, or its MQTT v5 Message
Expiry Interval when that is sooner. The serving loop answers an expired request with a
"deadline exceeded" error instead of computing it, so a flood cannot make the actor answer
long after clients gave up, and the cheap error lets a client still waiting back off.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np
import paho.mqtt.client as mqtt

from streamlearn.actor.replies import Answer, Replier, ReplyRoutes
from streamlearn.config.app import ModelConfig
from streamlearn.contract.names import sender_problem
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.schemas import request_id
from streamlearn.errors import PayloadError

log = logging.getLogger(__name__)

_SHED_LOG_EVERY_S = 10.0
CLIENT_SHARE = 8  # a client's share of a bound: 1/8 (the inbox past half, the loader)
HTTP_SHARE = "http/"  # an HTTP client's share is its address's: no topic level holds a "/"


class Arrival(NamedTuple):
    """What serving needs of a request, taken out of paho's message on arrival.

    paho's `MQTTMessage` brings a dozen containers (its properties' tables among them);
    hundreds of them alive in the inbox made the cyclic collector run often, and long.
    """

    topic: str | None  # None: not valid UTF-8 (no reply can be routed)
    payload: bytes  # b"" when over the size limit: only its size is kept
    correlation: bytes | None  # MQTT v5 Correlation Data, echoed in the reply
    response_topic: str | None  # MQTT v5 Response Topic
    arrived: float  # time.monotonic()
    deadline: float  # time.monotonic()
    size: int  # payload bytes as received

    def expired(self, now: float) -> bool:
        return now > self.deadline


class Inbox:
    """A bounded FIFO of arrivals; `shed` counts the requests refused when it was full.

    paho's thread and the HTTP door's append (under a lock: the byte count in), the serving
    loop pops (the byte count out): the bounds need no lock on the serving path (a
    request of a client, `predict/{client}`, takes it to count the client's share down).
    """

    def __init__(
        self,
        max_requests: int,
        max_bytes: int,
        deadline_ms: float,
        max_payload_bytes: int,
        predict_topic: str | None = None,
    ) -> None:
        """`predict_topic`: the bare request topic, whose next level names a request's
        client (None: no client shares)."""
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._clients = None if predict_topic is None else predict_topic + "/"
        self._held: dict[str, list[int]] = {}  # a client -> [requests, bytes] queued
        self.deadline_s = deadline_ms / 1000
        self.max_payload_bytes = max_payload_bytes
        self.shed = 0
        # each with its bytes and its client (None: bare `predict`, HTTP, or no shares)
        self._arrivals: deque[tuple[Arrival | Pending, int, str | None]] = deque()
        self._adding = threading.Lock()  # paho's thread and the HTTP door's both append
        self._bytes_in = self._bytes_out = 0
        self._arrived = threading.Event()  # set when the inbox stops being empty
        self._shed_logged = (0.0, 0)  # (when, shed) of the last log line

    def put(self, msg: mqtt.MQTTMessage) -> bool:
        """Queue a request (paho's network thread); False when it was shed. Never blocks."""
        now = time.monotonic()
        payload = cast(bytes, msg.payload)  # a received one: bytes
        size = len(payload)
        if size > self.max_payload_bytes:
            payload = b""  # refused unread: keep only its size
        try:
            topic: str | None = msg.topic
        except UnicodeDecodeError:
            topic = None
        client = self._client_of(topic)
        if self._full(len(payload)) or self._over_share(client, len(payload)):
            return self._shed(now)
        props = msg.properties
        deadline = now + self.deadline_s
        expiry = getattr(props, "MessageExpiryInterval", None)
        if isinstance(expiry, int) and expiry > 0:  # 0 is taken as none
            deadline = min(deadline, now + expiry)
        correlation = getattr(props, "CorrelationData", None)
        asked = getattr(props, "ResponseTopic", None)
        arrival = Arrival(topic, payload, correlation, asked, now, deadline, size)
        self._append(arrival, len(payload), client)
        return True

    def offer(self, request: Pending, size: int) -> bool:
        """Queue a request read already (the HTTP door's thread, `size` its body's bytes; or
        one that waited for its version), bounded and shed as MQTT requests are, with its
        sharer's share; False when shed. Never blocks."""
        if self._full(size) or self._over_share(request.sharer, size):
            return self._shed(request.arrived)
        request.deadline = min(request.deadline, request.arrived + self.deadline_s)
        self._append(request, size, request.sharer)
        return True

    def admits(self, size: int, peer: str | None = None) -> bool:
        """Whether a request of `size` bytes from HTTP address `peer` would be queued now:
        the HTTP door asks before it reads a body, so that a full inbox sheds it unread.
        False counts it as shed."""
        sharer = None if peer is None else HTTP_SHARE + peer
        full = self._full(size) or self._over_share(sharer, size)
        return not full or self._shed(time.monotonic())

    def get(self, timeout_s: float = 0.0) -> Arrival | Pending | None:
        """The oldest arrival, waiting up to `timeout_s` for one; None when none came."""
        if not self._arrivals and timeout_s > 0:
            self._arrived.clear()
            if not self._arrivals:
                self._arrived.wait(timeout_s)
        try:
            arrival, size, client = self._arrivals.popleft()
        except IndexError:
            return None
        self._bytes_out += size
        if client is not None:
            with self._adding:  # (paho's thread adds to the same counts)
                held = self._held[client]
                held[0] -= 1
                held[1] -= size
                if not held[0]:
                    del self._held[client]
        return arrival

    def qsize(self) -> int:
        return len(self._arrivals)

    def _full(self, size: int) -> bool:
        """Whether one more request of `size` bytes would pass a bound. Two doors' threads
        may check at once: the bounds can be passed by a request or two, never more."""
        queued = self._bytes_in - self._bytes_out
        return len(self._arrivals) >= self.max_requests or queued + size > self.max_bytes

    def _client_of(self, topic: str | None) -> str | None:
        """The client level of a `predict/{client}` request topic, when shares apply."""
        prefix = self._clients
        if prefix is None or topic is None or not topic.startswith(prefix):
            return None
        return topic[len(prefix) :]

    def _over_share(self, client: str | None, size: int) -> bool:
        """Past half of a bound, whether `client` already holds its share of it."""
        if client is None or client not in self._held:
            return False
        held = self._held[client]
        queued = self._bytes_in - self._bytes_out
        share, bytes_share = self.max_requests // CLIENT_SHARE, self.max_bytes // CLIENT_SHARE
        crowded = 2 * len(self._arrivals) >= self.max_requests and held[0] >= share
        heavy = 2 * (queued + size) > self.max_bytes and held[1] + size > bytes_share
        return crowded or heavy

    def _append(self, arrival: Arrival | Pending, size: int, client: str | None) -> None:
        with self._adding:
            self._bytes_in += size
            self._arrivals.append((arrival, size, client))
            if client is not None:
                held = self._held.setdefault(client, [0, 0])
                held[0] += 1
                held[1] += size
        if len(self._arrivals) == 1:
            self._arrived.set()

    def _shed(self, now: float) -> bool:
        self.shed += 1
        when, logged = self._shed_logged
        if now - when >= _SHED_LOG_EVERY_S:
            log.warning(
                "inbox full (%d requests, %d bytes): shed %d requests since the last report",
                len(self._arrivals),
                self._bytes_in - self._bytes_out,
                self.shed - logged,
            )
            self._shed_logged = (now, self.shed)
        return False


@dataclass(slots=True)
class Pending:
    """A valid request, read and routed, waiting for its batch's forward pass."""

    arrived: float  # time.monotonic() when paho handed it over
    x: np.ndarray  # keyed: the newest step only, until the actor completes its window
    batched: bool
    id: str | int | None
    topic: str | None  # where its reply goes
    correlation: bytes | None
    key: str | None = None
    seq: float | None = None
    version: int | str | None = None  # asked for (a version or a label); None: the served one
    # Where the reply goes instead of `topic`: the HTTP door's waiting request.
    answer: Answer | None = None
    deadline: float = math.inf  # time.monotonic(); past it, answered with an error
    done: bool = False  # answered
    # The requester's level of `predict/{client}` (None: bare `predict`), or an HTTP
    # client's owner (`names.http_owner`): the namespace its kept prediction's id is in
    # (`names.owned`).
    client: str | None = None
    peer: str | None = None  # an HTTP request's client address

    @property
    def sharer(self) -> str | None:
        """Whose share of a bounded pool it takes: its client's, or its HTTP address's
        (None: bare `predict`, the whole)."""
        return self.client if self.peer is None else HTTP_SHARE + self.peer


class Admission:
    """Reads arrivals into pending requests, or answers them with an error; never raises.

    One pass, in the order that keeps a hostile request cheap: its size is checked
    before anything is read, its width (fields and values, counted by their separators)
    and its nesting before it is parsed; it is decoded once (its id and reply_to come from
    the same object), its reply topic checked before anything is published, its deadline
    before it is validated, and its rows counted before they are (`PayloadParser`).
    """

    def __init__(self, cfg: ModelConfig, routes: ReplyRoutes, replier: Replier) -> None:
        self.cfg = cfg
        self.routes = routes
        self.replier = replier
        self.parser = PayloadParser(cfg)
        self.refused = 0  # answered with an error for what they hold or ask
        self.expired = 0  # past their deadline: answered with an error, not computed
        self.failed = 0  # reading them raised: answered with an error

    def admit(self, arrival: Arrival | Pending) -> Pending | None:
        """The request ready to compute, or None when it was answered with an error."""
        if isinstance(arrival, Pending):  # read by its door already: only its deadline
            now = time.monotonic()
            if now <= arrival.deadline:
                return arrival
            waited = now - arrival.arrived  # MQTT too: one back from waiting for its version
            self._expire(arrival.topic, arrival.correlation, arrival.id, waited, arrival.answer)
            return None
        topic, correlation, doc = None, arrival.correlation, {}
        try:
            request_topic = arrival.topic
            if request_topic is None:
                raise PayloadError("request topic is not valid UTF-8")
            default = self.routes.default(request_topic)
            topic, client = default.topic, default.client
            try:
                doc = self.parser.requests.decode(arrival.payload, arrival.size)
                problem = sender_problem(client)
            except PayloadError as exc:
                problem = str(exc)
            asked = arrival.response_topic
            if asked is None:
                asked = doc.get("reply_to")
            route = self.routes.route(request_topic, asked, default)
            topic, problem = route.topic, route.refused or problem
            if problem is None:
                now = time.monotonic()
                if arrival.expired(now):
                    self._expire(topic, correlation, _request_id(doc), now - arrival.arrived)
                    return None
                request = self.parser.parse_request(doc, client)
        except PayloadError as exc:
            problem = str(exc)
        except Exception as exc:  # a bug a request found: it must not stop the serving loop
            log.exception("reading a request failed")
            self.failed += 1
            reason = f"internal error: {type(exc).__name__}"
            self.replier.error(topic, correlation, _request_id(doc), reason)
            return None
        if problem is not None:
            self.refused += 1
            self.replier.error(topic, correlation, _request_id(doc), problem)
            return None
        return Pending(
            arrival.arrived,
            request.x,
            request.batched,
            request.id,
            topic,
            correlation,
            request.key,
            request.seq,
            request.version,
            deadline=arrival.deadline,
            client=client,
        )

    def _expire(
        self,
        topic: str | None,
        correlation: bytes | None,
        rid: object,
        waited_s: float,
        answer: Answer | None = None,
    ) -> None:
        self.expired += 1
        reason = (
            f"deadline exceeded: waited {1000 * waited_s:.0f} ms in the actor's queue, past "
            f"request_deadline_ms={self.cfg.actor.request_deadline_ms:g} or the request's "
            f"message expiry; not computed"
        )
        self.replier.error(topic, correlation, rid, reason, answer)


def gather(
    inbox: Inbox, admission: Admission, max_batch: int, max_wait_ms: float, idle_s: float
) -> list[Pending] | None:
    """Valid requests for one pass, up to `max_batch` rows; None when none arrived for
    `idle_s`.

    Takes what is queued and computes at once: a request that finds the actor idle waits
    for no company that may never come, and those that queued while the previous pass ran
    make up this one. Only while requests keep arriving as the batch is read (the queue
    grows) does it wait for more, until `max_wait_ms` after the first arrived.
    """
    arrival = inbox.get(idle_s)
    if arrival is None:
        return None
    behind = inbox.qsize()  # queued after the first when the batch began
    deadline = arrival.arrived + max_wait_ms / 1000
    batch: list[Pending] = []
    rows = taken = 0
    while arrival is not None:
        taken += 1
        pending = admission.admit(arrival)
        if pending is not None:
            batch.append(pending)
            rows += len(pending.x)
        if rows >= max_batch:
            break
        arrival = inbox.get()
        if arrival is None and taken > behind + 1:  # more came while these were read
            arrival = inbox.get(deadline - time.monotonic())
    return batch


def _request_id(doc: dict[str, Any]) -> str | int | None:
    """The id an error reply echoes: the request's, unless it is out of its bounds (the
    reply says why, `request_id`)."""
    try:
        return request_id(doc.get("id"))
    except PayloadError:
        return None
