"""A local Redis Cluster on free ports, for the cluster tests and `bench/scaling.py`."""

from __future__ import annotations

import os
import subprocess
import time

from streamlearn.errors import StreamlearnError
from streamlearn.stack.embedded import ServerProcess, _workdir, free_port, redis_server


class LocalCluster:
    """A local Redis Cluster: `masters` shards with `replicas` each, on free ports; a
    context manager. For the cluster tests and `bench/scaling.py`."""

    def __init__(
        self, masters: int = 3, replicas: int = 1, workdir: str | os.PathLike[str] | None = None
    ) -> None:
        self.workdir = _workdir(workdir, "redis-cluster")
        self.masters, self.replicas = masters, replicas
        self.nodes: list[ServerProcess] = []
        self._draw()

    def _draw(self) -> None:
        """The nodes on distinct free ports: a node's port, and its cluster bus's, must
        differ from every other node's."""
        ports: list[int] = []
        while len(ports) < 2 * self.masters * (1 + self.replicas):
            if (port := free_port()) not in ports:
                ports.append(port)
        self.nodes = []
        for port, bus in zip(ports[::2], ports[1::2], strict=True):
            options = ["--cluster-enabled", "yes", "--cluster-port", str(bus)]
            options += ["--cluster-node-timeout", "1000", "--cluster-config-file", "nodes.conf"]
            self.nodes.append(redis_server(port, self.workdir / str(port), *options))

    @property
    def url(self) -> str:
        """The URL of one node (the first that is up): all a client needs."""
        return f"redis://127.0.0.1:{self.live()[0].port}/0"

    def live(self) -> list[ServerProcess]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def start(self, timeout_s: float = 30, tries: int = 3) -> LocalCluster:
        for attempt in range(tries):  # a port drawn free can be taken before a node binds it
            try:
                for node in self.nodes:
                    node.start()
                break
            except StreamlearnError:
                self.stop()
                if attempt == tries - 1:
                    raise
                self._draw()
        try:
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            create = ["redis-cli", "--cluster", "create", *addresses]
            create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            done = subprocess.run(create, capture_output=True, text=True, timeout=timeout_s)
            if done.returncode != 0:
                raise StreamlearnError(f"redis-cli --cluster create failed: {done.stdout[-2000:]}")
            self.wait_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout_s: float = 30) -> None:
        """Until every live node reports the cluster whole (every slot served) and every
        replica is in sync with its master (else it could not take over)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self._ok(n) for n in self.live()):
                return
            time.sleep(0.1)
        raise StreamlearnError(f"the local Redis Cluster was not ok within {timeout_s} s")

    def cli(self, node: ServerProcess, *args: str) -> str:
        argv = ["redis-cli", "-p", str(node.port), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout

    def master_of(self, key: str) -> ServerProcess | None:
        """The node that serves `key`'s hash slot now (None: none, during a failover)."""
        node = self.live()[0]
        slot = int(self.cli(node, "cluster", "keyslot", key))
        for line in self.cli(node, "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" in fields[2] and "fail" not in fields[2]:
                port = int(fields[1].split(":")[1].split("@")[0])
                for span in fields[8:]:
                    low, _, high = span.partition("-")
                    if int(low) <= slot <= int(high or low):
                        return next(n for n in self.nodes if n.port == port)
        return None

    def _ok(self, node: ServerProcess) -> bool:
        info = self.cli(node, "cluster", "info")
        if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
            return False
        replication = self.cli(node, "info", "replication")
        return "role:master" in replication or "master_link_status:up" in replication

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
