"""What one device's flood of a shared pool costs another device (issue 62), on real ingest
and actor processes, a broker and Redis of their own.

Each pool that has a share per sender gets a row: a control device's outcome beside the
flood, and beside the same traffic without it (the control run), in one sitting, each run
on topics and keys of its own. The check: the control device's outcome is the same in both.

- kept predictions (`labels.max_pending` 1,000, a client's share 5%): alice asks 5
  requests with ids; mallory asks 1,100 (control run: without ids); alice's 5 labels join.
- de-duplication ids (`ingest.max_dedup_ids` 1,000): alice sends a sample with an id;
  mallory sends 2,400 samples with new ids, one message of 600 a write (control run: without
  ids); alice's sample sent again is dropped as a duplicate.
- windows at `ingest.max_devices` (20): 3 idle devices, then 17 quiet ones; three gateways
  send 10 messages of 5 new keys each (control run: steps of their own keys); the quiet
  devices keep their windows.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench._stack import Proc, Stack, broker
from streamlearn import Client
from streamlearn.config import parse_config
from streamlearn.contract.names import Names, sample_id
from streamlearn.stack import embedded
from streamlearn.store.entries import unpack

TOML = """
[models.k]
inputs = 2
task = "regression"
architecture = "linear"

[models.k.labels]
max_pending = 1000

[models.k.ingest]
max_dedup_ids = 1000

[models.w]
inputs = ["t"]
task = "regression"
architecture = "lstm"
window = 2
hidden = [4]

[models.w.ingest]
max_devices = 20
max_keys_per_message = 10
max_keys_per_sender = 5

[models.w.gateways]
gw-a = ["*"]
gw-b = ["*"]
gw-c = ["*"]
"""
WAIT_S = 60.0


@dataclass
class Run:
    """One run's workers and clients, on topics and keys of a prefix of its own."""

    stack: Stack
    prefix: str
    config: Path
    store: redis.Redis
    procs: list[Proc] = field(default_factory=list)
    clients: list[Client] = field(default_factory=list)

    def names(self, model: str) -> Names:
        return Names(model, self.prefix, self.prefix)

    def client(self, client_id: str | None = None) -> Client:
        url = f"mqtt://{self.stack.host}:{self.stack.mqtt_port}"
        client = Client(url, topic_prefix=self.prefix, client_id=client_id)
        self.clients.append(client)
        return client

    def start(self, role: str, model: str) -> int:
        """A worker of `model`, ready; its metrics port."""
        port = embedded.free_port()
        env = {**self.stack.env(self.prefix), "STREAMLEARN_METRICS_PORT": str(port)}
        argv = [f"workers.{role}", "--config", str(self.config), "--model", model]
        proc = Proc([sys.executable, "-m", *argv], env)
        self.procs.append(proc)
        proc.wait_for(" ready")
        return port

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for proc in self.procs:
            proc.stop(kill=True)


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench.hostile shares: no {what} within {WAIT_S:g} s")
        time.sleep(0.05)


def _metric(port: int, name: str) -> float:
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name}\{{[^}}]*\}} ([-+0-9.eE]+)$", page, re.M)
    return float(found[1]) if found else 0.0


def _kept(run: Run, flood: bool) -> str:
    """alice's 5 kept predictions, mallory's 1,100 requests (with ids: the flood)."""
    from bench._serve_actors import publish_weights

    names = run.names("k")
    publish_weights(run.stack, parse_config(tomllib.loads(TOML)).model("k"), names, 1)
    run.start("actor", "k")
    run.start("ingest", "k")
    alice, mallory = run.client("alice"), run.client("mallory")
    for i in range(5):
        alice.request("k", {"x": [0.5, 1.0], "id": f"a-{i}"}, 30)
    for start in range(0, 1100, 100):
        futures = [
            mallory.request_async(
                "k", {"x": [0.5, 1.0], "id": f"m-{i:04d}"} if flood else {"x": [0.5, 1.0]}, 30
            )
            for i in range(start, start + 100)
        ]
        for future in futures:
            future.result()
    for i in range(5):
        alice.label("k", f"a-{i}", 1.0)
    joined = lambda: int(run.store.get(names.ingest_count_key) or 0)  # noqa: E731
    _until(lambda: joined() + run.store.xlen(names.deadletter_key) >= 5, "verdict on the labels")
    return f"{joined()}/5 labels joined"


