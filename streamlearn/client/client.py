"""The public client: publish samples and ask for predictions over MQTT.

    from streamlearn import Client

    with Client("mqtt://localhost:1883") as client:
        client.publish("demo", x=[0.1] * 9, y=1.0)
        print(client.predict("demo", [0.1] * 9, timeout=2))
        # a model with named inputs, its label coming later
        client.predict("machines", {"temperature": 88.0, "rpm": 1500}, id="m1-0915")
        client.label("machines", "m1-0915", 1)

It needs only paho-mqtt (`pip install .`). The URL carries credentials and TLS
(`mqtts://NAME:PASSWORD@host:8883`, the CA bundle as `ca_file`); without one, `Client()` reads
`STREAMLEARN_MQTT_URL`, `STREAMLEARN_MQTT_CA_FILE` and `STREAMLEARN_TOPIC_PREFIX`, and with no
URL there either, the stack a running `streamlearn up` recorded (its run file). With a username
the client id is that username, as the deployed broker enforces (not on `streamlearn up`'s
broker, whose one account every local tool shares), so requests go to
`{prefix}/{model}/predict/{client id}` and replies come back under
`{prefix}/{model}/replies/{client id}`, the one reply space a device may read. Labels go to
`{prefix}/{model}/labels/{client id}` and join only this client id's requests (another process
labels them with `owner=` that id); a client with an id of its own (a username or `client_id=`)
publishes samples on `samples/{client id}` (its ids its own to dedupe), one without on `samples`.

All requests of a client share its connection and one reply subscription; a reply finds
its request by the MQTT v5 Correlation Data it echoes. Bounds: at most `max_pending`
requests (10,000) await replies at once, and one more is refused; each waits until its
own timeout; when the connection closes or is lost, every waiting request fails with
`ConnectionClosedError`. `publish_payloads` and `publish_many` keep at most
`max_inflight` (100) messages unacknowledged by the broker.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, cast

import paho.mqtt.client as paho

from streamlearn import mqtt, mqtt_packets
from streamlearn.client import documents
from streamlearn.client.pending import (
    Acks,
    Pending,
    Prediction,
    PredictionError,  # noqa: F401  (re-exported: `from streamlearn.client.client import ...`)
    Sent,
    prediction,
)
from streamlearn.config import environment, runfile
from streamlearn.contract.names import Names
from streamlearn.errors import ConfigError

# The environment `streamlearn.config.Settings` reads, and its defaults.
URL_ENV = environment.MQTT_URL
CA_FILE_ENV = environment.MQTT_CA_FILE
TOPIC_PREFIX_ENV = environment.TOPIC_PREFIX
DEFAULT_URL = "mqtt://localhost:1883"
DEFAULT_TOPIC_PREFIX = "streamlearn"
# What ingest takes by default (`ingest.max_payload_bytes`, `ingest.max_samples_per_message`).
MAX_PAYLOAD_BYTES = 1_048_576
MAX_SAMPLES_PER_MESSAGE = 10_000
MAX_PENDING = 10_000
MAX_INFLIGHT = 100


class Client:
    """One MQTT v5 connection to the service; thread-safe.

    Futures of `predict_async` and `request_async` complete on the connection's network
    thread: callbacks added to them must not block (a `predict` there waits until its
    timeout, since the replies it needs are read by that thread).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        ca_file: str | None = None,
        topic_prefix: str | None = None,
        client_id: str | None = None,
        max_pending: int = MAX_PENDING,
        max_inflight: int = MAX_INFLIGHT,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        max_samples_per_message: int = MAX_SAMPLES_PER_MESSAGE,
        connect_timeout: float = 10.0,
    ) -> None:
        url = url or os.environ.get(URL_ENV)
        stack = None if url else runfile.live()  # where `streamlearn up` runs, if it does
        url = url or (stack.mqtt_url if stack else DEFAULT_URL)
        ca_file = ca_file or os.environ.get(CA_FILE_ENV) or None
        prefix = (
            topic_prefix
            or os.environ.get(TOPIC_PREFIX_ENV)
            or (stack.topic_prefix if stack else DEFAULT_TOPIC_PREFIX)
        )
        if "+" in prefix or "#" in prefix:
            raise ConfigError(f"topic prefix: no wildcards (+, #), got {prefix!r}")
        if min(max_inflight, max_pending) < 1:
            raise ConfigError(
                f"max_inflight and max_pending must be >= 1, got {max_inflight} and {max_pending}"
            )
        user = mqtt.BrokerAddress.parse(url).username
        recorded = stack or runfile.live()
        if recorded is not None and url == recorded.mqtt_url:
            # `up`'s broker: one account for every local tool, and no ACL tying its ids to
            # it, so each client takes its own id (two with the same one would take turns
            # knocking each other off)
            user = None
        if user and client_id and client_id != user:
            raise ConfigError(f"client id must be the URL's username {user!r}, got {client_id!r}")
        self.client_id = user or client_id or f"sl-client-{uuid.uuid4().hex[:12]}"
        if any(c in self.client_id for c in "/+#"):
            raise ConfigError(f"client id: no '/', '+' or '#', got {self.client_id!r}")
        # a random id names nobody another process could be: such a client's sample ids
        # stay in the bare `samples` namespace, as a rerun of it needs
        self._samples_leaf = f"samples/{self.client_id}" if user or client_id else "samples"
        self.topic_prefix = prefix
        self.max_inflight = max_inflight
        self.max_payload_bytes = max_payload_bytes
        self.max_samples_per_message = max_samples_per_message
        self._pending = Pending(max_pending)
        self._correlations = itertools.count(1)
        self._acks = Acks()
        replies = f"{prefix}/+/replies/{self.client_id}/#"
        try:
            self._mqtt = mqtt.connect(
                url,
                self.client_id,
                subscriptions=[(replies, 1)],
                on_message=self._on_reply,
                ca_file=ca_file,
                no_delay=True,
                timeout_s=connect_timeout,
            )
        except BaseException:
            self._pending.close()
            raise
        self._mqtt.on_publish = self._acks.on_publish
        self._watch_connection(url)
        self._pending.open()

    @property
    def mqtt(self) -> paho.Client:
        """The paho client underneath, e.g. to subscribe to a model's status topic."""
        return self._mqtt

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect; requests still awaiting replies fail with ConnectionClosedError."""
        if self._pending.close():
            mqtt.close(self._mqtt)

    # -- samples -------------------------------------------------------------------------

    def publish(
        self,
        model: str,
        x: Any,
        y: Any = None,
        *,
        id: str | None = None,
        key: str | None = None,
        seq: float | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Publish one sample (QoS 1); returns once the broker has it.

        x is positional (`y` its label), or a dict of the model's named fields with its
        label among them (`{"temperature": 88.0, "failed": 1}`); a list of such dicts goes
        as `{"samples": [..]}` messages under ingest's caps. With `key` and `seq` it is a
        device's observation (one step of a windowed model; `y` optional). Raises
        StreamlearnError when the broker refuses it (not authorized).
        """
        if documents.is_named(x) and not isinstance(x, Mapping):
            if y is not None or id is not None or key is not None or seq is not None:
                raise ValueError("a list of named samples takes no y=, id=, key= or seq=")
            self.publish_payloads(model, self._named_messages(x), timeout=timeout)
            return
        doc = documents.sample(x, y, id, key, seq)
        self._acks.confirm(self._send(self._topic(model, self._samples_leaf), doc), timeout)

    def publish_many(
        self,
        model: str,
        xs: Any,  # a sequence or an array (`documents.plain`)
        ys: Any,
        ids: Sequence[str] | None = None,
        *,
        timeout: float = 10.0,
    ) -> int:
        """Publish samples as columnar messages (`{"x": [..], "y": [..], "ids"?: [..]}`)
        of at most `max_samples_per_message` samples and `max_payload_bytes` each; returns
        how many messages, once the broker has them all."""
        xs, ys = documents.plain(xs), documents.plain(ys)
        ids = None if ids is None else list(ids)
        if len(xs) != len(ys) or (ids is not None and len(ids) != len(ys)):
            raise ValueError(f"xs, ys (and ids) differ in length: {len(xs)}, {len(ys)}")
        return self.publish_payloads(model, self._columns(xs, ys, ids), timeout=timeout)

    # -- labels that come later ----------------------------------------------------------

    def label(
        self, model: str, id: str, y: float, *, owner: str | None = None, timeout: float = 10.0
    ) -> None:
        """Publish the label of an earlier prediction request that carried `id` (QoS 1, on
        `{prefix}/{model}/labels/{owner}`); returns once the broker has it. The service
        joins it to the features it kept for that request, and learns the sample.

        `owner` is the client id that asked for the prediction, by default this client's;
        the deployed broker lets only that client's account, or the `labeller` account,
        label for it."""
        doc = documents.label(id, y)
        self._acks.confirm(self._send(self._topic(model, self._labels_leaf(owner)), doc), timeout)

    def labels(
        self,
        model: str,
        pairs: Iterable[tuple[str, float]],
        *,
        owner: str | None = None,
        timeout: float = 10.0,
    ) -> int:
        """Publish (id, y) labels as `{"labels": [..]}` messages under ingest's caps, for
        the requests of `owner` (as `label`); returns how many messages, once the broker
        has them all."""
        leaf = self._labels_leaf(owner)
        items = documents.labels(list(pairs))
        messages = documents.pieces(
            len(items),
            lambda a, b: {"labels": items[a:b]},
            self.max_samples_per_message,
            self.max_payload_bytes,
            "label",
        )
        return self._publish_all(self._topic(model, leaf), messages, timeout)

    def publish_payloads(
        self,
        model: str,
        payloads: Iterable[bytes | str | Mapping[str, Any]],
        *,
        timeout: float = 10.0,
        leaf: str = "samples",
    ) -> int:
        """Publish messages as they are (README: Topics and payloads), e.g. the lines of an
        NDJSON file, on this client's topic of the model's `leaf` (`samples` or `labels`,
        as `publish` and `label` choose); returns how many, once the broker has them all."""
        if leaf not in ("samples", "labels"):
            raise ValueError(f"leaf: samples or labels, got {leaf!r}")
        own = self._samples_leaf if leaf == "samples" else self._labels_leaf(None)
        return self._publish_all(self._topic(model, own), payloads, timeout)

    def _publish_all(
        self, topic: str, payloads: Iterable[bytes | str | Mapping[str, Any]], timeout: float
    ) -> int:
        window, count = deque[Sent](), 0
        for payload in payloads:
            if len(window) >= self.max_inflight:
                self._acks.confirm(window.popleft(), timeout)
            window.append(self._send(topic, payload))
            count += 1
        for sent in window:
            self._acks.confirm(sent, timeout)
        return count

    def _columns(self, xs: list, ys: list, ids: list | None) -> Iterable[bytes]:
        def build(a: int, b: int) -> dict[str, Any]:
            doc = {"x": xs[a:b], "y": ys[a:b]}
            if ids is not None:
                doc["ids"] = ids[a:b]
            return doc

        return documents.pieces(
            len(ys), build, self.max_samples_per_message, self.max_payload_bytes
        )

    def _named_messages(self, samples: Sequence[Mapping[str, Any]]) -> Iterable[bytes]:
        docs = [documents.named(one) for one in samples]
        return documents.pieces(
            len(docs),
            lambda a, b: {"samples": docs[a:b]},
            self.max_samples_per_message,
            self.max_payload_bytes,
        )

    # -- predictions ---------------------------------------------------------------------

    def predict(
        self,
        model: str,
        x: Any,
        *,
        id: str | None = None,
        key: str | None = None,
        seq: float | None = None,
        timeout: float = 10.0,
    ) -> Prediction:
        """One prediction: x is one sample, a list of rows (y is then a list), or a dict of
        the model's named fields.

        With `id` the service keeps the request's features for a label that comes later
        (`label(model, id, y)`). With `key`, x is the device's newest step and the service
        completes the window from the steps it stored (before `seq`, when given). Raises
        PredictionError with the service's message, TimeoutError when no reply came
        within `timeout` s.
        """
        return self.predict_async(model, x, id=id, key=key, seq=seq, timeout=timeout).result()

    def predict_async(
        self,
        model: str,
        x: Any,
        *,
        id: str | None = None,
        key: str | None = None,
        seq: float | None = None,
        timeout: float = 10.0,
    ) -> Future[Prediction]:
        """`predict` without waiting: the future fails as `predict` raises."""
        body = documents.request(x, id, key, seq)
        return self._request(model, body, timeout, prediction)

    def request(self, model: str, body: Mapping[str, Any], timeout: float = 10.0) -> dict:
        """Send a request document as it is; the reply document as the service sent it,
        error or not (for fields a Prediction leaves out, such as `id`)."""
        return self.request_async(model, body, timeout).result()

    def request_async(
        self, model: str, body: Mapping[str, Any], timeout: float = 10.0
    ) -> Future[dict]:
        return self._request(model, body, timeout, lambda doc: doc)

    def _request(
        self, model: str, body: Mapping[str, Any], timeout: float, outcome: Callable[[dict], Any]
    ) -> Future:
        correlation = next(self._correlations).to_bytes(8, "big")
        why = f"no reply from model {model!r} within {timeout} s: is an actor running?"
        future = self._pending.add(correlation, timeout, outcome, why)
        reply_to = self._topic(model, f"replies/{self.client_id}")
        props = mqtt_packets.request_properties(reply_to, correlation)
        try:
            topic = self._topic(model, f"predict/{self.client_id}")
            # QoS 0: a QoS 1 PUBACK held the reply ~44 ms on a Nagle broker (guides/client.md)
            self._mqtt.publish(topic, documents.encode(body), qos=0, properties=props)
        except BaseException:
            future.cancel()  # forgotten at once
            raise
        return future

    # -- connection ----------------------------------------------------------------------

    def _labels_leaf(self, owner: str | None) -> str:
        """`labels/{owner}`: the labels of the requests `owner` (default: this client) made."""
        owner = self.client_id if owner is None else owner
        if not isinstance(owner, str) or not owner or any(c in owner for c in "/+#"):
            raise ValueError(f"owner: a client id, no '/', '+' or '#', got {owner!r}")
        return f"labels/{owner}"

    def _topic(self, model: str, leaf: str) -> str:
        return Names(model, self.topic_prefix).topic(leaf)

    def _send(self, topic: str, payload: bytes | str | Mapping[str, Any]) -> Sent:
        if isinstance(payload, Mapping):
            payload = documents.encode(payload)
        before = self._acks.refusals
        return Sent(topic, self._mqtt.publish(topic, payload, qos=1), before)

    def _on_reply(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        self._pending.resolve(
            getattr(msg.properties, "CorrelationData", b""), cast(bytes, msg.payload)
        )

    def _watch_connection(self, url: str) -> None:
        """Fail the waiting requests when the connection is lost (their replies are lost
        with it); take requests again once a reconnect has resubscribed."""
        on_disconnect, on_subscribe = self._mqtt.on_disconnect, self._mqtt.on_subscribe
        assert on_disconnect is not None and on_subscribe is not None  # `mqtt.connect` set them
        where = mqtt.BrokerAddress.parse(url)

        def disconnected(*args: Any) -> None:
            on_disconnect(*args)
            lost = f"connection to {where.host}:{where.port} lost ({args[3]}) before the reply"
            self._pending.suspend(lost)

        def subscribed(*args: Any) -> None:
            on_subscribe(*args)
            self._pending.open()

        self._mqtt.on_disconnect = disconnected
        self._mqtt.on_subscribe = subscribed
