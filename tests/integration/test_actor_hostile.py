"""Hostile prediction requests against a real actor process, real Mosquitto and Redis.

After each attack the actor must be the same process, alive, never disconnected by the
broker, and still answer a good request correctly. The model is linear with weights that
make it answer y = x0 + 2 * x1 + 3, so a reply shows it was computed by those weights.
"""

from __future__ import annotations

import json
import threading
import time
import tomllib
import uuid
from collections.abc import Callable

import numpy as np
import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from streamlearn import mqtt
from streamlearn.actor.inbox import Inbox, Pending
from streamlearn.actor.replies import ReplyRoutes, topic_problem
from streamlearn.config import Settings, parse_config
from streamlearn.contract.decoding import too_deep
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.store.weights import WeightsStore
from tests.conftest import RoleProcess, eventually

MODEL = """
[models.h]
inputs = 2
task = "regression"
architecture = "linear"
"""
ACTOR = """
[models.h.actor]
status_every_ms = 200
max_request_rows = 64
max_reply_bytes = 1024
"""


def y_of(x0: float, x1: float) -> float:
    return float(np.float32(x0) + np.float32(2) * np.float32(x1) + np.float32(3))


class Device:
    """An MQTT v5 client `cid` reading its own replies and the default predictions topic."""

    def __init__(self, settings: Settings, names: Names, cid: str | None = None) -> None:
        self.names = names
        self.cid = cid or f"dev-{uuid.uuid4().hex[:8]}"
        self.replies = names.topic(f"replies/{self.cid}")
        self.got: list[paho.MQTTMessage] = []
        self._cond = threading.Condition()
        self.client = mqtt.connect(
            settings.mqtt,
            self.cid,
            subscriptions=[(f"{self.replies}/#", 0), (names.predictions_topic, 0)],
            on_message=self._on_message,
        )

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.got.append(msg)
            self._cond.notify_all()

    def send(
        self,
        payload: bytes | dict,
        *,
        own: bool = True,
        response_topic: str | None = None,
        expiry_s: int | None = None,
        qos: int = 1,
    ) -> bytes:
        """Publish on predict/{cid} (`own`) or bare predict; returns the correlation data."""
        correlation = uuid.uuid4().bytes
        props = Properties(PacketTypes.PUBLISH)
        props.CorrelationData = correlation
        if response_topic is not None:
            props.ResponseTopic = response_topic
        if expiry_s is not None:
            props.MessageExpiryInterval = expiry_s
        topic = self.names.topic(f"predict/{self.cid}") if own else self.names.predict_topic
        body = json.dumps(payload).encode() if isinstance(payload, dict) else payload
        self.client.publish(topic, body, qos=qos, properties=props)
        return correlation

    def reply(self, correlation: bytes, timeout_s: float = 15) -> tuple[str, dict]:
        """The topic and body of the reply echoing `correlation`."""
        msg = self.wait(
            lambda m: getattr(m.properties, "CorrelationData", None) == correlation, timeout_s
        )
        return msg.topic, json.loads(msg.payload)

    def ask(self, payload: bytes | dict, **kwargs: object) -> tuple[str, dict]:
        return self.reply(self.send(payload, **kwargs))  # type: ignore[arg-type]

    def wait(
        self, match: Callable[[paho.MQTTMessage], bool], timeout_s: float = 15
    ) -> paho.MQTTMessage:
        with self._cond:
            found: list[paho.MQTTMessage] = []
            ok = self._cond.wait_for(
                lambda: found.extend(m for m in self.got if match(m)) or found, timeout_s
            )
        if not ok:
            raise AssertionError(f"no matching reply within {timeout_s} s")
        return found[0]

    def close(self) -> None:
        mqtt.close(self.client)


@pytest.fixture
def names(settings: Settings) -> Names:
    return Names("h", settings.topic_prefix, settings.key_prefix)


@pytest.fixture
def devices(settings: Settings, names: Names):
    made: list[Device] = []

    def make(cid: str | None = None) -> Device:
        made.append(Device(settings, names, cid))
        return made[-1]

    yield make
    for device in made:
        device.close()


