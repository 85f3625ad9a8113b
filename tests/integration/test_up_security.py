"""`streamlearn up` keeps out whoever does not belong: its broker and its Redis ask for
passwords made for this run, which only its run file (0600) and its children's environment
hold; every port it opens is on loopback; its own tools still find and use it.

With `--data-dir` it keeps what it acknowledged: its Redis appends to an AOF fsynced every
second, its broker saves sessions and queues every second, so samples acknowledged before a
hard stop are learned after a restart with the same data dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import paho.mqtt.client as paho
import pytest
import redis as redis_lib

import streamlearn
from streamlearn.config import DEMO_TOML, runfile
from streamlearn.contract.names import Names
from streamlearn.stack import embedded
from tests.conftest import RoleProcess, eventually, published
from tests.integration.test_up import (
    LIVE,
    listening_sockets,
    process_tree,
    recorded,
    run_dir_of,
    start_up,
    stop,
    user_env,
)

LOOPBACK = {"127.0.0.1", "::1"}
# The demo model with one padded batch size: one trace before its learner is ready (the
# default traces three); batch sizes are not what these tests check.
ONE_BUCKET = "\n[models.demo.learner]\nbuckets = [256]\n"


def connack(port: int, credentials: tuple[str, str] | None = None) -> str:
    """The reason in the broker's CONNACK to a plain paho client."""
    got: list[str] = []
    done = threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    if credentials:
        client.username_pw_set(*credentials)

    def on_connect(_c: object, _u: object, _f: object, reason: object, _p: object) -> None:
        got.append(str(reason))
        done.set()

    client.on_connect = on_connect
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        assert done.wait(10), "no CONNACK"
    finally:
        client.loop_stop()
        client.disconnect()
    return got[0]


def redis_says(port: int, *command: str) -> bytes:
    """Redis's raw reply to `command`, sent by someone who knows only the port."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        args = "".join(f"${len(a)}\r\n{a}\r\n" for a in command)
        sock.sendall(f"*{len(command)}\r\n{args}".encode())
        return sock.recv(4096)


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A `streamlearn` command in another shell of the user's (no URLs exported)."""
    argv = [sys.executable, "-m", "streamlearn", *args]
    env = user_env(tmp_path)
    return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def dashboard_version(url: str) -> int:
    """The newest version the dashboard at `url` (as `up` printed it) shows for the demo
    model, read as its page does: the printed address, then the cookie it sets."""
    jar = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    assert b"streamlearn" in jar.open(url, timeout=5).read()
    doc = json.loads(jar.open(url.split("?")[0] + "api/series", timeout=5).read())
    return max((point.get("version") or 0 for point in doc["models"]["demo"]), default=0)


