"""The stack on a real Redis Cluster (three masters, a replica each), given one node's URL.

Two models whose hash slots live on different masters run side by side: a model with a
second variant (its own consumer group and weights namespace) and a per-device window
model. Every key of a model stays on its own master. A partitioned model spreads its stream
over several masters. Then a master is killed: its replica is promoted and the stack goes on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from streamlearn.config import Settings
from streamlearn.contract.names import Names
from streamlearn.stack import cluster as cluster_lib
from streamlearn.stack import embedded
from streamlearn.store.redis_client import connect, is_cluster
from streamlearn.store.weights import WeightsStore
from tests.conftest import Client, RoleProcess, eventually, own_settings, role_env, samples_seen
from tests.integration.test_cli import streamlearn
from tests.samples import linear_messages, sine_observations

TOML = """
[models.{plain}]
inputs = 3
task = "regression"
hidden = [8]

[models.{plain}.learner]
max_batch = 32
buckets = [32]  # one padded size: one trace before ready (batch sizes are not this test's)
status_every_ms = 300

[models.{plain}.actor]
reload_check_ms = 50

[models.{plain}.variants.wide]
hidden = [16]

[models.{windowed}]
inputs = 1
task = "regression"
architecture = "conv1d"
window = 3
hidden = [8]

[models.{windowed}.learner]
max_batch = 32
buckets = [32]

[models.{windowed}.actor]
reload_check_ms = 50

[models.{windowed}.gateways]
hub = ["*"]  # the test's one client sends and asks for every device
"""
DEVICES = ("dev-0", "dev-1")
PARTITIONED = """
[models.{model}]
inputs = 3
task = "regression"
hidden = [8]

[models.{model}.ingest]
partitions = 3

[models.{model}.learner]
max_batch = 32
buckets = [32]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster_lib.LocalCluster]:
    with cluster_lib.LocalCluster(
        masters=3, replicas=1, workdir=tmp_path_factory.mktemp("rc")
    ) as c:
        yield c


@pytest.fixture
def settings(
    cluster: cluster_lib.LocalCluster, mosquitto_server: embedded.ServerProcess
) -> Settings:
    """This module's roles talk to the cluster through one node's URL."""
    mine = own_settings(cluster.nodes[0], mosquitto_server)
    return mine.model_copy(update={"redis_url": cluster.url})


@pytest.fixture
def redis(settings: Settings) -> Iterator[redis_lib.Redis]:
    client = connect(settings.redis)
    yield client
    client.close()


def port_of(cluster: cluster_lib.LocalCluster, key: str) -> int | None:
    """The port of the master serving `key` now (None: none, during a failover)."""
    master = cluster.master_of(key)
    return None if master is None else master.port


def on_two_masters(cluster: cluster_lib.LocalCluster, settings: Settings) -> tuple[Names, Names]:
    """Two model names whose keys hash to slots served by different masters."""
    candidates = [Names(f"m{i}", settings.topic_prefix, settings.key_prefix) for i in range(20)]
    first = candidates[0]
    home = port_of(cluster, first.samples_key)
    other = next(n for n in candidates if port_of(cluster, n.samples_key) != home)
    return first, other