@pytest.fixture
def serve(start_role, redis, names):
    """serve(actor_table) -> a running actor process serving version 1 of the weights."""

    def start(actor_table: str = ACTOR) -> RoleProcess:
        cfg = parse_config(tomllib.loads(MODEL)).model("h")
        arrays = tensors.get_arrays(networks.build_model(cfg))
        arrays["head/kernel"] = np.array([[1.0], [2.0]], np.float32)
        arrays["head/bias"] = np.array([3.0], np.float32)
        WeightsStore(redis, names).publish(codec.encode(arrays))
        return start_role("actor", MODEL + actor_table)

    return start


def still_serving(actor: RoleProcess, pid: int, device: Device) -> None:
    """Same process, alive, never disconnected, and a good request answered correctly."""
    topic, body = device.ask({"x": [0.5, 1.25], "id": "good"})
    assert (topic, body["id"], body["version"]) == (device.replies, "good", 1), body
    assert body["y"] == pytest.approx(y_of(0.5, 1.25))
    assert actor.proc.pid == pid and actor.proc.poll() is None
    dropped = [line for line in actor.lines if "disconnected" in line or "Traceback" in line]
    assert dropped == [], "the broker never disconnected the actor, nothing escaped"


class Statuses:
    """The actors' retained statuses (`actors/{id}`), refreshed every 200 ms here."""

    def __init__(self, settings: Settings, names: Names) -> None:
        self.by_topic: dict[str, dict] = {}
        self.latest: dict = {}
        self.client = mqtt.connect(
            settings.mqtt,
            subscriptions=[(names.topic("actors/#"), 0)],
            on_message=self._on_message,
        )

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        if msg.payload:
            self.by_topic[msg.topic] = self.latest = json.loads(msg.payload)

    def __call__(self) -> dict:
        return self.latest

    def close(self) -> None:
        mqtt.close(self.client)


@pytest.fixture
def status(settings: Settings, names: Names):
    watcher = Statuses(settings, names)
    yield watcher
    watcher.close()


# -- 1: payloads a parser chokes on -------------------------------------------------------


def test_deep_nesting_and_oversize_payloads_get_error_replies(serve, devices):
    actor = serve()
    pid = actor.proc.pid
    me = devices()

    topic, body = me.ask(b"[" * 100_000)
    assert topic == me.replies and "too deep or too wide: 100000 lists" in body["error"]
    topic, body = me.ask(b"[" * 1_000, own=False, response_topic=me.replies + "/r")
    assert topic == me.replies + "/r" and "nested more than" in body["error"]
    nested = b'{"id": "deep", "x": ' + b"[" * 900 + b"1" + b"]" * 900 + b"}"
    assert me.ask(nested)[1] == {"id": None, "error": body["error"], "model": "h"}, "unread"
    _, body = me.ask(b" " * 1_500_000)  # over ingest.max_payload_bytes, under the broker's
    assert "exceeds max_payload_bytes=1048576" in body["error"]
    _, body = me.ask(b'{"id": "s", "x": "' + b"\\ud800" * 10 + b'"}')
    assert body["id"] == "s" and body["error"].startswith("x: ")
    still_serving(actor, pid, me)


def test_a_wide_request_gets_an_error_reply_naming_why_and_the_next_is_answered(serve, devices):
    """1 MiB of 80,000 made-up fields is refused before it is decoded, as are a list of
    500,000 numbers, a number of a million digits and an unterminated string of escaped
    quotes inside 20 lists."""
    actor = serve()
    pid = actor.proc.pid
    me = devices()
    wide = b'{"id": "w", "x": [1, 2], ' + b",".join(b'"%08x":0' % i for i in range(80_000))
    _, body = me.ask(wide + b"}")
    assert body["model"] == "h" and "request too wide: 160004 fields" in body["error"]
    _, body = me.ask(b'{"x": [' + b"0," * 500_000 + b"0]}")
    assert "request too wide" in body["error"]
    _, body = me.ask(b'{"id": "n", "x": [' + b"1" * 1_000_000 + b", 0]}")
    assert "invalid JSON: number out of range" in body["error"]
    # issue 62, finding 5: a regular expression over this took minutes (quadratic)
    _, body = me.ask(b'{"id": "q", "x": ' + b"[" * 20 + b'"' + b'\\"' * 500_000)
    assert "nested more than 16 levels deep" in body["error"]
    _, body = me.ask({"x": [1.0, 2.0], "id": "next"})
    assert body["id"] == "next" and body["y"] == pytest.approx(y_of(1.0, 2.0))
    still_serving(actor, pid, me)


