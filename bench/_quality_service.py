"""The quality benchmark through the real service, as a user sees it.

Per stream, the three roles run as real worker processes (`workers.learner`, `.ingest`,
`.actor`) on the run's mosquitto and redis-server, with a config that gives the stream's
shape (inputs, task, classes) and nothing else: default settings (unless overrides are
given). A worker serves one model, so each stream gets its own processes, on its own
topic and key prefix, stopped before the next stream starts.

For each message of the stream, through the public client (`streamlearn.Client`): a
prediction request for its rows goes to the actor, its
reply is awaited, then the labelled samples are published. The service's staleness (a
sample is learned, published as a new version and loaded by the actor only some time after
it was sent) counts. Messages leave at `rate` samples/s (0: each as soon as the previous
one is done, as fast as the service answers).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bench._quality_learners import Outcome, model_table, scores
from bench._quality_streams import Stream
from bench._stack import Proc, Stack
from streamlearn.contract.names import Names

ROLES = ("learner", "ingest", "actor")
# from the learner's status, into the JSON
LEARNER_FIGURES = (
    "samples_seen",
    "step",
    "version",
    "replay_steps",
    "replay_per_sample",
    "drifts_detected",
    "last_drift_at_sample",
    "dead_lettered",
)


def config_toml(stream: Stream, overrides: dict | None = None) -> str:
    """What a user would write for this stream: its shape (and `overrides`, if any).

    Values are written as JSON, which is TOML for numbers, strings, booleans and lists.
    """
    table = model_table(stream, overrides)
    lines = [f"[models.{stream.name}]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for section, fields in table.items():
        if isinstance(fields, dict):
            lines.append(f"[models.{stream.name}.{section}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


class Service:
    """One stream's worker processes, started together, stopped by `close`."""

    def __init__(
        self,
        stack: Stack,
        stream: Stream,
        workdir: Path,
        overrides: dict | None = None,
        tag: str = "",
    ) -> None:
        """`tag`: keys and topics of this run's own, for another run of the same stream
        that must start from nothing (`bench.coldstart`)."""
        self.stream = stream
        prefix = "-".join(filter(None, ("quality", stream.name, tag)))
        self.names = Names(stream.name, prefix, prefix)
        config = workdir / f"{prefix}.toml"
        config.write_text(config_toml(stream, overrides))
        env = stack.env(prefix)
        self.procs = [
            Proc([sys.executable, "-m", f"streamlearn.{role}.worker", "--config", str(config)], env)
            for role in ROLES
        ]
        self.stack = stack

    def wait_ready(self) -> None:
        for proc in self.procs:
            proc.wait_for(" ready", timeout_s=120)

    def run(self, message_size: int, rate: float, timeout_s: float = 5.0) -> Outcome:
        """Request, await the reply, publish the labels; a message every `message_size /
        rate` seconds (`streamlearn.client.replay.replay`, as `streamlearn evaluate` does). A
        missing or error reply counts as no answer (wrong, or 0.0)."""
        from streamlearn import Client
        from streamlearn.client.replay import replay

        s = self.stream
        url = f"mqtt://{self.stack.host}:{self.stack.mqtt_port}"
        client = Client(url, topic_prefix=self.names.topic_prefix)
        try:
            result = replay(
                client, s.name, s.task, s.x, s.y, batch=message_size, rate=rate, timeout_s=timeout_s
            )
            learner = self._learner_status(client, s.n)
        finally:
            client.close()
        per_message = [int(v) for v in result.versions[::message_size]]  # -1: no answer
        versions = [v for v in per_message if v >= 0]
        info = {
            "requests": -(-s.n // message_size),
            "answered": len(versions),
            "errors": result.errors,
            "first_version": versions[0] if versions else None,
            "last_version": versions[-1] if versions else None,
            "versions_served": len(set(versions)),
            "versions": per_message,  # the version that answered each message, -1: none
            "learner": {k: learner.get(k) for k in LEARNER_FIGURES} if learner else None,
        }
        return Outcome(scores(s, result.predicted), result.seconds, info)

    def _learner_status(self, client: object, n: int, timeout_s: float = 5.0) -> dict | None:
        """The learner's retained status once it has seen all `n` samples (or the last one
        within `timeout_s`): what its replay and drift detector did."""
        import queue

        statuses: queue.Queue[bytes] = queue.Queue(maxsize=100)  # one a second: never full

        def on_status(_c: object, _u: object, msg: object) -> None:
            statuses.put_nowait(msg.payload)

        topic = self.names.status_topic
        client.mqtt.message_callback_add(topic, on_status)
        client.mqtt.subscribe(topic, qos=1)
        status, deadline = None, time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                status = json.loads(statuses.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            if status.get("samples_seen", 0) >= n:
                break
        client.mqtt.unsubscribe(topic)
        return status

    def close(self) -> None:
        """SIGTERM to every role at once (the stream is done: nothing left to finish)."""
        for proc in self.procs:
            if proc.proc.poll() is None:
                proc.proc.terminate()
        for proc in self.procs:
            proc.stop()
