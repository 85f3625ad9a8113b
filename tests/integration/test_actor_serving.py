"""Actors under load, over real MQTT and Redis: hot reloads, refused blobs, dying actors.

Every version v published here makes the model answer exactly 1004 * v whatever x is
(first layer: zero kernel, bias v; head: kernel of ones, bias 1000 * v), so a reply shows
which weights computed it: a swap that mixed two versions would give another number.
"""

from __future__ import annotations

import json
import signal
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as paho
import pytest

from streamlearn import mqtt
from streamlearn.actor import runtimes
from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.store.weights import WeightsStore
from tests.conftest import RoleProcess, eventually, role_env
from tests.load import RequestLoad

TOML = """
[models.r]
inputs = 2
task = "regression"
hidden = [4]
heads = "last"  # one head: its weights make the reply name the version (see above)

[models.r.actor]
reload_check_ms = 50
status_every_ms = 200
"""
CFG = parse_config(tomllib.loads(TOML)).model("r")


@pytest.fixture(scope="module")
def template() -> dict[str, np.ndarray]:
    return tensors.get_arrays(networks.build_model(CFG))


def weights(template: dict[str, np.ndarray], v: int) -> dict[str, np.ndarray]:
    out = {}
    for path, array in template.items():
        head = path.startswith("head")
        if "standardize" in path:  # the identity: the replies stay 1004 * v
            out[path] = array
        elif path.endswith("bias"):
            out[path] = np.full_like(array, v * (1000 if head else 1))
        else:
            out[path] = np.ones_like(array) if head else np.zeros_like(array)
    return out


def blob(template: dict[str, np.ndarray], v: int) -> bytes:
    return codec.encode(weights(template, v), {"version": str(v)})


