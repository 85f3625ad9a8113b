"""Pin and unpin (rollback): actors serve a pinned version while the learner goes on
publishing, the trim keeps it, and unpinning returns them to the latest.

The end-to-end test runs a real learner and real actors; a thread writes samples to the
stream as ingest would, so that the learner keeps publishing throughout.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamlearn import mqtt
from streamlearn.cli import main as cli
from streamlearn.config import load_config
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.errors import WeightsError
from streamlearn.online import codec
from streamlearn.stack.dashboard import Dashboard
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually, launch_role
from tests.integration.test_dashboard import chromium

KEEP = 2
TOML = f"""
[models.p]
inputs = 3
task = "regression"
hidden = [8]

[models.p.learner]
max_batch = 32
buckets = [32]  # one padded size: one trace before ready (batch sizes are not this test's)
max_wait_ms = 5
publish.every_ms = 100
history.newest = {KEEP}
history.versions = 2
history.every_s = 1

[models.p.actor]
reload_check_ms = 50
status_every_ms = 200
"""


def blob(v: int) -> bytes:
    return codec.encode({"w": np.full((2,), v, np.float32)}, {"version": str(v)})


def run_cli(settings, monkeypatch, config: Path, *argv: str) -> int:
    """`streamlearn ARGV --config CONFIG` in this process, with the test's servers."""
    for name, value in settings.as_env().items():
        monkeypatch.setenv(name, value)
    return cli.main([*argv, "--config", str(config)])


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "streamlearn.toml"
    path.write_text(TOML)
    return path


# -- the store ------------------------------------------------------------------------------


def test_the_trim_keeps_the_pinned_version_until_unpinned(redis, settings):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names, keep=KEEP, history=0)
    for v in (1, 2, 3):
        store.publish(blob(v))
    store.pin(2)
    for v in (4, 5, 6):  # more than `keep` versions published while pinned
        store.publish(blob(v))
    assert store.versions() == [2, 5, 6]
    assert store.fetch(2) == (2, blob(2)) and store.fetch(4) is None
    assert store.targets() == (6, 2, {})

    assert store.unpin() == 2 and store.targets() == (6, None, {})
    store.publish(blob(7))
    assert store.versions() == [6, 7] and store.fetch(2) is None
    assert store.unpin() is None


def test_the_trim_keeps_labelled_and_pinned_versions_until_the_label_goes(redis, settings):
    names = Names("l", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names, keep=KEEP, history=0)
    store.publish(blob(1))
    store.label("stable", 1)
    for v in (2, 3):
        store.publish(blob(v))
    store.label("canary", 3)
    store.pin(2)
    for v in (4, 5, 6, 7):
        store.publish(blob(v))
    assert store.versions() == [1, 2, 3, 6, 7]
    assert store.targets() == (7, 2, {"stable": 1, "canary": 3})
    kept = r"no version 4 in Redis; versions kept: \[1, 2, 3, 6, 7\]"
    with pytest.raises(WeightsError, match=kept):
        store.label("stable", 4)
    store.label("canary", None)
    store.unpin()
    store.publish(blob(8))
    assert store.versions() == [1, 7, 8] and store.labels() == {"stable": 1}


def test_the_history_keeps_one_version_per_interval_for_a_rollback_minutes_later(redis, settings):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names, keep=1, history=2, history_every_s=0.3)
    for v in (1, 2, 3):  # within the interval: only the first goes into the history
        store.publish(blob(v))
    assert store.versions() == [1, 3] and [v for v, _ in store.history_versions()] == [1]
    time.sleep(0.35)
    store.publish(blob(4))
    store.publish(blob(5))
    assert store.versions() == [1, 4, 5]
    store.pin(1)
    time.sleep(0.35)
    store.publish(blob(6))  # the history is full: 1 leaves it, kept only as the pin
    history = store.history_versions()
    assert [v for v, _ in history] == [4, 6] and 0.3 <= history[1][1] - history[0][1] < 5
    assert store.versions() == [1, 4, 6] and store.fetch(1) == (1, blob(1))
    store.unpin()
    store.publish(blob(7))
    assert store.versions() == [4, 6, 7] and store.fetch(1) is None


def test_a_champion_variant_publishing_keeps_the_pinned_version(redis, settings):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    model = WeightsStore(redis, names)
    base = WeightsStore(redis, names, "base", keep=KEEP, history=0)
    for v in (1, 2):
        base.publish(blob(v))
    model.pin(1)
    for v in (3, 4, 5):
        assert base.publish(blob(v)) == (v, True)
    assert model.versions() == [1, 4, 5] and model.fetch(1) == (1, blob(1))


