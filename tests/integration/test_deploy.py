"""The files under deploy/ and compose.yaml, checked with the real servers they configure.

No Docker engine runs here, so each part is tested for real on its own: the broker config,
password file and ACL on a real mosquitto; the Redis ACL on a real redis-server; the
whole stack of worker processes under those least-privilege users; TLS; and compose.yaml
for consistency with the code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paho.mqtt.client as paho
import pytest
import redis as redis_lib
import yaml

from streamlearn import mqtt, mqtt_packets
from streamlearn.actor.labels import DoorLabels
from streamlearn.config import LabelsConfig, ModelConfig, Settings, load_config
from streamlearn.contract.names import Names, http_owner, owned
from streamlearn.contract.records import Samples
from streamlearn.errors import StreamlearnError, WeightsError
from streamlearn.observe.monitor import StatusMonitor, queue_figures
from streamlearn.stack.embedded import free_port
from streamlearn.store import pending
from streamlearn.store.lease import Lease
from streamlearn.store.pending import PendingStore
from streamlearn.store.state_index import StateIndex
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore
from tests.conftest import ROOT, eventually, role_env
from tests.deployed import (
    MQTT_PW,
    REDIS_PW,
    DeployedBroker,
    deployed_broker,
    device_url,
    mqtt_url,
    redis_as,
)

# -- mosquitto -----------------------------------------------------------------------------

NOT_AUTHORIZED = 0x87


class Peer:
    """One MQTT v5 client: what it receives, and the broker's PUBACK reason per publish."""

    def __init__(
        self,
        url: str,
        topics: list[str] = (),
        client_id: str | None = None,
        ca_file: Path | None = None,
        persistent: bool = False,
    ) -> None:
        self.got: list[paho.MQTTMessage] = []
        self.acks: dict[int, int] = {}
        self.disconnects = 0
        self._cond = threading.Condition()
        self.client = mqtt.connect(
            url,
            client_id,
            subscriptions=[(t, 1) for t in topics],
            on_message=self._on_message,
            ca_file=str(ca_file) if ca_file else None,
            persistent=persistent,
        )
        self.client.on_publish = self._on_publish
        on_disconnect = self.client.on_disconnect

        def counted(*args: object) -> None:
            self.disconnects += 1
            on_disconnect(*args)

        self.client.on_disconnect = counted

    def _on_message(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.got.append(msg)
            self._cond.notify_all()

    def _on_publish(self, _c: object, _u: object, mid: int, reason: object, _p: object) -> None:
        with self._cond:
            self.acks[mid] = getattr(reason, "value", 0)
            self._cond.notify_all()

    def publish(self, topic: str, payload: bytes = b"{}") -> int:
        """Publish with QoS 1; the broker's PUBACK reason code (0: accepted)."""
        mid = self.client.publish(topic, payload, qos=1).mid
        with self._cond:
            assert self._cond.wait_for(lambda: mid in self.acks, 10), f"no PUBACK for {topic}"
            return self.acks[mid]

    def wait_for(self, topic: str, timeout_s: float = 10) -> None:
        """Until a message on `topic` has arrived (messages from one publisher arrive in
        the order published, so what it published before has arrived too, or never will)."""
        self.wait_until(lambda m: m.topic == topic, f"a message on {topic}", timeout_s)

    def wait_until(
        self, match: Callable[[paho.MQTTMessage], bool], what: str, timeout_s: float = 10
    ) -> None:
        with self._cond:
            done = self._cond.wait_for(lambda: any(match(m) for m in self.got), timeout_s)
            assert done, f"no {what} within {timeout_s} s; got {self.topics()}"

    def topics(self) -> list[str]:
        return [m.topic for m in self.got]

    def close(self) -> None:
        mqtt.close(self.client)


def device(broker: DeployedBroker, name: str, topics: list[str] = (), **kw: object) -> Peer:
    """A device on the TLS listener with its own account."""
    return Peer(device_url(broker, name), topics, ca_file=broker.ca_file, **kw)


def test_anonymous_and_wrong_password_are_refused(broker):
    for url in (f"mqtt://127.0.0.1:{broker.port}", mqtt_url(broker, "learner", "not-it")):
        with pytest.raises(StreamlearnError, match="refused"):
            mqtt.connect(url, timeout_s=5)
    for url in (f"mqtts://localhost:{broker.tls_port}", device_url(broker, "alice", "not-it")):
        with pytest.raises(StreamlearnError, match="refused"):
            mqtt.connect(url, ca_file=str(broker.ca_file), timeout_s=5)


def test_devices_connect_over_tls_only(broker):
    """The devices' listener speaks TLS with the certificate make-certs.sh made."""
    with pytest.raises(StreamlearnError):  # plaintext on the TLS port
        mqtt.connect(f"mqtt://alice:{MQTT_PW['alice']}@localhost:{broker.tls_port}", timeout_s=3)
    with pytest.raises(StreamlearnError):  # TLS, but a server the client cannot verify
        mqtt.connect(device_url(broker, "alice"), timeout_s=3)
    names = Names("m")
    ingest = Peer(mqtt_url(broker, "ingest"), [names.shared("samples/+", "g")])
    alice = device(broker, "alice", client_id="alice")
    assert alice.publish(names.topic("samples/alice"), b"over tls") == 0
    ingest.wait_for(names.topic("samples/alice"))
    assert ingest.got[0].payload == b"over tls"
    for peer in (ingest, alice):
        peer.close()


def test_only_the_actor_account_pings_and_echoes_on_the_probe_topics(broker):
    """The broker-delay probe (streamlearn/observe/broker_delay.py): an actor's second
    connection pings `probe/{id}` and the actor echoes on `probe/{id}/echo`, both as the
    actor account; a device can neither answer a ping nor read one."""
    names = Names("m")
    actor = Peer(mqtt_url(broker, "actor"), [names.topic("probe/#")])
    alice = device(broker, "alice", [names.topic("probe/#")], client_id="alice")
    learner = Peer(mqtt_url(broker, "learner"))
    try:
        for peer in (alice, learner):
            assert peer.publish(names.topic("probe/a1/echo")) == NOT_AUTHORIZED
        assert actor.publish(names.topic("probe/a1")) == 0
        assert actor.publish(names.topic("probe/a1/echo")) == 0
        actor.wait_for(names.topic("probe/a1/echo"))  # after the ping, and nothing refused
        assert actor.topics() == [names.topic("probe/a1"), names.topic("probe/a1/echo")]
        assert alice.topics() == []
    finally:
        for peer in (actor, alice, learner):
            peer.close()


def test_each_device_is_confined_to_its_own_requests_and_replies(broker):
    names = Names("m")
    actor = Peer(
        mqtt_url(broker, "actor"), [names.shared("predict", "g"), names.shared("predict/+", "g")]
    )
    ingest = Peer(mqtt_url(broker, "ingest"), [names.shared("samples/+", "g")])
    learner = Peer(mqtt_url(broker, "learner"))
    replies = names.topic("replies/#")
    alice = device(
        broker, "alice", [replies, names.predictions_topic, names.status_topic], client_id="alice"
    )
    bob = device(broker, "bob", [names.topic("replies/bob/#")], client_id="bob")

    # Requests only on predict/<own client id>; nothing a device may not write gets in.
    assert alice.publish(names.topic("predict/alice")) == 0
    for topic in (
        names.predict_topic,
        names.topic("predict/bob"),
        names.samples_topic,
        names.topic("samples/bob"),
        names.status_topic,
        names.predictions_topic,
        names.topic("replies/bob/1"),
        names.topic("actors/x"),
    ):
        assert alice.publish(topic) == NOT_AUTHORIZED, topic
    assert alice.publish(names.topic("samples/alice")) == 0
    ingest.wait_for(names.topic("samples/alice"))  # her last publish: the refused are not in
    assert ingest.topics() == [names.topic("samples/alice")]
    actor.wait_for(names.topic("predict/alice"))
    assert actor.topics() == [names.topic("predict/alice")]

    # Replies: each device reads its own; the status comes only from the learner.
    assert actor.publish(names.topic("replies/bob/1"), b'{"to": "bob"}') == 0
    assert actor.publish(names.topic("replies/alice/1"), b'{"to": "alice"}') == 0
    assert learner.publish(names.status_topic, b'{"version": 1}') == 0
    bob.wait_for(names.topic("replies/bob/1"))
    alice.wait_for(names.topic("replies/alice/1"))
    alice.wait_for(names.status_topic)
    assert sorted(alice.topics()) == sorted([names.topic("replies/alice/1"), names.status_topic])
    assert bob.topics() == [names.topic("replies/bob/1")]

    # Alice asking for bob's client id is still alice: bob keeps his connection and his
    # replies, and she can neither send bob's requests nor read his replies.
    impostor = device(broker, "alice", [names.topic("replies/bob/#"), replies], client_id="bob")
    assert impostor.publish(names.topic("predict/bob")) == NOT_AUTHORIZED
    assert impostor.publish(names.topic("predict/alice")) == 0
    actor.wait_for(names.topic("predict/alice"))
    assert bob.publish(names.topic("predict/bob")) == 0
    actor.wait_for(names.topic("predict/bob"))
    assert actor.publish(names.topic("replies/bob/2")) == 0
    assert actor.publish(names.topic("replies/alice/2")) == 0
    bob.wait_for(names.topic("replies/bob/2"))
    impostor.wait_for(names.topic("replies/alice/2"))
    assert impostor.topics() == [names.topic("replies/alice/2")]
    assert bob.disconnects == 0 and bob.client.is_connected()
    for peer in (actor, ingest, learner, alice, bob, impostor):
        peer.close()


def test_labels_come_only_from_their_requester_or_the_labeller_account(broker):
    """A device labels only its own requests (labels/<its client id>); the `labeller`
    account labels any device's and the anonymous namespace's (bare labels)."""
    names = Names("m")
    leaves = ("labels", "labels/+")
    ingest = Peer(mqtt_url(broker, "ingest"), [names.shared(leaf, "g") for leaf in leaves])
    alice = device(broker, "alice", client_id="alice")
    labeller = device(broker, "labeller", client_id="labeller")
    for topic in (names.labels_topic, names.topic("labels/bob")):
        assert alice.publish(topic, b"alice's") == NOT_AUTHORIZED, topic
    assert alice.publish(names.topic("labels/alice"), b"alice's") == 0
    for topic in (names.topic("labels/bob"), names.labels_topic):
        assert labeller.publish(topic, b"labeller's") == 0, topic
    assert labeller.publish(names.topic("samples/alice"), b"labeller's") == NOT_AUTHORIZED
    ingest.wait_until(lambda _m: len(ingest.got) == 3, "three labels")
    got = sorted((m.topic, m.payload) for m in ingest.got)
    assert got == sorted(
        [
            (names.topic("labels/alice"), b"alice's"),
            (names.topic("labels/bob"), b"labeller's"),
            (names.labels_topic, b"labeller's"),
        ]
    )
    for peer in (ingest, alice, labeller):
        peer.close()


def test_a_full_queue_drops_samples_and_status_says_so(settings, tmp_path):
    """Beyond max_queued_messages the broker drops samples it has acknowledged to devices:
    they are counted in $SYS/broker/publish/messages/dropped, and `streamlearn status`
    shows the count with a warning."""
    names = Names("m")
    limit, sent = 10, 30
    overrides = {"max_queued_messages": str(limit), "sys_interval": "1"}
    with deployed_broker(overrides) as broker:
        # An ingest worker's persistent session, away (a restart, or back-pressure holding).
        worker = ("ingest", [names.shared("samples/+", "streamlearn")], "sl-ingest-m-1")
        Peer(mqtt_url(broker, worker[0]), worker[1], worker[2], persistent=True).close()
        sensor = device(broker, "dev-1", client_id="dev-1")
        mine = names.topic("samples/dev-1")
        for i in range(sent):
            assert sensor.publish(mine, str(i).encode()) == 0, "acknowledged"

        toml = tmp_path / "streamlearn.toml"
        toml.write_text('[models.m]\ninputs = 2\ntask = "regression"\n')
        learner = Settings(mqtt_url=mqtt_url(broker, "learner"), redis_url=settings.redis)
        monitor = StatusMonitor(load_config(str(toml)), learner)
        try:
            eventually(
                lambda: monitor.broker().get("dropped_messages") == sent - limit,
                15,
                f"{sent - limit} dropped messages counted",
            )
        finally:
            monitor.close()
        env = role_env(learner)
        argv = [sys.executable, "-m", "streamlearn", "status", "--config", str(toml)]
        as_json = subprocess.run(
            [*argv, "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        rows = json.loads(as_json.stdout)
        assert rows[0]["broker"]["dropped_messages"] == sent - limit, as_json.stderr
        assert "lost" in rows[0]["broker"]["warning"]
        text = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60).stdout
        assert f"WARNING: the broker dropped {sent - limit} messages" in text, text
        assert re.search(
            rf"broker: {sent - limit} messages dropped .*, \d+ stored \(\d+ bytes\), up \d+ s", text
        )

        # The worker back: the first `limit` samples waited for it, the rest are gone.
        back = Peer(mqtt_url(broker, worker[0]), worker[1], worker[2], persistent=True)
        assert sensor.publish(mine, b"after") == 0
        back.wait_until(lambda m: m.payload == b"after", "the sample sent after its return")
        assert [m.payload for m in back.got] == [str(i).encode() for i in range(limit)] + [b"after"]
        for peer in (back, sensor):
            peer.close()


# -- redis ---------------------------------------------------------------------------------


def test_redis_roles_can_do_their_job_and_nothing_else(acl_redis):
    names = Names("m")
    ingest, learner, actor = (redis_as(acl_redis, r) for r in ("ingest", "learner", "actor"))

    # Each role's real code path works under its user.
    SampleStream(learner, names, (2,)).ensure_group()
    SampleStream(ingest, names, (2,)).write(
        [Samples(np.ones((3, 2), np.float32), np.ones(3, np.float32))]
    )
    consumer = SampleStream(learner, names, (2,))
    entries = consumer.read("l", 10, None)
    assert len(entries) == 1 and len(entries[0].samples) == 3
    consumer.ack([e.id for e in entries])
    consumer.trim()
    WeightsStore(learner, names).publish(b"blob")
    assert WeightsStore(actor, names).fetch() == (1, b"blob")
    # the operator's commands run with the learner's account: pin, a refused pin, unpin
    operator = WeightsStore(learner, names)
    operator.pin(1)
    assert WeightsStore(actor, names).pinned_version() == 1
    with pytest.raises(WeightsError, match=r"no version 7 in Redis; versions kept: \[1\]"):
        operator.pin(7)
    assert operator.unpin() == 1 and WeightsStore(actor, names).pinned_version() is None
    # a version label (`pin --label`), which the actor reads with the versions kept (the
    # HTTP door's metadata); `status` and `export` with the learner's account
    operator.label("stable", 1)
    assert WeightsStore(actor, names).targets() == (1, None, {"stable": 1})
    assert WeightsStore(actor, names).versions() == [1] == operator.versions()
    assert [v for v, _ in operator.history_versions()] == [1]
    # the learner's lease (one learner per model): taken, renewed, read, released
    lease = Lease(learner, names, 10)
    assert lease.take() and lease.renew() and lease.holder() is not None and lease.release()
    # the actors' index of retained device states: the oldest past the bound taken out,
    # the keys checked that it no longer holds
    index = StateIndex(actor, names, max_devices=1)
    assert index.touch([("a", 1.0), ("b", 2.0)]) == (["a", "b"], ["a"], [])
    assert index.touch([], ["a", "b"]) == ([], [], ["a"])
    assert queue_figures(learner, names)["latest_version"] == 1
    # labels that come later: the actor keeps, ingest reads and joins, the learner reports
    labels = LabelsConfig()
    value = pending.encode(np.ones(2, np.float32), np.array([0.5], np.float32), 1, 0.0)
    PendingStore(actor, names, labels).keep(["r1"], [value])
    joiner = PendingStore(ingest, names, labels)
    assert joiner.fetch(["r1", "r2"]) == [value, None]
    assert joiner.join([pending.Joined("r1", 0.25, 1.0, 0.5)], unknown=1) == 1
    served = PendingStore(learner, names, labels).served("mae")
    assert served is not None and (served["labels"], served["unknown"]) == (1, 1)
    # ... and the actor's HTTP door joins its callers' labels as ingest does
    caller = http_owner(None, "10.0.0.5")
    PendingStore(actor, names, labels).keep([owned(caller, "h1")], [value])
    door = DoorLabels(ModelConfig(name="m", inputs=2, task="regression"), actor, names)
    assert door.held_back() is None
    assert door.take(b'{"labels": [{"id": "h1", "y": 1}, {"id": "h2", "y": 1}]}', caller)[
        "results"
    ] == ["joined", "unknown_id"]
    assert door.take(b'{"id": "h1", "y": 1}', caller)["results"] == ["duplicate"]
    assert int(learner.hget(names.served_key, "labels")) == 2

    denied = [
        (ingest, ["HSET", names.blobs_key, "2", "x"]),
        (ingest, ["XREADGROUP", "GROUP", "learners", "x", "STREAMS", names.samples_key, ">"]),
        (ingest, ["GET", names.latest_key]),
        (actor, ["XADD", names.deadletter_key, "*", "n", "1"]),
        (actor, ["SET", names.latest_key, "99"]),
        (actor, ["PUBLISH", names.weights_channel, "99"]),
        (learner, ["SET", "other", "x"]),
        (learner, ["XGROUP", "DESTROY", names.samples_key, "learners"]),
        (learner, ["HINCRBY", names.served_key, "labels", "1"]),
        (actor, ["HINCRBY", names.fields_key, "extra", "1"]),
        (actor, ["GET", names.samples_key]),
    ]
    ingest.xadd(names.deadletter_key, {"reason": "test"})
    # The commands ingest and the learner need on other keys never reach the sample stream
    # nor the dead letters, directly or from a script (Redis 7 selectors).
    for client in (ingest, learner):
        for key in (names.samples_key, names.deadletter_key):
            denied += [(client, [cmd, key]) for cmd in ("UNLINK", "DEL", "GET")]
            denied += [(client, ["SET", key, "x"]), (client, ["EXPIRE", key, "1"])]
            script = "return redis.call('UNLINK', KEYS[1])"
            with pytest.raises(redis_lib.exceptions.ResponseError, match="can't access"):
                client.execute_command("EVAL", script, "1", key)
    # the actor's too (the HTTP door's labels append to the stream, as ingest's do)
    denied += [(actor, [cmd, names.samples_key]) for cmd in ("UNLINK", "DEL")]
    denied += [
        (actor, ["SET", names.samples_key, "x"]),
        (actor, ["EXPIRE", names.samples_key, "1"]),
    ]
    with pytest.raises(redis_lib.exceptions.ResponseError, match="can't access"):
        actor.execute_command(
            "EVAL", "return redis.call('UNLINK', KEYS[1])", "1", names.samples_key
        )
    for client in (ingest, learner, actor):
        denied += [
            (client, ["FLUSHALL"]),
            (client, ["CONFIG", "GET", "*"]),
            (client, ["KEYS", "*"]),
        ]
    for client, command in denied:
        with pytest.raises(redis_lib.exceptions.NoPermissionError):
            client.execute_command(*command)
    with pytest.raises(redis_lib.exceptions.AuthenticationError):
        redis_lib.Redis(port=acl_redis.port).ping()
    assert WeightsStore(actor, names).fetch() == (1, b"blob"), "nothing denied took effect"
    assert learner.exists(names.samples_key, names.deadletter_key) == 2, "both streams kept"


def test_the_acl_example_is_what_make_acl_writes(tmp_path):
    """deploy/redis/users.acl.example, the rules a reader sees, is make-acl.sh's output (which
    the tests here load into a real Redis) with placeholders for the hashes."""
    out = tmp_path / "users.acl"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_ADMIN_PASSWORD"}
    env.update({f"REDIS_{r.upper()}_PASSWORD": REDIS_PW[r] for r in ("ingest", "learner", "actor")})
    cmd = ["sh", str(ROOT / "deploy/redis/make-acl.sh"), str(out)]
    subprocess.run(cmd, env=env, cwd=tmp_path, check=True, capture_output=True)
    text = out.read_text()
    for role in ("ingest", "learner", "actor"):
        digest = hashlib.sha256(REDIS_PW[role].encode()).hexdigest()
        placeholder = (
            f"REPLACE-WITH-SHA256-OF-REDIS_{role.upper()}_PASSWORD-run-deploy/redis/make-acl.sh"
        )
        text = text.replace(digest, placeholder)
    assert (ROOT / "deploy/redis/users.acl.example").read_text() == text


# -- the whole stack under least privilege ---------------------------------------------------


def test_stack_runs_with_least_privilege_users(broker, acl_redis, tmp_path):
    """ingest, learner and actor processes with their own MQTT and Redis users; a device
    with its own account publishes samples over TLS and gets a prediction on its own reply
    topic for a request on its own request topic; so does `streamlearn predict`. The
    operator's account (the learner's, as in `docker compose exec learner streamlearn
    status`) sees the learner's and ingest's presence markers and the learner's status,
    and the broker's will clears a killed learner's marker: the ACL lets each through. The
    actor's HTTP door answers metadata, versioned readiness and inference under its Redis
    account, and Redis's ACL LOG holds no refusal at the end."""
    from tests.conftest import RoleProcess

    port = free_port()
    toml = tmp_path / "streamlearn.toml"
    toml.write_text(
        f'[models.s]\ninputs = 2\ntask = "regression"\n[models.s.actor]\nhttp_port = {port}\n'
    )
    admin = redis_as(acl_redis, "admin")
    admin.acl_log_reset()  # the other tests' refusals on the module's Redis
    procs = []
    monitor = None
    try:
        for role in ("learner", "ingest", "actor"):
            settings = Settings(
                mqtt_url=mqtt_url(broker, role),
                redis_url=f"redis://{role}:{REDIS_PW[role]}@127.0.0.1:{acl_redis.port}/0",
            )
            proc = RoleProcess(
                [sys.executable, "-m", f"streamlearn.{role}.worker", "--config", str(toml)],
                role_env(settings),
            )
            procs.append(proc)
        for proc in procs:
            proc.wait_for(" ready", 90)
        names = Names("s")
        operator = Settings(mqtt_url=mqtt_url(broker, "learner"))
        monitor = StatusMonitor(load_config(str(toml)), operator)
        sensor = device(broker, "dev-1", [names.topic("replies/dev-1/#")], client_id="dev-1")
        for i in range(50):
            sample = {"x": [0.1 * i, 1.0], "y": 0.5}
            assert sensor.publish(names.topic("samples/dev-1"), json.dumps(sample).encode()) == 0
        store = redis_as(acl_redis, "actor")
        eventually(lambda: int(store.get(names.latest_key) or 0) > 0, 60, "a version")
        correlation = uuid.uuid4().bytes
        sensor.client.publish(
            names.topic("predict/dev-1"),
            json.dumps({"x": [0.2, 1.0], "id": "lp-1"}),
            qos=1,
            properties=mqtt_packets.request_properties(names.topic("replies/dev-1/r"), correlation),
        )
        sensor.wait_for(names.topic("replies/dev-1/r"), 15)
        reply = json.loads(sensor.got[0].payload)
        # its label, later, from the same device on its own labels topic: ingest joins it
        # to what the actor kept for its request
        label = json.dumps({"id": "lp-1", "y": 0.7}).encode()
        assert sensor.publish(names.topic("labels/dev-1"), label) == 0
        sensor.close()
        assert sensor.got[0].properties.CorrelationData == correlation
        assert reply.get("version", 0) > 0, (reply, [p.output[-2000:] for p in procs])
        # The client tool, as another device over TLS, whatever client id it would pick.
        tool = Settings(mqtt_url=device_url(broker, "bob"), mqtt_ca_file=str(broker.ca_file))
        argv = [sys.executable, "-m", "streamlearn", "predict", "--config", str(toml)]
        answer = subprocess.run(
            [*argv, "[0.2, 1.0]"], env=role_env(tool), capture_output=True, text=True, timeout=60
        )
        assert answer.returncode == 0 and json.loads(answer.stdout)["version"] > 0, answer
        # The HTTP door under the actor's account: metadata (the versions kept), a version's
        # readiness, an inference with an id (kept for its label), and its label, joined by
        # the door itself (the actor's account appends it, as ingest's does).
        http = f"http://127.0.0.1:{port}/v2/models/s"
        version = reply["version"]
        assert str(version) in http_json(http)["versions"]
        assert http_json(f"{http}/versions/{version}/ready")["ready"] is True
        body = {
            "id": "h-1",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [0.2, 1.0]}],
        }
        assert len(http_json(f"{http}/infer", body)["outputs"][0]["data"]) == 1
        assert http_json(f"{http}/versions/{version}/infer", body)["model_version"] == str(version)
        labelled = http_json(f"{http}/labels", {"id": "h-1", "y": 0.4})
        assert labelled["results"] == ["joined"], labelled

        # Presence under the deploy ACL: both markers reach the operator, so does the
        # learner's plain status (`status/#` covers `status` itself); a SIGKILLed learner's
        # marker is cleared by its will, while its retained status stays.
        for role in ("learner", "ingest"):
            eventually(lambda r=role: monitor.present("s", r), 15, f"the {role}'s presence")
            assert monitor.present("s", role)[0]["role"] == role
        eventually(lambda: monitor.learner("s").get("version", 0) > 0, 15, "the learner's status")
        joined = lambda: (monitor.learner("s").get("served") or {}).get("labels") == 2  # noqa: E731
        eventually(joined, 30, "both labels joined and scored, in the learner's status")
        procs[0].stop(kill=True)
        eventually(lambda: not monitor.present("s", "learner"), 30, "the killed learner's will")
        assert monitor.present("s", "ingest") and monitor.learner("s").get("version", 0) > 0
    finally:
        if monitor is not None:
            monitor.close()
        for proc in procs:
            proc.stop()
    refusals = [line for p in procs for line in p.lines if "NOPERM" in line or "authori" in line]
    assert not refusals
    assert admin.acl_log() == [], "Redis refused a role something its doors offer"


