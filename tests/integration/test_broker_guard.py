"""The deployed broker keeps devices out of the roles' shared subscriptions and refuses
their retained messages (deploy/mosquitto/guard), for real: mosquitto with the deployed
mosquitto.conf and acl, the password file and certificates from the project's scripts, and
the guard plugin compiled from its source; ingest and actor processes logged in as their
roles, and device accounts over TLS.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import sys
import threading
import time
import uuid

import paho.mqtt.client as paho

from streamlearn import mqtt_packets
from streamlearn.config import Settings
from streamlearn.contract.names import Names
from tests.conftest import RoleProcess, eventually, role_env
from tests.deployed import MQTT_PW, REDIS_PW, deployed_broker, mqtt_url, redis_as
from tests.integration.test_deploy import NOT_AUTHORIZED, Peer, device

NAMES = Names("s")
SHARES = [
    NAMES.shared("samples", "streamlearn"),
    NAMES.shared("samples/+", "streamlearn"),
    NAMES.shared("predict", "streamlearn"),
    NAMES.shared("predict/+", "streamlearn"),
    NAMES.shared("labels", "streamlearn"),
    NAMES.shared("labels/+", "streamlearn"),
]


def subscribe_codes(peer: Peer, topics: list[str]) -> list[int]:
    """SUBSCRIBE `topics` (QoS 1); the broker's SUBACK reason code for each."""
    done = threading.Event()
    codes: list[int] = []

    def on_subscribe(_c: object, _u: object, _mid: int, reasons: list, _p: object) -> None:
        codes.extend(r.value for r in reasons)
        done.set()

    peer.client.on_subscribe = on_subscribe
    peer.client.subscribe([(t, 1) for t in topics])
    assert done.wait(10), "no SUBACK"
    return codes


def test_a_device_in_the_roles_share_groups_gets_nothing_and_costs_nobody_a_message(
    broker, acl_redis, tmp_path
):
    """Mosquitto's acl_file alone lets a device join the ingest and actor share groups; the
    broker then hands it half the samples and requests and drops them (50 of 100 reached
    ingest). With the guard, its subscriptions are refused and all 100 of each arrive."""
    toml = tmp_path / "streamlearn.toml"
    toml.write_text(  # one padded size, one trace before ready: batch sizes are not this test's
        '[models.s]\ninputs = 2\ntask = "regression"\n[models.s.learner]\nbuckets = [256]\n'
    )
    procs: list[RoleProcess] = []
    thief = device(broker, "alice", client_id="alice")
    sensor = device(broker, "dev-1", [NAMES.topic("replies/dev-1/#")], client_id="dev-1")
    try:
        assert subscribe_codes(thief, SHARES) == [NOT_AUTHORIZED] * len(SHARES)

        def start(*roles: str) -> None:
            started = []
            for role in roles:
                settings = Settings(
                    mqtt_url=mqtt_url(broker, role),
                    redis_url=f"redis://{role}:{REDIS_PW[role]}@127.0.0.1:{acl_redis.port}/0",
                )
                argv = [sys.executable, "-m", f"streamlearn.{role}.worker", "--config", str(toml)]
                started.append(RoleProcess(argv, role_env(settings)))
            procs.extend(started)
            for proc in started:
                proc.wait_for(" ready", 90)

        start("ingest")
        for i in range(100):
            sample = {"x": [0.01 * i, 1.0], "y": 0.5, "id": f"g-{i}"}
            assert sensor.publish(NAMES.topic("samples/dev-1"), json.dumps(sample).encode()) == 0
        appended = lambda: int(redis_as(acl_redis, "ingest").get(NAMES.ingest_count_key) or 0)  # noqa: E731
        eventually(lambda: appended() >= 100, 30, "100 samples appended")
        time.sleep(0.5)
        assert appended() == 100
        start("learner", "actor")
        store = redis_as(acl_redis, "learner")
        eventually(lambda: int(store.get(NAMES.latest_key) or 0) > 0, 60, "a version")

        asked = {}
        for i in range(100):
            correlation = uuid.uuid4().bytes
            asked[correlation] = i
            sensor.client.publish(
                NAMES.topic("predict/dev-1"),
                json.dumps({"x": [0.01 * i, 1.0]}),
                qos=1,
                properties=mqtt_packets.request_properties(
                    NAMES.topic("replies/dev-1/g"), correlation
                ),
            )
        answered = lambda: {m.properties.CorrelationData for m in sensor.got}  # noqa: E731
        eventually(lambda: len(answered()) >= 100, 30, "100 replies")
        assert answered() == set(asked)
        assert all("version" in json.loads(m.payload) for m in sensor.got)
        assert thief.got == []
    finally:
        thief.close()
        sensor.close()
        for proc in procs:
            proc.stop()


