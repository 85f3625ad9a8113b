"""The multi-host learner's cluster, as `TF_CONFIG` describes it (`streamlearn.learner.collective`).

Kept apart from TensorFlow, so that `streamlearn up` checks it before it starts anything.

TensorFlow's gRPC server runs any op for whoever reaches its port (TensorFlow's
SECURITY.md), and it listens on every interface of the host whatever address `TF_CONFIG`
names. So the cluster must live on a private network: an address that resolves to a public
one is refused unless `STREAMLEARN_TF_PUBLIC_ADDRESSES=allow` says a firewall or VPN
already keeps everyone else out (docs/scaling.md).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from dataclasses import dataclass
from typing import cast

from streamlearn.config import environment
from streamlearn.errors import ConfigError

_WHERE = "learner.distribute: 'multi_worker'"
TIMEOUT_ENV = environment.COLLECTIVE_TIMEOUT_S
DEFAULT_TIMEOUT_S = 60.0  # a chief's checkpoint or a Redis failover takes seconds, not minutes
PUBLIC_ENV = environment.TF_PUBLIC_ADDRESSES


@dataclass(frozen=True)
class Workers:
    """This process's place in the multi-worker cluster: `count` workers, this one
    `index`; worker 0 is the chief (it publishes, checkpoints and reports). A collective
    that waits `timeout_s` for the others ends this worker (`collective.WorkerLost`)."""

    count: int
    index: int
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def chief(self) -> bool:
        return self.index == 0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Workers:
        """From `TF_CONFIG`: `{"cluster": {"worker": [host:port, ...]}, "task": {"type":
        "worker", "index": i}}`, and `STREAMLEARN_COLLECTIVE_TIMEOUT_S`; a `ConfigError`
        says what is missing or wrong.

        >>> Workers.from_env({"TF_CONFIG": '{"cluster": {"worker": ["10.0.0.1:2222", '
        ...                   '"10.0.0.2:2222"]}, "task": {"type": "worker", "index": 1}}'})
        Workers(count=2, index=1, timeout_s=60.0)
        """
        env = os.environ if environ is None else environ
        raw = env.get("TF_CONFIG")
        if not raw:
            raise ConfigError(f"{_WHERE} needs TF_CONFIG in the environment (see docs/scaling.md)")
        try:
            doc = json.loads(raw)
            workers = [str(w) for w in doc["cluster"]["worker"]]
            task = doc["task"]
            index = int(task["index"])
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{_WHERE}: TF_CONFIG is not a cluster and task: {exc!r}") from None
        if task.get("type") != "worker" or not 0 <= index < len(workers):
            raise ConfigError(
                f"{_WHERE}: TF_CONFIG's task must be a worker of {workers}, got {task}"
            )
        if env.get(PUBLIC_ENV) != "allow":
            for address in workers:
                refuse_public(address)
        return cls(len(workers), index, _timeout_s(env.get(TIMEOUT_ENV)))

    def partitions(self, partitions: int) -> list[int]:
        """The stream partitions this worker reads: every `count`-th, from its index.

        >>> Workers(2, 1).partitions(4)
        [1, 3]
        """
        if partitions < self.count:
            raise ConfigError(
                f"ingest.partitions: {partitions}, but {self.count} learner workers each "
                f"need a partition of their own; set it to {self.count} or a multiple"
            )
        return list(range(self.index, partitions, self.count))


def check_replicas(counts: list[int]) -> None:
    """Every worker must train on as many devices (replicas) as the others: the strategy
    splits each batch as if they did, so a worker with more would train rows twice.

    >>> check_replicas([1, 1])
    >>> check_replicas([2, 1])
    Traceback (most recent call last):
    ...
    streamlearn.errors.ConfigError: learner.distribute: 'multi_worker' needs the same number \
of devices on every worker, but worker 0 trains on 2 and worker 1 on 1; make every host \
use as many GPUs (CUDA_VISIBLE_DEVICES) or none
    """
    for index, count in enumerate(counts):
        if count != counts[0]:
            raise ConfigError(
                f"{_WHERE} needs the same number of devices on every worker, but worker 0 "
                f"trains on {counts[0]} and worker {index} on {count}; make every host use "
                "as many GPUs (CUDA_VISIBLE_DEVICES) or none"
            )


def refuse_public(address: str) -> None:
    """A `ConfigError` when `address` (host:port) is, or resolves to, a public address; a
    name that does not resolve yet (a pod not started) passes.

    >>> refuse_public("10.0.0.7:2222"), refuse_public("localhost:2222")
    (None, None)
    >>> refuse_public("8.8.8.8:2222")
    Traceback (most recent call last):
    ...
    streamlearn.errors.ConfigError: learner.distribute: 'multi_worker': TF_CONFIG names \
8.8.8.8:2222, a public address (8.8.8.8); TensorFlow's gRPC server runs any op for whoever \
reaches it, so the workers must talk over a private network or a VPN (docs/scaling.md); \
STREAMLEARN_TF_PUBLIC_ADDRESSES=allow if a firewall already keeps everyone else out
    """
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        found = cast(set[str], {info[4][0] for info in infos})  # IP addresses: str
    except (OSError, UnicodeError):
        return
    public = sorted(ip for ip in found if ipaddress.ip_address(ip.split("%")[0]).is_global)
    if public:
        raise ConfigError(
            f"{_WHERE}: TF_CONFIG names {address}, a public address ({', '.join(public)}); "
            "TensorFlow's gRPC server runs any op for whoever reaches it, so the workers must "
            "talk over a private network or a VPN (docs/scaling.md); "
            f"{PUBLIC_ENV}=allow if a firewall already keeps everyone else out"
        )


def _timeout_s(raw: str | None) -> float:
    """`STREAMLEARN_COLLECTIVE_TIMEOUT_S`, or its default.

    >>> _timeout_s(None), _timeout_s("2.5")
    (60.0, 2.5)
    >>> _timeout_s("0")
    Traceback (most recent call last):
    ...
    streamlearn.errors.ConfigError: STREAMLEARN_COLLECTIVE_TIMEOUT_S must be a number of \
seconds > 0, got '0'
    """
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return value