# -- 3: reply topics --------------------------------------------------------------------


BAD_TOPICS = {
    "control character": "a\x01b",
    "NUL": "a\x00b",
    "C1 control": "a\x85b",
    "wildcard +": "a/+",
    "wildcard #": "a/#",
    "empty level": "a//b",
    "surrogate": "a\ud800",
    "too long": "a" * 600,
}


def test_reply_to_a_broker_would_refuse_gets_an_error_on_the_default_topic(serve, devices, names):
    actor = serve()
    pid = actor.proc.pid
    me = devices()
    for what, leaf in BAD_TOPICS.items():
        reply_to = f"{me.replies}/{leaf}"
        topic, body = me.ask({"x": [1, 2], "id": what, "reply_to": reply_to})
        assert topic == me.replies and body["id"] == what, what
        assert body["error"].startswith("reply topic ") and "refused" in body["error"], body
        # a 3.1.1 client on the bare topic: refused replies go to the predictions topic
        topic, body = me.ask({"x": [1, 2], "reply_to": reply_to}, own=False)
        assert topic == names.predictions_topic and "refused" in body["error"], what
    still_serving(actor, pid, me)


def test_response_topic_a_broker_would_refuse_never_reaches_a_publish(serve, devices, names):
    actor = serve()
    pid = actor.proc.pid
    me = devices()
    for leaf in ("a/+", "a/#", "a//b", "a" * 600):
        topic, body = me.ask({"x": [1, 2]}, response_topic=f"{me.replies}/{leaf}")
        assert topic == me.replies and "refused" in body["error"], leaf
    for leaf in ("a\x01b", "a\x00b", "a\x85b"):
        # Mosquitto drops such a request and its sender; another broker might pass it on
        rogue = devices()
        rogue.send({"x": [1, 2]}, response_topic=f"{rogue.replies}/{leaf}", qos=0)
    still_serving(actor, pid, me)


def test_a_response_topic_with_u_feff_gets_an_error_reply_not_a_disconnect(serve, devices):
    # Mosquitto passes U+FEFF on (MQTT 5 allows it); paho alone would call it malformed
    actor = serve()
    pid = actor.proc.pid
    me = devices()
    for _ in range(3):
        topic, body = me.ask({"x": [1, 2]}, response_topic=f"{me.replies}/a\ufeffb")
        assert topic == me.replies and "refused" in body["error"], body
    still_serving(actor, pid, me)


def test_replies_go_only_into_the_request_reply_space(serve, devices, settings, names, status):
    actor = serve()
    pid = actor.proc.pid
    me, other = devices(), devices()
    eventually(lambda: status().get("version") == 1, 15, "the actor's status")
    aimed = {
        "another actor's status": names.topic("actors/ghost"),
        "another client's replies": f"{other.replies}/x",
        "another client's own topic": other.replies,
        "the predictions topic": names.predictions_topic,
        "another model's replies": f"{settings.topic_prefix}/zz/replies/{me.cid}/x",
        "a prefix of my space": names.topic(f"replies/{me.cid}x/y"),
    }
    for what, target in aimed.items():
        for via in ("response_topic", "reply_to"):
            if via == "reply_to":
                topic, body = me.ask({"x": [1, 2], "id": what, "reply_to": target})
            else:
                topic, body = me.ask({"x": [1, 2], "id": what}, response_topic=target)
            assert topic == me.replies, (what, via, topic)
            assert "outside this request's reply space" in body["error"], (what, via)
    # from bare predict anything under replies/ is allowed, nothing else
    topic, body = me.ask({"x": [1, 2]}, own=False, response_topic=names.topic("actors/g"))
    assert topic == names.predictions_topic and "outside" in body["error"]
    # what is allowed: my space, the topic itself, and no reply topic at all
    for asked in (f"{me.replies}/a/b", me.replies, None):
        topic, body = me.ask({"x": [1, 2]}, response_topic=asked)
        assert (topic, body["y"]) == (asked or me.replies, y_of(1, 2))
    other_topic, _ = other.ask({"x": [1, 2]})  # after every request aimed at it
    mine = [m.topic for m in other.got if m.topic != names.predictions_topic]
    assert mine == [other_topic], "nothing reached the other client"
    ours = names.topic(f"actors/{status()['actor']}")
    assert list(status.by_topic) == [ours], "no ghost actor"
    still_serving(actor, pid, me)