def _dedup(run: Run, flood: bool) -> str:
    """alice's sample with an id, mallory's 2,400 (with new ids: the flood), alice's again."""
    names = run.names("k")
    run.start("ingest", "k")
    alice, mallory = run.client("alice"), run.client("mallory")
    count = lambda: int(run.store.get(names.ingest_count_key) or 0)  # noqa: E731
    alice.publish("k", [1.0, 2.0], 1.0, id="a-1")
    _until(lambda: count() == 1, "alice's sample")
    for m in range(4):  # one message a write: each write may turn a generation over
        ids = [f"m{m}-{i}" for i in range(600)] if flood else None
        mallory.publish_many("k", [[0.5, float(i)] for i in range(600)], [0.0] * 600, ids)
        _until(lambda m=m: count() == 601 + 600 * m, f"mallory's message {m}")
    alice.publish("k", [1.0, 2.0], 1.0, id="a-1")  # sent again,
    alice.publish("k", [3.0, 4.0], 1.0)  # then one more to know the first was judged
    _until(lambda: count() >= 2402, "alice's next sample")
    mine = sample_id("alice", "a-1")
    stored = [i for _, f in run.store.xrange(names.samples_key) for i in unpack(f, (2,)).ids or ()]
    kept = stored.count(mine)
    return "dropped as a duplicate" if kept == 1 else f"appended {kept} times"


def _windows(run: Run, flood: bool) -> str:
    """3 idle devices, 17 quiet ones, 3 gateways' 150 new keys (own steps: the control)."""
    names = run.names("w")
    port = run.start("ingest", "w")
    shared = run.client()  # bare `samples`: any key
    window = lambda key: run.store.exists(names.key(f"window:{key}"))  # noqa: E731
    idle, quiet = [f"idle-{i}" for i in range(3)], [f"q{i}" for i in range(17)]
    for group in (idle, quiet[:10], quiet[10:]):  # oldest first: the idle ones the idlest
        shared.publish_payloads("w", [{"samples": [{"key": d, "seq": 1, "t": 1.0} for d in group]}])
        _until(lambda group=group: all(window(d) for d in group), "the devices' windows")
    sent = _metric(port, "streamlearn_ingest_messages_total")
    for gw in ("gw-a", "gw-b", "gw-c"):
        gateway = run.client(gw)
        for m in range(10):
            steps = [
                {"key": f"{gw}-{m}-{i}", "seq": 1, "t": 9.0}
                if flood
                else {"seq": m * 5 + i, "t": 9.0}
                for i in range(5)
            ]
            gateway.publish_payloads("w", [{"samples": steps}])
    _until(
        lambda: _metric(port, "streamlearn_ingest_messages_total") >= sent + 30, "the 30 messages"
    )
    return f"{sum(1 for d in quiet if window(d))}/17 quiet windows kept"


POOLS: list[tuple[str, Callable[[Run, bool], str]]] = [
    ("kept predictions (1,100 ids against 1,000)", _kept),
    ("de-duplication ids (2,400 against 1,000)", _dedup),
    ("windows at max_devices (150 new keys against 20)", _windows),
]


def measure() -> tuple[list[dict], dict[str, bool], dict[str, float]]:
    """One row per pool: the control device's outcome, control run and flood."""
    rows: list[dict] = []
    checks: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="bench-shares-") as tmp:
        work = Path(tmp)
        config = work / "streamlearn.toml"
        config.write_text(TOML)
        with (
            broker(work / "mqtt", nagle=False) as mqtt,
            embedded.redis_server(workdir=work / "redis") as store,
        ):
            stack = Stack(mqtt.port, store.port, work)
            client = redis.Redis.from_url(stack.redis_url)
            for n, (pool, measured) in enumerate(POOLS):
                seen = {}
                for flood in (False, True):
                    run = Run(stack, f"shares{n}{'f' if flood else 'c'}", config, client)
                    try:
                        seen[flood] = measured(run, flood)
                    finally:
                        run.close()
                    rows.append(
                        {
                            "pool": pool,
                            "run": "flood" if flood else "control",
                            "control device": seen[flood],
                        }
                    )
                checks[f"{pool}: the control device's outcome as without the flood"] = (
                    seen[True] == seen[False]
                )
            client.close()
    return rows, checks, {}