def http_json(url: str, body: dict | None = None) -> dict:
    """A JSON answer of the actor's HTTP door; HTTPError on any status but 2xx."""
    data = None if body is None else json.dumps(body).encode()
    kind = {"Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, data, kind), timeout=30) as r:
        return json.loads(r.read())


# -- compose.yaml ----------------------------------------------------------------------------

# Mounted files that deploy/ scripts generate (never committed), and their generators.
GENERATED = {"passwd": "make-passwd.sh", "users.acl": "make-acl.sh", "certs": "make-certs.sh"}


def test_compose_file_is_consistent_with_the_code():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    settings_vars = {f"STREAMLEARN_{name.upper()}" for name in Settings.model_fields}
    roles = {"ingest", "learner", "actor"}
    images = ("streamlearn", "streamlearn-actor")  # the actors' has no TensorFlow
    ours = {n: s for n, s in services.items() if s.get("image", "").split(":")[0] in images}
    assert {s["command"][0] for s in ours.values()} == roles, "every role runs, by its command"
    assert (
        sum(
            s.get("deploy", {}).get("replicas", 1)
            for s in ours.values()
            if s["command"][0] == "actor"
        )
        >= 2
    )
    assert sum(1 for s in ours.values() if s["command"][0] == "ingest") >= 2
    gpu = [s for s in ours.values() if "gpu" in s.get("profiles", [])]
    assert gpu and gpu[0]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    example = (ROOT / ".env.example").read_text()
    defined = set(re.findall(r"^([A-Z_]+)=", example, flags=re.M))
    raw = (ROOT / "compose.yaml").read_text()
    required = set(re.findall(r"\$\{([A-Z_]+)(?::\?[^}]*)?\}", raw))
    assert required <= defined, f".env.example lacks {required - defined}"

    for name, service in services.items():
        env = service.get("environment", {})
        for var in env:
            if var.startswith("STREAMLEARN_"):
                assert var in settings_vars, f"{name}: {var} is read by nothing"
        cmd = service.get("command") or []
        if "--config" in cmd:
            path = cmd[cmd.index("--config") + 1]
            assert any(
                str(v).split(":")[1] == path
                for v in service.get("volumes", [])
                if isinstance(v, str)
            ), f"{name}: {path} is not mounted"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if source.startswith("./"):
                path = ROOT / source
                maker = GENERATED.get(path.name)
                assert path.exists() or maker, f"{name}: mounts missing {source}"
                if maker:
                    assert (path.parent / maker).exists()
    assert (ROOT / "deploy/Dockerfile").exists()
    # the broker image carries the guard plugin its config loads
    broker = services["mosquitto"]
    dockerfile = (ROOT / broker["build"]["context"] / "Dockerfile").read_text()
    conf = (ROOT / "deploy/mosquitto/mosquitto.conf").read_text()
    plugin = re.search(r"^plugin (\S+)$", conf, flags=re.M)
    assert plugin and plugin.group(1) in dockerfile
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    assert ".env\n" not in tracked and "users.acl\n" not in tracked and "passwd\n" not in tracked
    secrets = [".env", "deploy/mosquitto/devices", "deploy/mosquitto/passwd"]
    secrets += ["deploy/mosquitto/certs/server.key", "deploy/mosquitto/ca/ca.key"]
    ignored = subprocess.run(
        ["git", "check-ignore", *secrets], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert ignored == secrets, "secrets and generated files are git-ignored"


def test_only_tls_with_bound_client_ids_is_published():
    """Devices reach the broker over TLS only, where the client id is the username; plain
    MQTT is for the compose network (or the host's loopback)."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    published = {}
    for mapping in compose["services"]["mosquitto"]["ports"]:
        host, container = mapping.rsplit(":", 1)
        published[container] = host.split(":")[0]
    assert "8883" in published
    assert published.get("1883", "127.0.0.1") == "127.0.0.1"
    conf = (ROOT / "deploy/mosquitto/mosquitto.conf").read_text()
    listeners = {
        block.split()[0]: set(re.findall(r"^(\w+) (\S+)", block, flags=re.M))
        for block in re.split(r"^listener ", conf, flags=re.M)[1:]
    }
    assert set(listeners) == {"1883", "8883"}
    tls = {option for option, _ in listeners["8883"]}
    assert {"certfile", "keyfile"} <= tls
    assert ("use_username_as_clientid", "true") in listeners["8883"]