def test_retained_messages_from_a_device_are_refused_and_not_kept(broker):
    """A device cannot park retained payloads on the broker, by PUBLISH or by its will;
    the roles still keep their retained status."""
    mallory = device(broker, "bob", client_id="bob")
    try:
        big = b"x" * 1_500_000
        for n in (1, 2, 3):
            junk = f"streamlearn/junk{n}/samples/bob"  # a topic the ACL lets bob write
            info = mallory.client.publish(junk, big, qos=1, retain=True)
            info.wait_for_publish(10)
        eventually(lambda: len(mallory.acks) == 3, 10, "three PUBACKs")
        assert set(mallory.acks.values()) == {NOT_AUTHORIZED}
    finally:
        mallory.close()
    # Wills, sent when a device vanishes without DISCONNECT: one with the retain flag is
    # refused, one without is delivered (so the broker did send wills).
    live = Peer(mqtt_url(broker, "ingest"), ["streamlearn/+/samples/+"])
    try:
        vanish(broker, "dev-1", "streamlearn/junk4/samples/dev-1", retain=True)
        vanish(broker, "alice", "streamlearn/junk5/samples/alice", retain=False)
        live.wait_for("streamlearn/junk5/samples/alice")
        assert live.topics() == ["streamlearn/junk5/samples/alice"]
    finally:
        live.close()

    # The learner's retained status still works, and a fresh reader of every samples topic
    # finds nothing retained.
    learner = Peer(mqtt_url(broker, "learner"))
    assert learner.client.publish(NAMES.topic("status"), b"{}", qos=1, retain=True).rc == 0
    status = Peer(mqtt_url(broker, "learner"), [NAMES.topic("status")])
    reader = Peer(mqtt_url(broker, "ingest"), ["streamlearn/+/samples/#"])
    try:
        status.wait_for(NAMES.topic("status"))
        time.sleep(1.0)  # retained messages arrive right after the SUBACK
        assert reader.got == []
    finally:
        for peer in (learner, reader, status):
            peer.close()


def vanish(broker, name: str, will_topic: str, retain: bool) -> None:
    """Connect device `name` with a will on `will_topic`, then drop its connection without a
    DISCONNECT, so that the broker sends the will."""
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, name, protocol=paho.MQTTv5)
    client.username_pw_set(name, MQTT_PW[name])
    client.tls_set(str(broker.ca_file))
    client.will_set(will_topic, b"y" * 60_000, qos=1, retain=retain)
    client.connect("localhost", broker.tls_port)
    deadline = time.monotonic() + 10
    while not client.is_connected() and time.monotonic() < deadline:
        client.loop(0.1)
    assert client.is_connected(), f"{name} did not connect"
    sock = client.socket()
    assert isinstance(sock, (socket.socket, ssl.SSLSocket))
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def test_a_flood_of_refused_shared_subscriptions_writes_a_bounded_log():
    """Each refused `$share` filter was one log line (6.8 bytes of log per byte of
    SUBSCRIBE: about 45 packets rotated out compose's 100 MB log). Now at most a line a
    second, each saying how many were not logged since the one before. A broker of its own:
    its log (stdout to a file) is read whole once it has stopped."""
    with deployed_broker() as broker:
        thief = device(broker, "alice", client_id="alice")
        acked = threading.Semaphore(0)
        thief.client.on_subscribe = lambda *_args: acked.release()
        started = time.monotonic()
        try:
            sent = 0
            for n in range(100):  # 2,000 filters, about 1 MB of SUBSCRIBE
                filters = [(f"$share/g{n}-{i}/{'x' * 480}/samples", 1) for i in range(20)]
                sent += sum(len(f) for f, _ in filters)
                thief.client.subscribe(filters)
            for _ in range(100):
                assert acked.acquire(timeout=30), "a SUBACK missing"
            flood_s = time.monotonic() - started
            time.sleep(1.1)  # the next refusal is logged, with the count of those that were not
            assert subscribe_codes(thief, [NAMES.shared("samples", "late")]) == [NOT_AUTHORIZED]
        finally:
            thief.close()
        broker.server.stop()
        logged = broker.log
    refusals = [line for line in logged.splitlines() if "refused shared subscription" in line]
    assert 2 <= len(refusals) <= flood_s + 3, refusals
    assert "$share/late/" in refusals[-1]
    suppressed = [int(re.search(r"(\d+) suppressed", line).group(1)) for line in refusals]
    assert len(refusals) + sum(suppressed) == 2001  # every refusal logged or counted
    assert len(logged) < sent / 100, f"{len(logged)} bytes of log for {sent} of filters"