def test_pinning_a_missing_version_fails_naming_the_versions_kept(
    redis, settings, config, monkeypatch, capsys
):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names, keep=KEEP, history=0)
    with pytest.raises(WeightsError, match="nothing published yet"):
        store.pin(1)
    for v in (1, 2, 3):
        store.publish(blob(v))

    assert run_cli(settings, monkeypatch, config, "pin", "--model", "p", "--version", "1") == 1
    error = capsys.readouterr().err
    assert "no version 1" in error and "versions kept: [2, 3]" in error
    assert store.pinned_version() is None

    assert run_cli(settings, monkeypatch, config, "pin", "--version", "2") == 0
    assert "pinned p to version 2 (latest 3)" in capsys.readouterr().out
    assert store.pinned_version() == 2


def test_status_and_the_dashboard_show_the_pin(
    redis, settings, config, monkeypatch, capsys, tmp_path: Path
):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names, keep=KEEP, history=0)
    for v in (1, 2, 3):
        store.publish(blob(v))
    store.pin(2)
    assert run_cli(settings, monkeypatch, config, "status") == 0
    assert "PINNED: actors serve version 2 (latest 3)" in capsys.readouterr().out

    dashboard = Dashboard(load_config(str(config)), settings, every_s=0.2)
    url = dashboard.start()
    try:

        def pin_sampled() -> bool:
            points = dashboard.data()["models"]["p"]
            return bool(points) and points[-1]["pinned_version"] == 2

        eventually(pin_sampled, 10, "the pin in the dashboard's samples")
        dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", url)
        assert 'data-pinned="2"' in dom and "actors serve version <b>2</b>" in dom, dom[:2000]
    finally:
        dashboard.close()


# -- real processes ---------------------------------------------------------------------------


def produce(queue: SampleStream, stop: threading.Event) -> None:
    """Samples of a linear function, one entry each, until stopped (~1,000 samples/s)."""
    rng = np.random.default_rng(5)
    n = 0
    while not stop.is_set():
        x = rng.uniform(-1, 1, (40, 3)).astype(np.float32)
        y = x @ np.array([1.0, -2.0, 0.5], np.float32)
        queue.write([Samples(x[i : i + 1], y[i : i + 1], (f"s{n + i}",)) for i in range(40)])
        n += 40
        stop.wait(0.04)


def test_actors_serve_the_pinned_version_while_the_learner_publishes_newer_ones(
    start_role, client_for, redis, settings, config, monkeypatch
):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names)
    start_role("learner", TOML)
    start_role("actor", TOML)
    client = client_for("p")
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(SampleStream(redis, names, (3,)), stop))
    producer.start()
    try:
        eventually(lambda: store.latest_version() >= 3, 60, "a few versions published")
        eventually(lambda: served(client) >= 3, 20, "the actor serves them")

        def rolled_back_to() -> int | None:
            """A history version older than the newest `keep`: a rollback a second back."""
            history = store.history_versions()
            old = history and history[-1][0] < store.latest_version() - KEEP
            return history[-1][0] if old else None

        pinned = eventually(rolled_back_to, 20, "a version older than the newest in history")
        assert run_cli(settings, monkeypatch, config, "pin", "--version", str(pinned)) == 0
        eventually(lambda: served(client) == pinned, 10, f"v{pinned} served once pinned")

        # an actor started while pinned serves the pin from its first request
        late = launch_role(settings, "actor", config, instance="late")
        try:
            late.wait_for(" ready")
            target = pinned + KEEP + 3  # more than `keep` newer versions published while pinned
            eventually(lambda: store.latest_version() >= target, 60, f"v{target} published")
            moved = lambda: store.history_versions()[0][0] > pinned  # noqa: E731
            eventually(moved, 10, "the history moved past the pinned version")
            assert {served(client) for _ in range(20)} == {pinned}
            assert store.fetch(pinned) is not None, "the trim kept the pinned version"
            statuses = actor_statuses(settings, names)
            assert len(statuses) == 2
            assert all(s["pinned"] == pinned and s["version"] == pinned for s in statuses)
        finally:
            late.stop()

        assert run_cli(settings, monkeypatch, config, "unpin") == 0
        eventually(lambda: served(client) > target, 10, "replies move forward once unpinned")
    finally:
        stop.set()
        producer.join()


def served(client) -> int:
    """The version of the weights that answered one request."""
    return client.request({"x": [0.1, 0.2, 0.3]})["version"]


def actor_statuses(settings, names: Names) -> list[dict]:
    """Every actor's retained status (each actor refreshes its own every 200 ms)."""
    got: dict[str, dict] = {}

    def on_message(_c: object, _u: object, msg) -> None:
        if msg.payload:
            got[msg.topic] = json.loads(msg.payload)

    watcher = mqtt.connect(
        settings.mqtt, subscriptions=[(names.topic("actors/+"), 1)], on_message=on_message
    )
    try:
        time.sleep(1.0)  # the retained ones come at once, then at least one refresh each
    finally:
        mqtt.close(watcher)
    return list(got.values())
