"""The CPUs a worker sizes its threads to: its affinity within its cgroup's CPU quota."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamlearn.config import cpus, environment
from streamlearn.config.policies import LearnerConfig
from streamlearn.errors import ConfigError
from streamlearn.learner.reporting import StatusPublisher


@pytest.fixture
def eight_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host of 8 cores, no quota given by the environment."""
    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)
    monkeypatch.delenv(environment.CPU_QUOTA, raising=False)


def cgroup(root: Path, **files: str) -> Path:
    for name, text in files.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


@pytest.mark.usefixtures("eight_cores")
@pytest.mark.parametrize(
    ("files", "usable", "source"),
    [
        ({"cpu.max": "100000 100000"}, 1, "cgroup cpu.max 100000/100000"),
        ({"cpu.max": "150000 100000"}, 2, "cgroup cpu.max 150000/100000"),  # 1.5: 2 threads
        ({"cpu.max": "50000 100000"}, 1, "cgroup cpu.max 50000/100000"),  # never 0
        ({"cpu.max": "max 100000"}, 8, "affinity (8 cores)"),
        ({"cpu.max": "1600000 100000"}, 8, "affinity (8 cores); cgroup cpu.max 1600000/100000"),
        (
            {"cpu__cpu.cfs_quota_us": "200000", "cpu__cpu.cfs_period_us": "100000"},
            2,
            "cgroup cpu.cfs_quota_us 200000/100000",
        ),
        ({"cpu__cpu.cfs_quota_us": "-1", "cpu__cpu.cfs_period_us": "100000"}, 8, "affinity"),
        ({}, 8, "affinity (8 cores)"),
    ],
)
def test_usable_cpus_are_the_affinity_within_the_cgroup_quota(tmp_path, files, usable, source):
    found = cpus.usable_cpus(cgroup(tmp_path, **files))
    assert found.usable == usable
    assert found.source.startswith(source)
    assert found.status() == {"usable": usable, "from": found.source}


@pytest.mark.usefixtures("eight_cores")
def test_the_variable_stands_in_for_the_quota(tmp_path, monkeypatch):
    root = cgroup(tmp_path, **{"cpu.max": "400000 100000"})
    monkeypatch.setenv(environment.CPU_QUOTA, "1")
    assert cpus.usable_cpus(root).status() == {"usable": 1, "from": "STREAMLEARN_CPU_QUOTA=1"}
    monkeypatch.setenv(environment.CPU_QUOTA, "0")
    with pytest.raises(ConfigError, match="STREAMLEARN_CPU_QUOTA must be a number of CPUs > 0"):
        cpus.usable_cpus(root)


@pytest.mark.usefixtures("eight_cores")
def test_the_learners_prefetch_follows_the_quota(monkeypatch):
    assert LearnerConfig().prefetch_depth() == 2  # 8 cores, no quota
    monkeypatch.setenv(environment.CPU_QUOTA, "1")
    assert LearnerConfig().prefetch_depth() == 0  # the thread costs more than it saves
    assert LearnerConfig(prefetch_batches=3).prefetch_depth() == 3  # as asked


class Published:
    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        self.payloads.append(payload)


def test_the_learners_status_says_what_its_threads_were_sized_to():
    from streamlearn.contract.names import Names

    client = Published()
    chosen = {"usable": 1, "from": "cgroup cpu.max 100000/100000", "intra_op_threads": 1}
    StatusPublisher(client, Names("m"), None, chosen)({"samples_seen": 0})  # type: ignore[arg-type]
    assert json.loads(client.payloads[0])["cpus"] == chosen


def test_streamlearn_status_shows_the_cpus_each_worker_sized_its_threads_to():
    from streamlearn.observe.status_text import actor_line, presence_lines

    chosen = {"usable": 1, "from": "cgroup cpu.max 100000/100000", "intra_op_threads": 1}
    learner = presence_lines({"status_age_s": 0.5, "learner_state": "online", "cpus": chosen})
    assert learner[0] == "  learner: online, status 0.5 s old, 1 CPU (cgroup cpu.max 100000/100000)"
    actor = actor_line(
        {"id": "a", "version": 3, "cpus": {"usable": 2, "from": "affinity (2 cores)"}}
    )
    assert actor.endswith(", 2 CPUs (affinity (2 cores))")
    assert "CPU" not in actor_line({"id": "old", "version": 3})  # an actor of a release before


@pytest.mark.usefixtures("eight_cores")
def test_blas_threads_are_sized_before_numpy_loads_and_never_over_what_was_set(
    tmp_path, monkeypatch
):
    root = cgroup(tmp_path, **{"cpu.max": "100000 100000"})
    for name in cpus.BLAS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the operator's, kept
    assert cpus.blas_environment(root) == {}  # numpy is loaded here: too late
    monkeypatch.delitem(cpus.sys.modules, "numpy")
    assert cpus.blas_environment(root) == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@pytest.mark.usefixtures("eight_cores")
def test_a_cgroup_file_that_is_not_numbers_leaves_the_affinity(tmp_path):
    found = cpus.usable_cpus(cgroup(tmp_path, **{"cpu.max": "garbage"}))
    assert found.usable == 8 and "cpu.max garbage" in found.source
