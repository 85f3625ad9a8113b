"""Variants and promotion end to end: real mosquitto, Redis, ingest, two learners, an actor.

The model's own config (`base`) is a learner that can hardly learn (one head, SGD with a
tiny learning rate); its variant `fast` (Adam, a wider hidden layer: another architecture, so the
actor must build a new model for it) learns y = 2 x0 - x1 + 0.5 x2 in a few hundred samples.
A client keeps asking for predictions throughout; `fast` is promoted, the promotion is
announced, and the replies move to `fast`'s weights without one failed request.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np

from streamlearn import mqtt
from streamlearn.cli.status import format_status
from streamlearn.config import Settings, parse_config
from streamlearn.contract.names import Names
from streamlearn.observe.monitor import read_status
from tests.conftest import RoleProcess, eventually, role_env
from tests.load import RequestLoad

TOML = """
[models.r]
inputs = 3
task = "regression"
hidden = [8]
optimizer = "sgd"
learning_rate = 0.0001
heads = "last"  # one head: a solved linear head or a memory head learns without SGD

[models.r.learner]
max_batch = 64
buckets = [64]  # one padded size: one trace before ready (batch sizes are not this test's)
publish.every_ms = 200
status_every_ms = 300

[models.r.actor]
reload_check_ms = 50
status_every_ms = 500

[models.r.variants.fast]
hidden = [32]
optimizer = "adam"
learning_rate = 0.01

[models.r.promotion]
on = "metric"  # MAE for a regression
margin = 0.3
window_samples = 1000
min_samples = 600
cooldown_s = 0
"""

PROBE = np.array([[0.5, -0.5, 0.2], [-0.3, 0.8, -0.6]])
TRUTH = 2 * PROBE[:, 0] - PROBE[:, 1] + 0.5 * PROBE[:, 2]


def samples(rng: np.random.Generator, n: int) -> dict:
    x = rng.uniform(-1, 1, (n, 3))
    return {"x": x.tolist(), "y": (2 * x[:, 0] - x[:, 1] + 0.5 * x[:, 2]).tolist()}


class Retained:
    """The latest message on each of some topics (retained ones arrive on subscribing)."""

    def __init__(self, settings: Settings, topics: list[str]) -> None:
        self.last: dict[str, dict] = {}
        self.client = mqtt.connect(
            settings.mqtt, subscriptions=[(t, 1) for t in topics], on_message=self._on_message
        )

    def _on_message(self, _c: object, _u: object, msg: object) -> None:
        self.last[msg.topic] = json.loads(msg.payload)  # type: ignore[attr-defined]

    def close(self) -> None:
        mqtt.close(self.client)


def test_a_clearly_better_variant_is_promoted_and_actors_switch_without_a_failed_request(
    start_role, client_for, settings, redis, tmp_path: Path
):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    config = tmp_path / "variant.toml"
    config.write_text(TOML)
    argv = [
        sys.executable,
        "-m",
        "streamlearn.learner.worker",
        "--config",
        str(config),
        "--variant",
        "fast",
    ]
    fast_learner = RoleProcess(argv, role_env(settings))  # starts while the others do
    start_role("ingest", TOML)
    start_role("learner", TOML)
    actor = start_role("actor", TOML)
    fast_learner.wait_for(" ready")
    device = client_for("r")
    watch = Retained(settings, [names.champion_topic, names.status_topic])
    rng = np.random.default_rng(7)
    try:
        # Fewer samples than min_samples: base publishes, no promotion can happen yet.
        device.publish_samples([samples(rng, 50) for _ in range(4)])
        eventually(lambda: int(redis.get(names.latest_key) or 0) > 0, 30, "base's first weights")
        first = device.request({"x": PROBE.tolist()})
        assert first["variant"] == "base" and first["version"] > 0

        # a request every ~17 ms from here on
        load = RequestLoad(settings, names, rate=60, x=PROBE.tolist())
        eventually(lambda: load.served_by("base") >= 20, 10, "base serves under load")
        feeding = threading.Event()

        def feed() -> None:
            while not feeding.is_set():
                device.publish_samples([samples(rng, 50)])
                time.sleep(0.05)

        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            eventually(lambda: names.champion_topic in watch.last, 60, "a promotion announced")
            announcement = watch.last[names.champion_topic]
            eventually(lambda: load.served_by("fast") > 0, 30, "replies from fast's weights")
            time.sleep(1.0)  # more replies from fast's weights, under load
        finally:
            feeding.set()
            feeder.join()
            load.stop()
        fast_learner.wait_for("promoted to champion over base")

        # The promotion is announced (retained), and the status shows both variants.
        assert (announcement["champion"], announcement["previous"]) == ("fast", "base")
        assert announcement["on"] == "mae" and announcement["at"] > 0
        won = announcement["figures"]
        assert won["fast"]["window_metric"] < 0.7 * won["base"]["window_metric"]
        eventually(
            lambda: watch.last.get(names.status_topic, {}).get("champion") == "fast",
            10,
            "the model's status names the new champion",
        )
        status = watch.last[names.status_topic]
        assert status["variant"] == "fast" and set(status["variants"]) == {"base", "fast"}
        assert all(v["samples_seen"] > 0 for v in status["variants"].values())
        assert status["promotion"]["champion"] == "fast"

        # Not one request failed or went unanswered across the switch.
        sent, replies = len(load.sent_at), load.replies
        assert sent > 100, f"the load was not steady: {sent} requests"
        assert load.unanswered() == [], "every request is answered"
        assert [r for r in replies.values() if "error" in r] == []
        served = [(replies[i]["version"], replies[i]["variant"]) for i in range(sent)]
        versions = [v for v, _ in served]
        assert versions == sorted(versions), "the model's versions only go up"
        switch = [w for _, w in served].index("fast")
        assert switch >= 20 and {w for _, w in served[:switch]} == {"base"}
        assert {w for _, w in served[switch:]} == {"fast"}, "once switched, fast serves"
        assert served[switch - 1][0] < served[switch][0]
        print(
            f"\n{sent} requests, 0 failed; base served v{served[0][0]}..v{served[switch - 1][0]}"
            f", fast v{served[switch][0]}..v{served[-1][0]} from request {switch}"
        )

        # fast's predictions are accurate; the actor built its architecture and serves it.
        reply = device.request({"x": PROBE.tolist()})
        assert reply["variant"] == "fast"
        # (relative to base's first answer: how far fast got depends on the machine's load)
        fast_error = np.abs(np.array(reply["y"]) - TRUTH).max()
        base_error = np.abs(np.array(first["y"]) - TRUTH).max()
        assert fast_error < 0.5 * base_error, (reply["y"], first["y"], TRUTH)
        actor.wait_for("built and warmed up a model for variant fast")
        print(next(line for line in actor.lines if "built and warmed up" in line))

        rows = read_status_rows(settings)
        assert rows["champion"] == "fast" and set(rows["variants"]) == {"base", "fast"}
    finally:
        watch.close()
        fast_learner.stop()


def read_status_rows(settings: Settings) -> dict:
    """What `streamlearn status` shows: one line per variant, the champion marked."""
    rows = read_status(parse_config(tomllib.loads(TOML)), settings, wait_s=1.0)
    table = format_status(rows)
    assert "* fast" in table and "  base" in table, table
    print(table)
    return rows[0]