def test_two_models_learn_and_serve_on_different_shards_of_a_cluster(
    cluster, settings, redis, start_role, client_for, tmp_path: Path, request
):
    assert is_cluster(redis), "connect() detected the cluster from one node's URL"
    plain, windowed = on_two_masters(cluster, settings)
    toml = TOML.format(plain=plain.model, windowed=windowed.model)
    for role in ("ingest", "learner", "actor"):
        for names in (plain, windowed):
            start_role(role, toml, names.model)
    config = tmp_path / "streamlearn.toml"  # start_role wrote it
    argv = ["--config", str(config), "--model", plain.model, "--variant", "wide"]
    variant = RoleProcess(
        [sys.executable, "-m", "streamlearn.learner.worker", *argv], role_env(settings)
    )
    request.addfinalizer(variant.stop)
    variant.wait_for(" ready")

    device = client_for(plain.model)
    messages = linear_messages(1200, seed=3)
    device.publish_samples(messages + messages[:1])  # the first message sent twice
    device.publish_samples([b'{"x": [1, 2], "y": 1}'])  # two inputs of three: dead-lettered
    sensor = client_for(windowed.model, client_id="hub")
    sensor.publish_samples(sine_observations(DEVICES, 300))

    eventually(lambda: samples_seen(redis, plain) == 1200, 120, "each sample learned once")
    windows = len(DEVICES) * (300 - 2)  # each device's first two have no full window
    eventually(lambda: samples_seen(redis, windowed) == windows, 120, "every window learned")
    eventually(lambda: redis.xlen(plain.deadletter_key) == 1, 10, "the bad message dead-lettered")

    reply = device.request({"x": [0.5, -0.5, 0.2]})
    assert "error" not in reply and reply["version"] > 0, reply
    keyed = sensor.request({"key": "dev-0", "seq": 300, "x": [0.1]})
    assert "error" not in keyed and keyed["version"] > 0, keyed
    wide = WeightsStore(redis, plain, "wide")
    eventually(lambda: wide.fetch() is not None, 60, "the variant publishes its own versions")

    # everything a model owns lives on the master of its slot, and nowhere else
    owners: dict[str, set[int]] = {plain.model: set(), windowed.model: set()}
    for node in cluster.nodes:
        for key in cluster.cli(node, "--scan", "--pattern", f"{settings.key_prefix}:*").split():
            role = cluster.cli(node, "role").split()[0]
            if role == "master":
                owners[key.split("{")[1].split("}")[0]].add(node.port)
    assert owners == {
        plain.model: {port_of(cluster, plain.samples_key)},
        windowed.model: {port_of(cluster, windowed.samples_key)},
    }
    assert owners[plain.model] != owners[windowed.model]


def test_a_partitioned_model_spreads_over_the_masters_and_learns_every_sample(
    cluster, settings, redis, start_role, client_for, tmp_path: Path
):
    names = Names("spread", settings.topic_prefix, settings.key_prefix)
    toml = PARTITIONED.format(model=names.model)
    for role in ("ingest", "learner"):
        start_role(role, toml, names.model)
    streams = [names.of_partition(i).samples_key for i in range(3)]
    assert len({port_of(cluster, key) for key in streams}) >= 2, "over at least two masters"

    client_for(names.model).publish_samples(linear_messages(900, per=30, seed=5))
    eventually(lambda: samples_seen(redis, names) == 900, 120, "each sample learned once")
    counts = [int(redis.get(names.of_partition(i).ingest_count_key) or 0) for i in range(3)]
    assert sum(counts) == 900 and min(counts) > 0, counts

    # the operator's commands find the cluster from the same URL
    config = tmp_path / "streamlearn.toml"
    before = sum(redis.xlen(key) for key in streams)
    status = streamlearn(settings, config, "status", "--json")
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    after = sum(redis.xlen(key) for key in streams)  # the learner trims what it acknowledged
    assert before >= row["queue_length"] >= after, (before, row, after)
    assert row["pending"] == 0 and row["deadletters"] == 0
    kept = WeightsStore(redis, names).versions()[0]
    pinned = streamlearn(settings, config, "pin", "--version", str(kept))
    assert pinned.returncode == 0, pinned.stderr
    assert WeightsStore(redis, names).pinned_version() == kept


def test_the_stack_goes_on_when_a_master_fails_over_to_its_replica(
    cluster, settings, redis, start_role, client_for, tmp_path: Path
):
    plain, _ = on_two_masters(cluster, settings)
    toml = TOML.format(plain=plain.model, windowed="unused")
    for role in ("ingest", "learner", "actor"):
        start_role(role, toml, plain.model)
    device: Client = client_for(plain.model)
    device.publish_samples(linear_messages(400, seed=4))
    eventually(lambda: samples_seen(redis, plain) == 400, 60, "learned before the failover")
    before = device.request({"x": [0.1, 0.2, 0.3]})["version"]

    master = cluster.master_of(plain.samples_key)
    master.kill()  # SIGKILL: no goodbye to the cluster
    promoted = lambda: port_of(cluster, plain.samples_key) not in (None, master.port)  # noqa: E731
    eventually(promoted, 30, "its replica promoted")
    cluster.wait_ok()

    device.publish_samples(linear_messages(400, seed=5, first_id=400))
    # Replication is asynchronous: writes the dead master acknowledged in its last moments
    # may not have reached the replica. Everything sent after the promotion is learned.
    eventually(lambda: samples_seen(redis, plain) >= 800, 120, "learned after the failover")
    eventually(
        lambda: device.request({"x": [0.1, 0.2, 0.3]})["version"] > before,
        60,
        "actors serve versions published after the failover",
    )