def status_of(url: str, token: str | None = None) -> int:
    """The HTTP status of a GET of `url`, with `token` as a bearer token."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def test_up_refuses_strangers_and_lets_its_own_tools_in(tmp_path: Path, monkeypatch):
    door = embedded.free_port()
    config = tmp_path / "streamlearn.toml"
    config.write_text(DEMO_TOML + ONE_BUCKET + f"\n[models.demo.actor]\nhttp_port = {door}\n")
    up = start_up(tmp_path, "--config", str(config), "--metrics-port", "0", "--dashboard-port", "0")
    try:
        run_dir = run_dir_of(up)
        up.wait_for("Ctrl-C stops everything", 90)
        path = tmp_path / "stack.json"
        assert path.stat().st_mode & 0o777 == 0o600
        settings = recorded(tmp_path)
        mqtt_url, redis_url = urlsplit(settings.mqtt), urlsplit(settings.redis)
        passwords = [mqtt_url.password, redis_url.password]
        assert all(s and len(s) >= 32 for s in passwords), "a password of its own for each"

        # a stranger who knows the ports gets nothing
        assert connack(port_of(settings.mqtt)) == "Not authorized"
        assert connack(port_of(settings.mqtt), (mqtt_url.username, "guess")) == "Not authorized"
        assert redis_says(port_of(settings.redis), "FLUSHALL").startswith(b"-NOAUTH")
        assert redis_says(port_of(settings.redis), "XRANGE", "x", "-", "+").startswith(b"-NOAUTH")

        # ... and sees no password in `ps` or on up's terminal
        tree = process_tree(up.proc.pid)
        for pid in tree:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            assert not [s for s in passwords if s in cmdline], cmdline
        assert not [s for s in passwords if s in up.output], up.output

        # its own tools find the stack through the run file and get in
        actor_log = run_dir / "actor-demo-0.log"
        eventually(lambda: "actor for demo ready" in actor_log.read_text(), 90, "actor ready")
        # the run directory and every log in it (workers', servers') are up's user's only
        assert run_dir.stat().st_mode & 0o777 == 0o700
        logs = list(run_dir.rglob("*.log"))
        assert actor_log in logs and {p.stat().st_mode & 0o777 for p in logs} == {0o600}, logs
        store = redis_lib.Redis.from_url(settings.redis)
        eventually(lambda: int(store.get(Names("demo").latest_key) or 0) > 0, 90, "a version")
        store.close()
        status = cli(tmp_path, "status")
        assert status.returncode == 0, status.stderr
        assert "demo" in status.stdout and "using the stack of streamlearn up" in status.stderr
        assert not [s for s in passwords if s in status.stdout + status.stderr]
        x = json.dumps([0.5] * 9)
        predict = cli(tmp_path, "predict", "--model", "demo", "--timeout", "30", x)
        assert predict.returncode == 0, predict.stdout + predict.stderr
        assert json.loads(predict.stdout)["version"] > 0
        for key, value in user_env(tmp_path).items():
            if key.startswith("STREAMLEARN_"):
                monkeypatch.setenv(key, value)
        for key in ("STREAMLEARN_MQTT_URL", "STREAMLEARN_REDIS_URL"):
            monkeypatch.delenv(key, raising=False)
        with streamlearn.Client() as client:
            assert client.predict("demo", [0.5] * 9, timeout=30).version > 0
        # the dashboard and the live line read the stack with the same passwords
        dashboard = re.search(r"dashboard (http://\S+)", up.output)
        assert dashboard, up.output
        eventually(lambda: dashboard_version(dashboard[1]) > 0, 60, "the dashboard's data")
        eventually(lambda: any(LIVE.search(line) for line in up.lines), 30, "the live line")
        # the demo feed has an account of its own: the user's clients took over no connection
        broker_log = (run_dir / "mosquitto" / "mosquitto.log").read_text()
        assert "already connected" not in broker_log, broker_log[-3000:]

        # every port up opened, its children's included, is on loopback only
        line = next(line for line in up.lines if "metrics ports" in line)
        metrics = [int(port) for port in re.findall(r"=(\d+)", line)]

        def opened() -> list[tuple[str, int, int]]:
            return listening_sockets(process_tree(up.proc.pid))

        eventually(lambda: set(metrics) <= {port for _, port, _ in opened()}, 60, "/metrics")
        sockets = opened()
        ports = {port for _, port, _ in sockets}
        ours = {port_of(settings.mqtt), port_of(settings.redis), port_of(dashboard[1]), *metrics}
        assert ours <= ports, sockets
        assert [s for s in sockets if s[0] not in LOOPBACK] == [], "listens beyond loopback"

        # its HTTP surfaces ask for the run's token, which only the run file holds (issue
        # 62, finding 7: before, any local user read the dashboard, /metrics and the door)
        record = runfile.live(path)
        assert record is not None and record.token and len(record.token) >= 32
        assert record.token not in up.output.replace(dashboard[1], ""), "printed only there"
        page = dashboard[1].split("?")[0]
        infer = f"http://127.0.0.1:{door}/v2/models/demo"
        eventually(lambda: status_of(f"http://127.0.0.1:{door}/v2/health/ready") == 200, 60, "door")
        for url in (page, page + "api/series", f"http://127.0.0.1:{metrics[0]}/metrics", infer):
            assert status_of(url) == 401, url
            assert status_of(url, "guess" * 8) == 401, url
            assert status_of(url, record.token) == 200, url
        assert status_of(f"http://127.0.0.1:{metrics[0]}/livez") == 200, "probes stay open"
    finally:
        code, _ = stop(up)
    assert code == 0, up.output[-3000:]


# The first run's learner publishes nothing it learns (and so acknowledges nothing): the
# samples are acknowledged by ingest, stored in Redis, and not yet learned when `up` dies.
HOLDING_LEARNER = (
    DEMO_TOML
    + ONE_BUCKET
    + """publish.every_steps = 1000000
