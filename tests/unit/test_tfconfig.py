"""The multi-host learner's cluster settings (`streamlearn.config.tfconfig`): what a worker
refuses at start, before TensorFlow listens on anything."""

from __future__ import annotations

import json
import threading

import pytest

from streamlearn.config.tfconfig import DEFAULT_TIMEOUT_S, Workers, check_replicas
from streamlearn.errors import ConfigError


def env(*hosts: str, index: int = 0, **more: str) -> dict[str, str]:
    cluster = {"cluster": {"worker": list(hosts)}, "task": {"type": "worker", "index": index}}
    return {"TF_CONFIG": json.dumps(cluster), **more}


def test_the_collective_timeout_has_a_default_and_an_env_setting():
    assert Workers.from_env(env("localhost:2222")).timeout_s == DEFAULT_TIMEOUT_S == 60.0
    tuned = env("localhost:2222", STREAMLEARN_COLLECTIVE_TIMEOUT_S="7.5")
    assert Workers.from_env(tuned).timeout_s == 7.5


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf", "nan"])
def test_a_bad_collective_timeout_is_refused_naming_it(raw):
    with pytest.raises(ConfigError) as info:
        Workers.from_env(env("localhost:2222", STREAMLEARN_COLLECTIVE_TIMEOUT_S=raw))
    assert f"STREAMLEARN_COLLECTIVE_TIMEOUT_S must be a number of seconds > 0, got {raw!r}" in str(
        info.value
    )


@pytest.mark.parametrize(
    "hosts",
    [
        ("localhost:2222", "127.0.0.1:2223"),
        ("10.0.0.11:2222", "10.0.0.12:2222"),
        ("192.168.1.5:2222", "172.16.0.9:2222"),
        ("100.101.102.103:2222", "[fd00::2]:2222"),  # a VPN's (CGNAT, ULA)
        ("learner-0.learner.svc:2222", "learner-1.learner.svc:2222"),  # not resolvable yet
    ],
)
def test_private_addresses_pass(hosts):
    assert Workers.from_env(env(*hosts, index=1)).count == 2


@pytest.mark.parametrize("public", ["8.8.8.8:2222", "[2001:4860:4860::8888]:2222"])
def test_a_public_address_is_refused_unless_allowed(public):
    with pytest.raises(ConfigError) as info:
        Workers.from_env(env("10.0.0.11:2222", public))
    message = str(info.value)
    assert f"TF_CONFIG names {public}, a public address" in message
    assert "runs any op for whoever reaches it" in message and "docs/scaling.md" in message
    allowed = env("10.0.0.11:2222", public, STREAMLEARN_TF_PUBLIC_ADDRESSES="allow")
    assert Workers.from_env(allowed).count == 2


def test_workers_with_different_device_counts_are_refused_naming_both():
    check_replicas([2, 2, 2])
    with pytest.raises(ConfigError) as info:
        check_replicas([1, 1, 2])
    assert "worker 0 trains on 1 and worker 2 on 2" in str(info.value)
    assert "CUDA_VISIBLE_DEVICES" in str(info.value)


def test_the_watchdog_waits_longer_only_while_the_workers_start():
    """A worker still tracing its buckets is not taken for a lost one; once started, a
    collective that waits past the timeout is aborted."""
    from streamlearn.learner.collective import Watchdog

    class Recorded(Watchdog):
        def _abort(self) -> None:
            aborted.set()

    aborted = threading.Event()
    dog = Recorded(0.1)
    with dog.patient(30), dog.watching():
        assert not aborted.wait(0.4), "aborted while the workers start"
    with dog.watching():
        assert aborted.wait(5), "a collective waiting past the timeout was not aborted"
    assert dog.waited_s == 0.1