# -- 4: rows and reply size -------------------------------------------------------------


def test_requests_over_the_row_cap_or_reply_size_get_error_replies(serve, devices):
    actor = serve()
    pid = actor.proc.pid
    me = devices()
    _, body = me.ask({"x": [[0.1, 0.2]] * 65, "id": "rows"})
    assert body == {"id": "rows", "error": body["error"], "model": "h"}
    assert "65 rows, more than max_request_rows=64" in body["error"]
    short_rows = b'{"x": [' + b"[0,0]," * 170_000 + b'[0,0]], "id": "mib"}'  # ~1 MiB
    assert len(short_rows) < 1_048_576
    _, body = me.ask(short_rows)
    assert body["id"] is None and "request too wide" in body["error"], "refused unread"
    rows = [[i / 7, 1 / 3] for i in range(60)]  # 60 long floats: a reply over 1024 bytes
    _, body = me.ask({"x": rows, "id": "big"})
    assert body["id"] == "big" and "exceeds the 1024 bytes a reply may have" in body["error"]
    _, body = me.ask({"x": rows[:10], "id": "small"})
    assert body["y"] == pytest.approx([y_of(*row) for row in rows[:10]])
    still_serving(actor, pid, me)


def test_a_reply_over_the_broker_packet_size_becomes_an_error_reply(
    start_role, redis, settings, devices
):
    """max_reply_bytes set above the broker's 2 MiB: the CONNACK's maximum packet size caps."""
    toml = """
[models.m]
inputs = 2
task = "multiclass"
classes = 300
architecture = "linear"

[models.m.actor]
max_reply_bytes = 16777216
"""
    names = Names("m", settings.topic_prefix, settings.key_prefix)
    arrays = tensors.get_arrays(networks.build_model(parse_config(tomllib.loads(toml)).model("m")))
    WeightsStore(redis, names).publish(codec.encode(arrays))
    actor = start_role("actor", toml)
    pid = actor.proc.pid
    me = Device(settings, names)
    try:
        rows = [[i / 7, 1 / 3] for i in range(1024)]  # 1024 x 300 probabilities: ~6 MB
        _, body = me.ask({"x": rows, "id": "huge"})
        assert body["id"] == "huge" and "bytes a reply may have" in body["error"], body
        limit = int(body["error"].split("exceeds the ")[1].split()[0])
        assert limit < 2_097_152, "under the broker's maximum packet size"
        _, body = me.ask({"x": rows[:2], "id": "ok"})
        assert len(body["y"]) == 2 and len(body["y"][0]) == 300 and body["version"] == 1
        assert actor.proc.pid == pid and actor.proc.poll() is None
        assert not [line for line in actor.lines if "disconnected" in line]
    finally:
        me.close()


# -- 7: floods, the inbox bound and deadlines -------------------------------------------


def flood_target(serve, devices, status, setting: str) -> tuple[RoleProcess, int, Device]:
    """A serving actor with `setting`, its pid, and a device to flood it from."""
    actor = serve(ACTOR + setting + "\n")
    me = devices()
    eventually(lambda: status().get("version") == 1, 15, "the actor's status")
    return actor, actor.proc.pid, me


FLOOD = json.dumps({"x": [[0.25, 0.5]] * 64}).encode()  # one forward pass (max_batch 64)


def test_a_flood_beyond_the_inbox_bound_is_shed_and_counted(serve, devices, status):
    actor, pid, me = flood_target(serve, devices, status, "max_queued_requests = 2")
    sent = [me.send(FLOOD, qos=0) for _ in range(600)]
    # one status snapshot, so that its counters agree with each other (it is refreshed
    # while the last replies are still in flight)
    eventually(
        lambda: (
            (s := status())["requests_shed"] + len(me.got) == len(sent)
            and s["served"] == len(me.got)
        ),
        30,
        "every request answered and counted as served, or shed and counted",
    )
    assert status()["requests_shed"] > 0 and len(me.got) > 0
    assert all(json.loads(m.payload)["y"] == [y_of(0.25, 0.5)] * 64 for m in me.got)
    still_serving(actor, pid, me)


