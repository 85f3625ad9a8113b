"""The files under deploy/ and compose.yaml, checked with the real servers they configure.

No Docker engine runs here, so each part is tested for real on its own: the broker config,
password file and ACL on a real mosquitto; the Redis ACL on a real redis-server; the
whole stack of worker processes under those least-privilege users; TLS; and compose.yaml
for consistency with the code.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import numpy as np
import paho.mqtt.client as paho
import pytest
import redis as redis_lib
import yaml

from streamlearn import embedded, mqtt
from streamlearn.config import Settings
from streamlearn.errors import StreamlearnError
from streamlearn.names import Names
from streamlearn.payloads import Samples
from streamlearn.queue import SampleQueue
from streamlearn.weights import WeightsStore
from tests.conftest import ROOT, Client, eventually
from tests.deployed import REDIS_PW, mqtt_url, redis_as

# -- mosquitto -----------------------------------------------------------------------------


def test_anonymous_and_wrong_password_are_refused(broker):
    with pytest.raises(StreamlearnError, match="refused"):
        mqtt.connect(f"mqtt://127.0.0.1:{broker.port}", timeout_s=5)
    with pytest.raises(StreamlearnError, match="refused"):
        mqtt.connect(mqtt_url(broker, "device", "not-the-password"), timeout_s=5)


class Listener:
    """Collects what one client receives."""

    def __init__(self, url: str, topics: list[str], client_id: str | None = None) -> None:
        self.got: list[paho.MQTTMessage] = []
        self.client = mqtt.connect(
            url,
            client_id,
            subscriptions=[(t, 1) for t in topics],
            on_message=lambda _c, _u, m: self.got.append(m),
        )

    def topics(self) -> list[str]:
        return [m.topic for m in self.got]


def test_device_rights_are_limited_to_its_own_traffic(broker):
    names = Names("m")
    learner = Listener(mqtt_url(broker, "learner"), [names.status_topic])
    actor = Listener(mqtt_url(broker, "actor"), [names.predict_topic])
    ingest = Listener(mqtt_url(broker, "ingest"), [names.shared("samples", "g")])
    alice = Listener(
        mqtt_url(broker, "device"),
        [names.topic("replies/#"), names.predictions_topic, names.samples_topic],
        "alice",
    )
    bob = Listener(mqtt_url(broker, "device"), [names.topic("replies/bob/#")], "bob")

    device = alice.client
    results = {
        topic: device.publish(topic, b"{}", qos=1)
        for topic in (
            names.samples_topic,
            names.predict_topic,
            names.status_topic,
            names.predictions_topic,
            names.topic("replies/bob/1"),
        )
    }
    for info in results.values():
        info.wait_for_publish(5)
    # Actors answer on a device's own reply topic; the status comes only from the learner.
    actor.client.publish(names.topic("replies/bob/1"), b'{"y": 1}', qos=1).wait_for_publish(5)
    learner.client.publish(names.status_topic, b'{"version": 1}', qos=1).wait_for_publish(5)
    time.sleep(1.0)

    assert ingest.topics() == [names.samples_topic], "samples reach ingest"
    assert actor.topics() == [names.predict_topic], "requests reach actors"
    assert (
        learner.topics() == [names.status_topic] and learner.got[0].payload == b'{"version": 1}'
    ), "a device cannot publish status"
    assert bob.topics() == [names.topic("replies/bob/1")] and bob.got[0].payload == b'{"y": 1}', (
        "a device cannot publish replies to another device"
    )
    assert alice.topics() == [], "a device reads neither others' replies, predictions nor samples"
    for listener in (learner, actor, ingest, alice, bob):
        mqtt.close(listener.client)


# -- redis ---------------------------------------------------------------------------------


def test_redis_roles_can_do_their_job_and_nothing_else(acl_redis):
    names = Names("m")
    ingest, learner, actor = (redis_as(acl_redis, r) for r in ("ingest", "learner", "actor"))

    # Each role's real code path works under its user.
    SampleQueue(learner, names, (2,)).ensure_group()
    SampleQueue(ingest, names, (2,)).write(
        [Samples(np.ones((3, 2), np.float32), np.ones(3, np.float32))]
    )
    consumer = SampleQueue(learner, names, (2,))
    entries = consumer.read("l", 10, None)
    assert len(entries) == 1 and len(entries[0].samples) == 3
    consumer.ack([e.id for e in entries])
    consumer.trim()
    WeightsStore(learner, names).publish(1, b"blob")
    assert WeightsStore(actor, names).fetch() == (1, b"blob")

    denied = [
        (ingest, ["SET", names.weights_key(2), "x"]),
        (ingest, ["XREADGROUP", "GROUP", "learners", "x", "STREAMS", names.samples_key, ">"]),
        (ingest, ["GET", names.latest_key]),
        (actor, ["XADD", names.samples_key, "*", "n", "1"]),
        (actor, ["SET", names.latest_key, "99"]),
        (actor, ["PUBLISH", names.weights_channel, "99"]),
        (learner, ["SET", "other", "x"]),
        (learner, ["XGROUP", "DESTROY", names.samples_key, "learners"]),
    ]
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


# -- the whole stack under least privilege ---------------------------------------------------


def test_stack_runs_with_least_privilege_users(broker, acl_redis, tmp_path):
    """ingest, learner and actor processes with their own MQTT and Redis users; a device
    publishes samples and gets a prediction on its own reply topic."""
    from tests.conftest import RoleProcess, role_env

    toml = tmp_path / "streamlearn.toml"
    toml.write_text('[models.s]\ninputs = 2\ntask = "regression"\n')
    procs = []
    try:
        for role in ("learner", "ingest", "actor"):
            settings = Settings(
                mqtt_url=mqtt_url(broker, role),
                redis_url=f"redis://{role}:{REDIS_PW[role]}@127.0.0.1:{acl_redis.port}/0",
            )
            proc = RoleProcess(
                [sys.executable, "-m", f"workers.{role}", "--config", str(toml)],
                role_env(settings),
            )
            procs.append(proc)
        for proc in procs:
            proc.wait_for(" ready", 90)
        device = Settings(mqtt_url=mqtt_url(broker, "device"))
        client = Client(device, "s", client_id="dev-1")
        client.publish_samples([{"x": [0.1 * i, 1.0], "y": 0.5} for i in range(50)])
        store = redis_as(acl_redis, "actor")
        eventually(lambda: int(store.get(Names("s").latest_key) or 0) > 0, 60, "a version")
        reply = client.request({"x": [0.2, 1.0]}, timeout_s=15)
        client.close()
        assert reply.get("version", 0) > 0, (reply, [p.output[-2000:] for p in procs])
    finally:
        for proc in procs:
            proc.stop()
    refusals = [line for p in procs for line in p.lines if "NOPERM" in line or "authori" in line]
    assert not refusals


# -- TLS -------------------------------------------------------------------------------------


def test_tls_listener_refuses_plaintext_and_accepts_the_ca(public_dir):
    tmp_path = public_dir
    ca_key, ca_crt, key, csr, crt = (
        tmp_path / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt")
    )
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=tmp_path)  # noqa: E731
    run(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=streamlearn-test-ca",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
    )
    run(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    (tmp_path / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run(
        "openssl",
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        str(tmp_path / "san.ext"),
        "-out",
        str(crt),
    )
    key.chmod(0o644)  # read by mosquitto after it drops root
    port = embedded.free_port()
    (tmp_path / "tls.conf").write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\ncafile {ca_crt}\n"
        f"certfile {crt}\nkeyfile {key}\ntls_version tlsv1.2\n"
    )
    with embedded.ServerProcess(
        "mosquitto", ["mosquitto", "-c", str(tmp_path / "tls.conf")], port, tmp_path
    ):
        with pytest.raises(StreamlearnError):
            mqtt.connect(f"mqtt://localhost:{port}", timeout_s=3)
        with pytest.raises(StreamlearnError):  # TLS, but a server the client cannot verify
            mqtt.connect(f"mqtts://localhost:{port}", timeout_s=3)
        got = threading.Event()
        client = mqtt.connect(
            f"mqtts://localhost:{port}",
            ca_file=str(ca_crt),
            subscriptions=[("t/tls", 1)],
            on_message=lambda *_: got.set(),
        )
        client.publish("t/tls", b"over tls", qos=1).wait_for_publish(5)
        assert got.wait(5), "a message round trip over the TLS listener"
        mqtt.close(client)


# -- compose.yaml ----------------------------------------------------------------------------


def test_compose_file_is_consistent_with_the_code():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    settings_vars = {f"STREAMLEARN_{name.upper()}" for name in Settings.model_fields}
    roles = {"ingest", "learner", "actor"}
    ours = {n: s for n, s in services.items() if s.get("image", "").startswith("streamlearn")}
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
                generated = path.name in ("passwd", "users.acl")
                assert path.exists() or generated, f"{name}: mounts missing {source}"
                if generated:
                    maker = "make-passwd.sh" if path.name == "passwd" else "make-acl.sh"
                    assert (path.parent / maker).exists()
    assert (ROOT / "deploy/Dockerfile").exists()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    assert ".env\n" not in tracked and "users.acl\n" not in tracked and "passwd\n" not in tracked
