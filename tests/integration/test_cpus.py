"""Workers given a CPU quota of 1 (`STREAMLEARN_CPU_QUOTA`, standing in for the cgroup's
`cpu.max`) size their thread pools to it and say so in their statuses."""

from __future__ import annotations

import json

import paho.mqtt.client as paho

from streamlearn import mqtt
from streamlearn.config.settings import Settings
from streamlearn.contract.names import Names
from tests.conftest import eventually, retained

TOML = """
[models.c]
inputs = 2
task = "binary"

[models.c.actor]
runtime = "tensorflow"

[models.c.learner]
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's

[models.n]
inputs = 2
task = "binary"
"""
QUOTA = {"STREAMLEARN_CPU_QUOTA": "1"}


def test_a_quota_of_one_cpu_sizes_tensorflow_the_actors_and_the_prefetch(
    start_role, settings: Settings
):
    names = Names("c", settings.topic_prefix, settings.key_prefix)
    numpy = Names("n", settings.topic_prefix, settings.key_prefix)
    actors: dict[str, dict] = {}

    def on_message(_c: object, _u: object, msg: paho.MQTTMessage) -> None:
        if msg.payload:
            actors[msg.topic.split("/")[1]] = json.loads(msg.payload)  # by model

    topics = [(n.topic("actors/+"), 1) for n in (names, numpy)]
    watcher = mqtt.connect(settings.mqtt, subscriptions=topics, on_message=on_message)
    try:
        start_role("learner", TOML, model="c", env=QUOTA)
        start_role("actor", TOML, model="c", env=QUOTA)
        start_role("actor", TOML, model="n", env=QUOTA)
        learner = eventually(lambda: retained(settings, names.status_topic), 30, "learner status")
        assert learner["cpus"] == {
            "usable": 1,
            "from": "STREAMLEARN_CPU_QUOTA=1",
            "backend": "tensorflow",
            "intra_op_threads": 1,
            "inter_op_threads": 2,  # one blocking op must not hold the only one
            "prefetch_batches": 0,
        }
        eventually(lambda: len(actors) == 2, 30, "both actors' statuses")
        actor = actors["c"]
        assert actor["runtime"] == "tensorflow"
        assert actor["cpus"] == {
            "usable": 1,
            "from": "STREAMLEARN_CPU_QUOTA=1",
            "backend": "tensorflow",
            "intra_op_threads": 1,
            "inter_op_threads": 2,
        }
        # numpy's BLAS, sized as numpy loaded
        assert actors["n"]["runtime"] == "numpy"
        assert actors["n"]["cpus"] == {
            "usable": 1,
            "from": "STREAMLEARN_CPU_QUOTA=1",
            "blas_threads": 1,
        }
    finally:
        mqtt.close(watcher)
