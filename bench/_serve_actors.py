"""The serving bench's actors: each variant a `streamlearn actor` process of its own, on its
own topics, with its weights published and its start timed (`Served`); and the helpers
the other serving benches share (a variant's config, request payloads, a probe).
"""

from __future__ import annotations

import json
import sys
import time
import tomllib

import numpy as np

from bench._stack import Proc, Stack, rss_mb
from streamlearn.actor.loop import Actor
from streamlearn.actor.runtimes import Servable
from streamlearn.config import DEMO_TOML, ModelConfig, parse_config
from streamlearn.contract.names import Names
from streamlearn.errors import StreamlearnError
from streamlearn.stack import embedded
from streamlearn.stack.demo import DemoStream
from streamlearn.store.redis_client import connect

# label, actor table overrides
VARIANTS = {
    "batching": ("dynamic batching (library)", ""),
    "tensorflow": ("dynamic batching, TensorFlow runtime", 'runtime = "tensorflow"'),
    "per_request": ("same forward pass, one request each", "max_batch = 1"),
    "predict": ("model.predict per request", 'max_batch = 1\nruntime = "tensorflow"'),
}
QUICK_VARIANTS = ("batching", "per_request")


class PredictEachActor(Actor):
    """Baseline: Keras' `model.predict` on each request, as a first attempt would."""

    def predict(self, x: np.ndarray, model: Servable | None = None) -> np.ndarray:
        return (model or self.model).model.predict(x, verbose=0)  # type: ignore[attr-defined]


def actor_config(actor_table: str) -> ModelConfig:
    toml = DEMO_TOML + (f"\n[models.demo.actor]\n{actor_table}\n" if actor_table else "")
    return parse_config(tomllib.loads(toml)).model("demo")


def request_payloads(cfg: ModelConfig, n: int = 256) -> list[bytes]:
    x = DemoStream(cfg, seed=1).sample(n).x
    return [json.dumps({"x": row.tolist()}).encode() for row in x]


def publish_weights(stack: Stack, cfg: ModelConfig, names: Names, version: int) -> None:
    from streamlearn.nn import networks
    from streamlearn.online import codec, tensors
    from streamlearn.store.weights import WeightsStore

    arrays = tensors.get_arrays(networks.build_model(cfg))
    store = WeightsStore(connect(stack.redis_url), names)
    store.publish(codec.encode(arrays), after=version - 1)


def wait_serving(stack: Stack, names: Names, timeout_s: float = 60) -> None:
    client, topic = stack.client(names), names.predict_topic
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            client.send(client.request(topic, b'{"x": [0,0,0,0,0,0,0,0,0]}', b"probe"))
            time.sleep(0.2)
            if any(b'"version"' in r.payload for r in client.replies):
                return
        raise RuntimeError("the actor never served a prediction")
    finally:
        client.close()


def drained(stack: Stack, names: Names, timeout_s: float = 2.0) -> bool:
    """Whether an actor answers a probe within `timeout_s`: it has worked off the requests
    a closed loop left in flight (a probe queues behind them)."""
    try:
        wait_serving(stack, names, timeout_s)
    except RuntimeError:
        return False
    return True


class Served:
    """One actor variant: its process, topics and how to restart it."""

    def __init__(self, stack: Stack, variant: str) -> None:
        """Publishes its weights and starts its process; `wait` for it to serve."""
        self.variant, self.label = variant, VARIANTS[variant][0]
        self.stack, self.prefix = stack, f"serve-{variant}"
        self.names = Names("demo", self.prefix, self.prefix)
        table = VARIANTS[variant][1]
        config = stack.workdir / f"{variant}.toml"
        # The library's actor opens its HTTP and gRPC doors too: every door in one process.
        self.http_port = embedded.free_port() if variant == "batching" else None
        self.grpc_port = embedded.free_port() if variant == "batching" else None
        self.metrics_port = embedded.free_port() if variant == "batching" else None
        door = (
            f"http_port = {self.http_port}\ngrpc_port = {self.grpc_port}" if self.http_port else ""
        )
        actor = "\n".join(t for t in (table, door) if t)
        config.write_text(DEMO_TOML + (f"\n[models.demo.actor]\n{actor}\n" if actor else ""))
        self.argv = ["bench.serve", "--serve", variant, "--config", str(config)]
        publish_weights(stack, actor_config(table), self.names, 1)
        self.start: dict[str, float] = {}  # the first launch's: seconds to ready and reply
        self.proc = self._launch()

    def _launch(self) -> Proc:
        env = self.stack.env(self.prefix)
        if self.metrics_port is not None:
            env["STREAMLEARN_METRICS_PORT"] = str(self.metrics_port)
        self.launched = time.monotonic()
        return Proc([sys.executable, "-m", *self.argv], env)

    def wait(self) -> None:
        try:
            self.proc.wait_for(" ready")
            ready = time.monotonic() - self.launched
            wait_serving(self.stack, self.names)
            if not self.start:
                replied = time.monotonic() - self.launched
                self.start = {"ready_s": round(ready, 2), "first_reply_s": round(replied, 2)}
                self.start["idle_rss_mb"] = rss_mb(self.proc.proc.pid)
        except (RuntimeError, StreamlearnError) as exc:
            raise RuntimeError(f"{self.label}: {exc}\n{self.proc.output[-2000:]}") from None

    def rss(self) -> float:
        return rss_mb(self.proc.proc.pid)

    def restart(self) -> None:
        self.proc.stop(kill=True)  # without its backlog
        self.proc = self._launch()
        self.wait()