def test_past_half_the_inbox_one_clients_flood_leaves_room_for_another(
    serve, devices, status, redis
):
    """Issue 62, finding 8: while the actor waits on Redis (paused 3 s; it keeps the
    predictions of requests with an id there), one client sends 200 requests to an inbox of
    40: past half of it, that client is held to its share (5) and the rest are shed. Another
    client's 5 requests, sent after, are queued and answered once Redis is back; before,
    the flood filled the inbox and they were shed."""
    actor, pid, flood = flood_target(serve, devices, status, "max_queued_requests = 40")
    other = devices()
    redis.client_pause(3000, all=True)
    topic = flood.names.topic(f"predict/{flood.cid}")
    infos = [
        flood.client.publish(topic, json.dumps({"x": [0.25, 0.5], "id": f"f{i}"}), qos=1)
        for i in range(200)
    ]
    infos[-1].wait_for_publish(10)  # (in order: the broker has had every one of them)
    mine = [other.send({"x": [0.5, 1.25], "id": f"o{i}"}) for i in range(5)]
    for correlation in mine:
        _, body = other.reply(correlation, 30)
        assert body["y"] == pytest.approx(y_of(0.5, 1.25)), body
    eventually(lambda: status()["requests_shed"] >= 150, 15, "the flood shed past its share")
    still_serving(actor, pid, other)


@pytest.mark.serial  # 10 ms deadlines: under pytest -n 4 on 2 cores every request expired
def test_requests_past_their_deadline_are_not_computed(serve, devices, status):
    actor, pid, me = flood_target(serve, devices, status, "request_deadline_ms = 10")
    sent = [me.send(FLOOD, qos=0) for _ in range(500)]  # far more than 10 ms of work
    eventually(lambda: len(me.got) >= len(sent), 30, "every request answered")
    replies = [json.loads(m.payload) for m in me.got]
    expired = [r for r in replies if "error" in r]
    computed = [r for r in replies if "y" in r]
    assert expired and computed and len(expired) + len(computed) == len(sent)
    assert all("deadline exceeded" in r["error"] for r in expired)
    assert all(r["y"] == [y_of(0.25, 0.5)] * 64 for r in computed)
    eventually(lambda: status()["requests_expired"] == len(expired), 10, "expired counted")
    assert status()["batches"] == len(computed), "an expired request is never computed"
    still_serving(actor, pid, me)


# -- pure checks --------------------------------------------------------------------------


def test_a_message_expiry_interval_shortens_the_deadline():
    inbox = Inbox(10, 1 << 20, deadline_ms=5000, max_payload_bytes=1 << 20)
    for expiry, wait_s in ((None, 5.0), (2, 2.0), (9, 5.0)):
        msg = paho.MQTTMessage(topic=b"t/h/predict")
        msg.payload = b"{}"
        if expiry is not None:
            msg.properties = Properties(PacketTypes.PUBLISH)
            msg.properties.MessageExpiryInterval = expiry
        assert inbox.put(msg)
        arrival = inbox.get(0)
        assert arrival is not None
        assert arrival.deadline - arrival.arrived == pytest.approx(wait_s)


def test_the_inbox_sheds_beyond_its_bounds_and_keeps_no_oversize_payload():
    inbox = Inbox(2, 100, deadline_ms=5000, max_payload_bytes=60)
    msgs = [paho.MQTTMessage(topic=b"t/h/predict") for _ in range(4)]
    for msg, size in zip(msgs, (50, 1000, 50, 10), strict=True):
        msg.payload = b"x" * size
    assert [inbox.put(m) for m in msgs] == [True, True, False, False]
    assert inbox.shed == 2 and inbox.qsize() == 2
    first, second = inbox.get(0), inbox.get(0)
    assert first is not None and second is not None
    assert (second.size, second.payload) == (1000, b"")


