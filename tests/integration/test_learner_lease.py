"""One learner per model: the lease (`streamlearn.store.lease`) fences every publish.

Two learner processes on one model: one publishes, the other waits; SIGKILLed, the first's
lease lapses and the second takes over; a lease taken from under a learner stops its
publishing until it takes the lease again. And, at the script's level, a publish with a
token that no longer holds the lease writes nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import redis as redis_lib

from streamlearn.cli.status import format_status
from streamlearn.config.loading import load_config
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.errors import LeaseLost
from streamlearn.observe.monitor import read_status
from streamlearn.online import codec
from streamlearn.store.lease import Lease
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually, launch_role

TOML = """
[models.m]
inputs = 4
task = "regression"
hidden = [8]

[models.m.learner]
max_batch = 16
publish.every_ms = 100
lease.ttl_s = 1.5
lease.renew_s = 0.3
"""


def blob(step: int) -> bytes:
    return codec.encode({"w": np.zeros(2, np.float32)}, {"step": str(step)})


def written(redis: redis_lib.Redis, names: Names) -> dict[str, object]:
    """Every weights key of `names`, as read now."""
    return {
        "latest": redis.get(names.latest_key),
        "versions": redis.lrange(names.versions_key, 0, -1),
        "history": redis.zrange(names.history_key, 0, -1),
        "blobs": sorted(redis.hkeys(names.blobs_key)),
    }


@pytest.mark.parametrize("variant", [None, "fast"])
def test_a_publish_with_a_token_that_lost_the_lease_writes_nothing(redis, settings, variant):
    names = Names("f", settings.topic_prefix, settings.key_prefix)
    own = names if variant is None else names.of_variant(variant)
    first, second = Lease(redis, own, 30), Lease(redis, own, 30)
    assert first.take() and not second.take(), "one holder at a time"
    store = WeightsStore(redis, names, variant, lease=first)
    assert store.publish(blob(1))[0] == 1
    assert second.renew() is False and second.release() is False  # not its lease
    assert first.release() and second.take()
    before = {n: written(redis, n) for n in (names, own)}
    announced = redis.pubsub()
    announced.subscribe(names.weights_channel)
    assert announced.get_message(timeout=1)["type"] == "subscribe"
    with pytest.raises(LeaseLost):
        store.publish(blob(2))
    assert {n: written(redis, n) for n in (names, own)} == before, "nothing written"
    assert announced.get_message(timeout=0.2) is None, "nothing announced"
    assert first.renew() is False, "a lost lease is not renewed back"
    redis.delete(own.lease_key)  # expired: a token holds nothing either
    with pytest.raises(LeaseLost):
        store.publish(blob(3))
    assert WeightsStore(redis, names, variant).publish(blob(4))[0] == 2, "a tool: not fenced"
    announced.close()


def feed(queue: SampleStream, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    queue.write([Samples(x, x @ np.array([1, -2, 0.5, 0], np.float32))])


def publishers(redis: redis_lib.Redis, names: Names) -> set[str]:
    """The tokens of the learners that published the versions kept."""
    blobs = redis.hgetall(names.blobs_key).values()
    return {codec.decode(b)[1].get("learner", "?") for b in blobs}


def test_two_learners_one_publishes_the_other_takes_over_when_it_dies(redis, settings, tmp_path):
    names = Names("m", settings.topic_prefix, settings.key_prefix)
    config = tmp_path / "streamlearn.toml"
    config.write_text(TOML)
    queue = SampleStream(redis, names, (4,))
    first = launch_role(settings, "learner", config, instance="a")
    second = None
    try:
        first.wait_for(" ready")
        holder = redis.get(names.lease_key).decode()
        second = launch_role(settings, "learner", config, instance="b")
        second.wait_for(f"held by {holder}")  # it waits, naming the holder
        feed(queue, 200, 1)
        eventually(lambda: int(redis.get(names.latest_key) or 0) >= 3, 30, "versions")
        assert publishers(redis, names) == {holder}, "every version from one learner"
        assert not any(" ready" in line for line in second.lines), second.output

        def leases() -> str | None:  # `streamlearn status`: the holder and who waits
            table = format_status(read_status(load_config(str(config)), settings))
            return table if "waiting: b" in table else None

        assert f"lease: held by a ({holder})" in eventually(leases, 30, "both learners shown")

        first.proc.kill()  # SIGKILL: its lease lapses after the TTL
        first.proc.wait()
        before = int(redis.get(names.latest_key))
        second.wait_for(" ready", 60)
        assert any("resumed from published weights" in line for line in second.lines)
        taker = redis.get(names.lease_key).decode()
        assert taker != holder
        feed(queue, 100, 2)
        eventually(lambda: int(redis.get(names.latest_key)) > before, 30, "takeover")
        assert publishers(redis, names) <= {holder, taker}

        # a lease taken from under it: it stops publishing, waits, then takes it again
        redis.set(names.lease_key, "intruder", px=1500)
        second.wait_for("held by intruder", 30)
        assert any("lost" in line for line in second.lines), second.output
        again = lambda: sum(" ready" in line for line in second.lines) == 2  # noqa: E731
        eventually(again, 60, "ready again, the lease taken back")
        assert redis.get(names.lease_key).decode() == taker
    finally:
        first.stop()
        if second is not None:
            assert second.stop() == 0, second.output
    assert redis.get(names.lease_key) is None, "released on a clean stop"