publish.every_ms = 3600000
publish.min_ms = 3600000
"""
)


def test_up_with_a_data_dir_learns_after_a_hard_stop_what_it_acknowledged(tmp_path: Path):
    data, count, names = tmp_path / "data", 400, Names("demo")
    config = tmp_path / "holding.toml"
    config.write_text(HOLDING_LEARNER)
    flags = ("--data-dir", str(data), "--no-dashboard", "--config", str(config))
    up = start_up(tmp_path, *flags, demo=False)
    try:
        run_dir = run_dir_of(up)
        up.wait_for("Ctrl-C stops everything", 90)
        settings = recorded(tmp_path)
        store = redis_lib.Redis.from_url(settings.redis)
        assert store.config_get("appendonly") == {"appendonly": "yes"}
        assert store.config_get("appendfsync") == {"appendfsync": "everysec"}
        learner_log = run_dir / "learner-demo-0.log"
        eventually(lambda: "learner for demo ready" in learner_log.read_text(), 90, "learner")
        with streamlearn.Client(settings.mqtt) as client:  # returns once the broker PUBACKs
            xs = [[float(i % 7) / 7] * 9 for i in range(count)]
            client.publish_many("demo", xs, [float(i % 2) for i in range(count)])
        stored = names.ingest_count_key
        eventually(lambda: int(store.get(stored) or 0) >= count, 60, "the samples stored")
        assert int(published(store, names)[1].get("samples_seen", 0)) == 0, "none learned yet"
        store.close()
        # Redis fsyncs its AOF every second, the broker saves every second: what they held
        # more than a second ago is on disk.
        time.sleep(2.5)
        assert (data / "mosquitto" / "mosquitto.db").exists(), "the broker saved while running"
        hard_stop(up)
    finally:
        up.stop(kill=True)

    publishing = tmp_path / "publishing.toml"  # the same model, publishing what it learns
    publishing.write_text(DEMO_TOML + ONE_BUCKET)
    flags = ("--data-dir", str(data), "--no-dashboard", "--config", str(publishing))
    up = start_up(tmp_path, *flags, demo=False)
    try:
        up.wait_for("Ctrl-C stops everything", 90)
        store = redis_lib.Redis.from_url(recorded(tmp_path).redis)
        eventually(
            lambda: int(published(store, names)[1].get("samples_seen", 0)) >= count,
            120,
            f"the learner's published weights count all {count} samples",
        )
        store.close()
    finally:
        code, _ = stop(up)
    assert code == 0, up.output[-3000:]


def hard_stop(up: RoleProcess) -> None:
    """SIGKILL every process of up's tree at once, the servers first: a power cut, in
    which nothing gets to save or flush (a SIGTERM from a dying parent would let them)."""
    servers = {"mosquitto\n", "redis-server\n"}

    def not_a_server(pid: int) -> bool:
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/comm").read_text() not in servers
        return True

    for pid in sorted(process_tree(up.proc.pid), key=not_a_server):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_broker_persistence_keeps_a_queued_message_through_a_sigkill(tmp_path: Path):
    """A QoS 1 message queued for an offline persistent session, saved by the autosave,
    is delivered after the broker is killed and restarted on the same directory."""
    user, password, port = "streamlearn", "pw-" + os.urandom(8).hex(), embedded.free_port()

    def broker() -> embedded.ServerProcess:
        accounts = {user: password}
        return embedded.mosquitto(port, tmp_path, persistence=True, autosave_s=1, accounts=accounts)

    def session(received: list[bytes]) -> paho.Client:
        """The persistent session "keeper", subscribed to kept/# (SUBACK awaited)."""
        client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, "keeper", clean_session=False, protocol=paho.MQTTv311
        )
        client.username_pw_set(user, password)
        subscribed = threading.Event()
        client.on_connect = lambda c, *_: c.subscribe("kept/#", qos=1)
        client.on_subscribe = lambda *_: subscribed.set()
        client.on_message = lambda _c, _u, msg: received.append(msg.payload)
        client.connect("127.0.0.1", port)
        client.loop_start()
        assert subscribed.wait(10), "no SUBACK"
        return client

    server = broker().start()
    try:
        keeper = session([])
        keeper.loop_stop()
        keeper.disconnect()
        sender = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
        sender.username_pw_set(user, password)
        sender.connect("127.0.0.1", port)
        sender.loop_start()
        sender.publish("kept/1", b"queued", qos=1).wait_for_publish(10)
        sender.loop_stop()
        sender.disconnect()
        time.sleep(2.5)  # past the 1 s autosave
        server.kill()
        server = broker().start()
        received: list[bytes] = []
        keeper = session(received)
        eventually(lambda: received == [b"queued"], 10, "the queued message")
        keeper.loop_stop()
        keeper.disconnect()
    finally:
        server.stop()


@pytest.mark.parametrize("wrong", [None, ("streamlearn", "guess")])
def test_a_broker_with_a_password_refuses_others(tmp_path: Path, wrong):
    with embedded.mosquitto(workdir=tmp_path, accounts={"streamlearn": "s3"}) as broker:
        assert connack(broker.port, wrong) == "Not authorized"
        assert connack(broker.port, ("streamlearn", "s3")) == "Success"


def test_servers_keep_their_passwords_in_their_owners_files(tmp_path: Path):
    mqtt_pw, redis_pw = "mqtt-" + os.urandom(16).hex(), "redis-" + os.urandom(16).hex()
    broker = embedded.mosquitto(workdir=tmp_path / "mqtt", accounts={"streamlearn": mqtt_pw})
    store = embedded.redis_server(None, tmp_path / "redis", password=redis_pw)
    for server, secret in ((broker, "passwd"), (store, "auth.conf")):
        assert server.workdir.stat().st_mode & 0o777 == 0o700
        assert (server.workdir / secret).stat().st_mode & 0o777 == 0o600
        assert not [arg for arg in server.argv if mqtt_pw in arg or redis_pw in arg]
    assert mqtt_pw not in (tmp_path / "mqtt" / "passwd").read_text(), "a hash, not the password"