def test_the_inbox_keeps_what_serving_reads_not_the_paho_message():
    inbox = Inbox(10, 1 << 20, deadline_ms=5000, max_payload_bytes=1 << 20)
    msg = paho.MQTTMessage(topic=b"t/h/predict/\xff")  # not UTF-8: no reply can be routed
    msg.payload = b"{}"
    msg.properties = Properties(PacketTypes.PUBLISH)
    msg.properties.CorrelationData = b"c1"
    msg.properties.ResponseTopic = "t/h/replies/me"
    assert inbox.put(msg)
    arrival = inbox.get()
    assert arrival is not None and not isinstance(arrival, paho.MQTTMessage)
    assert (arrival.topic, arrival.payload, arrival.correlation, arrival.response_topic) == (
        None,
        b"{}",
        b"c1",
        "t/h/replies/me",
    )


def test_nesting_is_measured_outside_strings():
    assert too_deep(b"[" * 100_000)
    assert not too_deep(b'{"x": [[1, 2]], "id": "' + b"[" * 1000 + b'"}')
    assert too_deep(b'{"x": ' + b"[" * 16 + b"]" * 16 + b"}")


@pytest.mark.parametrize(
    ("request_topic", "asked", "topic", "refused"),
    [
        ("p/m/predict/me", None, "p/m/replies/me", None),
        ("p/m/predict/me", "p/m/replies/me", "p/m/replies/me", None),
        ("p/m/predict/me", "p/m/replies/me/x/y", "p/m/replies/me/x/y", None),
        ("p/m/predict/me", "p/m/replies/mex", "p/m/replies/me", "outside"),
        ("p/m/predict/me", "p/m/replies/you/x", "p/m/replies/me", "outside"),
        ("p/m/predict/me", "p/m/actors/x", "p/m/replies/me", "outside"),
        ("p/m/predict", None, "p/m/predictions", None),
        ("p/m/predict", "p/m/replies/you/x", "p/m/replies/you/x", None),
        ("p/m/predict", "p/m/replies", "p/m/predictions", "outside"),
        ("p/m/predict", "p/m/replies/", "p/m/predictions", "empty topic level"),
        ("p/m/predict", "p/m/status", "p/m/predictions", "outside"),
        ("p/m/predict", 42, "p/m/predictions", "must be a string"),
        ("p/m/predict", "p/m/replies/\x7f", "p/m/predictions", "control character U+007F"),
        ("p/m/predict", "p/m/replies/\ufeff", "p/m/predictions", "invalid character U+FEFF"),
        ("p/m/predict", "p/m/replies/\U0001ffff", "p/m/predictions", "invalid character"),
        ("p/m/predict", "p/m/replies/" + "é" * 300, "p/m/predictions", "longer than 512"),
    ],
)
def test_reply_routes(request_topic, asked, topic, refused):
    route = ReplyRoutes(Names("m", "p")).route(request_topic, asked)
    assert route.topic == topic
    assert (route.refused is None) if refused is None else (refused in route.refused)


def test_topic_problem_accepts_ordinary_topics():
    assert topic_problem("streamlearn/demo/replies/dev-1/é/ü") is None
    assert topic_problem("a" * 512) is None and topic_problem("a" * 513) is not None
    assert "wildcard" in topic_problem("a/+/b") and topic_problem("") == "empty topic"


def test_an_http_address_past_its_share_of_a_crowded_inbox_is_shed_and_another_is_not():
    """Issue 62: past half of the inbox, an HTTP client's address holds at most 1/8 of it,
    as a `predict/{client}` does: 45 requests of one address into an inbox of 40, with
    nothing served meanwhile, take half of it, and another address's are still queued
    (before, the first took all 40 and the other's was shed)."""
    inbox = Inbox(40, 1 << 20, deadline_ms=5000, max_payload_bytes=1 << 20)

    def request(peer: str) -> Pending:
        x = np.zeros((1, 3), np.float32)
        return Pending(time.monotonic(), x, True, None, None, None, peer=peer)

    flood = [inbox.offer(request("10.0.0.9"), 100) for _ in range(45)]
    assert flood.count(True) == 20 and inbox.shed == 25, flood  # half: then past its share
    assert inbox.admits(100, "10.0.0.7") and inbox.offer(request("10.0.0.7"), 100)
    assert not inbox.admits(100, "10.0.0.9"), "the flooding address stays shed"
