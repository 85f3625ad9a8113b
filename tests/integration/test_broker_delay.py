"""The actor measures how long its broker holds the reply to a QoS 1 request: a mosquitto
at its defaults (Nagle's algorithm on) is flagged, with the fix named; a tuned one
(`set_tcp_nodelay true`, as the embedded and deployed brokers are) is not."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from streamlearn import mqtt
from streamlearn.config.settings import Settings
from streamlearn.contract.names import Names
from streamlearn.observe.broker_delay import SLOW_MS
from streamlearn.stack import embedded
from tests.conftest import RoleProcess, eventually, launch_role, own_settings

TOML = """
[models.a]
inputs = 2
task = "binary"
[models.a.actor]
status_every_ms = 200
"""

pytestmark = pytest.mark.serial  # ~40 ms against ~1 ms: a loaded machine narrows the gap


@pytest.fixture(scope="module")
def default_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.ServerProcess]:
    """A mosquitto without `set_tcp_nodelay`: its default, as many users run it."""
    workdir = tmp_path_factory.mktemp("nagle")
    port = embedded.free_port()
    conf = embedded.MOSQUITTO_CONF.format(port=port, workdir=workdir, persistence="false")
    (workdir / "mosquitto.conf").write_text(conf.replace("set_tcp_nodelay true\n", ""))
    argv = ["mosquitto", "-c", str(workdir / "mosquitto.conf")]
    with embedded.ServerProcess("mosquitto", argv, port, workdir) as server:
        yield server


@pytest.fixture
def actor_on(tmp_path: Path) -> Iterator[Callable[[Settings], tuple[RoleProcess, Callable]]]:
    """actor_on(settings) -> (a ready actor of model `a`, its latest retained status)."""
    started: list[RoleProcess] = []
    watchers: list[paho.Client] = []

    def start(settings: Settings) -> tuple[RoleProcess, Callable[[], dict]]:
        config = tmp_path / f"{settings.topic_prefix}.toml"
        config.write_text(TOML)
        proc = launch_role(settings, "actor", config)
        started.append(proc)
        proc.wait_for(" ready")
        latest: dict = {}

        def on_message(_c: object, _u: object, msg: paho.MQTTMessage) -> None:
            if msg.payload:
                latest.update(json.loads(msg.payload))

        names = Names("a", settings.topic_prefix, settings.key_prefix)
        topics = [(names.topic("actors/+"), 0)]
        watchers.append(mqtt.connect(settings.mqtt, subscriptions=topics, on_message=on_message))
        return proc, lambda: dict(latest)

    yield start
    for proc in started:
        proc.stop()
    for client in watchers:
        mqtt.close(client)


def test_the_actor_flags_a_broker_at_its_defaults_and_not_a_tuned_one(
    redis_server, mosquitto_server, default_broker, actor_on
):
    on_nagle, nagle_status = actor_on(own_settings(redis_server, default_broker))
    on_tuned, tuned_status = actor_on(own_settings(redis_server, mosquitto_server))

    slow = eventually(lambda: nagle_status().get("broker_delay_ms"), 10, "the default's delay")
    fast = eventually(lambda: tuned_status().get("broker_delay_ms"), 10, "the tuned one's delay")
    assert slow > SLOW_MS > fast, (slow, fast)

    on_nagle.wait_for("set_tcp_nodelay true", timeout_s=5)  # the warning names the fix
    on_tuned.wait_for("broker delay", timeout_s=5)
    warned = [line for line in on_tuned.lines if "set_tcp_nodelay" in line]
    assert warned == [], "the tuned broker is not flagged"