class CountedLoad(RequestLoad):
    """A `RequestLoad` that also counts the replies to each request and to each version."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.answers: Counter[int] = Counter()  # replies by request: one is all there should be
        self.by_version: Counter[int] = Counter()
        super().__init__(*args, **kwargs)

    def _on_reply(self, c: object, u: object, msg: paho.MQTTMessage) -> None:
        key = int.from_bytes(msg.properties.CorrelationData, "big")
        with self._cond:  # reentrant: waiters see the counts with the reply
            super()._on_reply(c, u, msg)
            self.answers[key] += 1
            self.by_version[self.replies[key].get("version")] += 1

    def wait_for_replies(self, version: int, count: int, timeout_s: float = 15) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.by_version[version] >= count, timeout_s):
                raise AssertionError(
                    f"{count} replies of version {version} not within {timeout_s} s"
                )

    def answered(self, ids: range) -> bool:
        with self._cond:
            return all(i in self.replies for i in ids)


def redis_reads(redis: Any) -> int:
    """GET and MGET calls Redis has answered: how an actor reads `latest`."""
    stats = redis.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("get", "mget"))


def test_100_reloads_under_steady_load_fail_no_request(start_role, settings, redis, template):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names)
    store.publish(blob(template, 1))
    start_role("actor", TOML)
    load = CountedLoad(settings, names, rate=300, x=[0.5, -0.5])
    try:
        load.wait_for_replies(1, 300)
        for v in range(2, 102):  # each version answers requests under load before the next
            assert store.publish(blob(template, v)) == (v, True)
            load.wait_for_replies(v, 10)
        load.wait_for_replies(101, 300)
    finally:
        load.stop()

    sent, replies = len(load.sent_at), load.replies
    assert load.unanswered() == [], "every request is answered"
    assert set(load.answers.values()) == {1}, "and only once"
    assert [r for r in replies.values() if "error" in r] == []
    versions = [replies[i]["version"] for i in range(sent)]
    assert set(versions) == set(range(1, 102)), "every published version served, none other"
    assert versions == sorted(versions), "an actor never goes back to older weights"
    wrong = [(i, r) for i, r in replies.items() if r["y"] != 1004 * r["version"]]
    assert wrong == [], "each reply is computed entirely by the version it names"


def test_invalid_blobs_are_refused_once_and_the_previous_version_keeps_serving(
    start_role, client_for, settings, redis, template
):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names)
    store.publish(blob(template, 1))
    actor = start_role("actor", TOML)
    client = client_for("r")
    assert client.request({"x": [1, 2]})["version"] == 1

    wrong_shape = weights(template, 3)
    wrong_shape["head/kernel"] = np.ones((5, 1), np.float32)
    not_finite = weights(template, 4)
    not_finite["head/bias"] = np.array([np.nan], np.float32)
    bad = {
        2: b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}",
        3: codec.encode(wrong_shape),
        4: codec.encode(not_finite),
    }
    for version, data in bad.items():
        assert store.publish(data) == (version, True)
        actor.wait_for(f"refused weights v{version}")
        reply = client.request({"x": [1, 2], "id": version})
        assert (reply["version"], reply["y"], reply["id"]) == (1, 1004.0, version)

    statuses: list[dict] = []
    watcher = mqtt.connect(
        settings.mqtt,
        subscriptions=[(names.topic("actors/+"), 1)],
        on_message=lambda _c, _u, m: statuses.append(json.loads(m.payload)) if m.payload else None,
    )
    try:
        eventually(
            lambda: statuses and set(statuses[-1]["refused"]) == {"2", "3", "4"},
            10,
            "the actor's status lists the refused versions",
        )
        status = statuses[-1]
        assert (status["version"], status["latest_seen"]) == (1, 4)
        assert status["weights_age_s"] >= 0
        polls = redis_reads(redis)
        eventually(lambda: redis_reads(redis) >= polls + 10, 10, "ten more polls of `latest`")
        for version in bad:
            refusals = [line for line in actor.lines if f"refused weights v{version}," in line]
            assert len(refusals) == 1, "a refused blob is remembered, not fetched again"

        store.publish(blob(template, 5))
        eventually(lambda: client.request({"x": [1, 2]})["version"] == 5, 10, "v5 served")
        eventually(lambda: statuses[-1]["version"] == 5, 10, "the status shows v5")
    finally:
        mqtt.close(watcher)


def test_actors_share_the_load_and_one_can_die(settings, redis, template, tmp_path: Path):
    """Killed under load, an actor loses only the requests it had received: the other
    answers everything sent once the broker dropped the dead one, and, stopped gracefully,
    what it had received; no request is answered twice."""
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    WeightsStore(redis, names).publish(blob(template, 1))
    config = tmp_path / "streamlearn.toml"
    config.write_text(TOML)
    argv = [sys.executable, "-m", "streamlearn.actor.worker", "--config", str(config), "--instance"]
    actors = {i: RoleProcess([*argv, i], role_env(settings)) for i in ("a", "b")}  # in parallel
    statuses: dict[str, dict] = {}
    watcher = mqtt.connect(
        settings.mqtt,
        subscriptions=[(names.topic("actors/+"), 1)],
        on_message=lambda _c, _u, m: statuses.update({m.topic: json.loads(m.payload or "{}")}),
    )
    try:
        for proc in actors.values():
            proc.wait_for(" ready")
        load = CountedLoad(settings, names, rate=150, x=[0.5, -0.5])
        try:
            eventually(
                lambda: len(statuses) == 2 and all(s["served"] > 20 for s in statuses.values()),
                15,
                "both actors answer a share of the requests",
            )
            before = len(load.sent_at)
            eventually(lambda: load.answered(range(before)), 10, "every request so far answered")
            actors["a"].proc.kill()
            eventually(
                lambda: len(statuses) == 2 and {} in statuses.values(),
                10,
                "the broker clears a dead actor's status (its will)",
            )
            # The broker has dropped the dead actor; the request being published now may
            # have reached it first.
            alone = len(load.sent_at) + 1
            eventually(
                lambda: load.answered(range(alone, alone + 150)), 15, "the survivor answers alone"
            )
            # Paused, the survivor holds what the broker sends it, more than one batch; then
            # stopped gracefully, it answers all of it before it leaves.
            paused = len(load.sent_at)
            actors["b"].proc.send_signal(signal.SIGSTOP)
            eventually(lambda: len(load.sent_at) >= paused + 200, 15, "requests held")
            stopping = len(load.sent_at)
            actors["b"].proc.terminate()
            actors["b"].proc.send_signal(signal.SIGCONT)
            assert actors["b"].proc.wait(20) == 0
            eventually(
                lambda: load.answered(range(alone, stopping)),
                10,
                "every request sent from the dead actor's drop to the survivor's stop answered",
            )
        finally:
            load.stop(timeout_s=0)
        eventually(lambda: all(s == {} for s in statuses.values()), 5, "no status left behind")
    finally:
        mqtt.close(watcher)
        for proc in actors.values():
            proc.stop()

    lost = [i for i in load.unanswered() if i < stopping]
    print(f"\n{len(load.sent_at)} requests, {len(lost)} lost with the killed actor")
    assert all(before <= i < alone for i in lost), (
        "only requests the killed actor held are lost: sent after every earlier one was "
        "answered, before the broker dropped it"
    )
    assert set(load.answers.values()) == {1}, "no request is answered twice"


def test_a_staged_version_not_served_yet_lends_its_model_to_the_next(settings, redis, template):
    """Versions that come faster than the actor serves (the learner publishes during its
    replay) replace one another in the spare model: none builds a model of its own. It
    did for the second one, which then came ~100 ms late: the next message was answered
    by weights that had not finished learning the last."""
    from streamlearn.actor.reloader import WeightsReloader

    store = WeightsStore(redis, Names("r", settings.topic_prefix, settings.key_prefix))
    built: list[str] = []

    make = runtimes.builder("numpy", (1,))

    def build(variant: str) -> runtimes.Servable:
        built.append(variant)
        return make(CFG)

    serving = make(CFG)
    reloader = WeightsReloader(store, [make(CFG)], 1000, build=build)
    for v in (1, 2, 3):  # staged one after another while the serving loop waits
        store.publish(blob(template, v))
        reloader.poll(block=True)
    staged = reloader.take(serving)
    assert built == [], "no model was built: the staged one's was reused"
    assert staged is not None and staged.version == 3
    assert float(staged.model(np.zeros((1, 2), np.float32))[0, 0]) == 1004 * 3
