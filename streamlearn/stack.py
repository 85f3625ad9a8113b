"""`streamlearn up`: every role of every model as child processes on one machine.

With no broker or Redis configured it starts its own `mosquitto` and `redis-server`
(the embedded default). Children that die are restarted; Ctrl-C or SIGTERM stops the
roles first, then the servers it started.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from streamlearn import embedded
from streamlearn.config import AppConfig, Settings
from streamlearn.names import Names

log = logging.getLogger(__name__)


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = field(default=0.0)


class Stack:
    def __init__(
        self,
        cfg: AppConfig,
        settings: Settings,
        *,
        config_path: str | None = None,
        data_dir: str | None = None,
        demo_rate: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.settings = settings
        self.config_args = ["--config", config_path] if config_path else []
        self.data_dir = data_dir
        self.demo_rate = demo_rate
        self.servers: list[embedded.ServerProcess] = []
        self.children: list[Child] = []
        self.env = dict(os.environ)
        self._stop = threading.Event()

    def run(self, quiet: bool = False) -> int:
        previous = {
            s: signal.signal(s, lambda *_: self._stop.set())
            for s in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self._start_servers()
            self._start_children()
            watcher = None if quiet else StatusLine(self.cfg, self.env)
            while not self._stop.wait(0.5):
                self._supervise()
                if watcher:
                    watcher.maybe_print()
            return 0
        finally:
            self._shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start_servers(self) -> None:
        data = self.data_dir
        if not self.settings.mqtt_url:
            broker = embedded.mosquitto(
                workdir=data and os.path.join(data, "mosquitto"), persistence=bool(data)
            ).start()
            self.servers.append(broker)
            self.env["STREAMLEARN_MQTT_URL"] = f"mqtt://127.0.0.1:{broker.port}"
        if not self.settings.redis_url:
            extra = ("--appendonly", "yes") if data else ()
            store = embedded.redis_server(
                None, data and os.path.join(data, "redis"), *extra
            ).start()
            self.servers.append(store)
            self.env["STREAMLEARN_REDIS_URL"] = f"redis://127.0.0.1:{store.port}/0"
        _say(
            f"broker {self.env['STREAMLEARN_MQTT_URL']}  redis {self.env['STREAMLEARN_REDIS_URL']}"
        )

    def _start_children(self) -> None:
        py = [sys.executable, "-m"]
        for name, model in self.cfg.models.items():
            common = [*self.config_args, "--model", name]
            roles = [
                ("learner", 1),
                ("ingest", model.ingest.replicas),
                ("actor", model.actor.replicas),
            ]
            for role, count in roles:
                for i in range(count):
                    argv = [*py, f"workers.{role}", *common, "--instance", f"{i}"]
                    self.children.append(Child(f"{role}:{name}:{i}", argv))
            if self.demo_rate:
                argv = [
                    *py,
                    "streamlearn.cli",
                    "publish",
                    "--demo",
                    *common,
                    "--rate",
                    str(self.demo_rate),
                    "--batch",
                    "10",
                ]
                self.children.append(Child(f"demo:{name}", argv))
        for child in self.children:
            self._spawn(child)
        _say(
            f"started {len(self.children)} processes for models {list(self.cfg.models)}; "
            "Ctrl-C stops everything"
        )

    def _spawn(self, child: Child) -> None:
        child.proc = subprocess.Popen(
            child.argv, env=self.env, start_new_session=True, preexec_fn=embedded.die_with_parent
        )
        child.started_at = time.monotonic()

    def _supervise(self) -> None:
        for child in self.children:
            if child.proc is None or child.proc.poll() is None:
                continue
            delay = min(30.0, 2.0**child.restarts)
            if time.monotonic() - child.started_at < delay:
                continue
            child.restarts += 1
            _say(f"{child.name} exited with {child.proc.returncode}; restart #{child.restarts}")
            self._spawn(child)

    def _shutdown(self) -> None:
        _say("stopping...")
        running = [c.proc for c in self.children if c.proc and c.proc.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + 15
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for server in reversed(self.servers):
            server.stop()
        _say("stopped")


class StatusLine:
    """Prints one line per model every few seconds from its retained status topic."""

    def __init__(self, cfg: AppConfig, env: dict[str, str], every_s: float = 3.0) -> None:
        from streamlearn import mqtt

        self.every_s = every_s
        self.latest: dict[str, dict] = {}
        self.last = time.monotonic()
        prefix = env.get("STREAMLEARN_TOPIC_PREFIX", "streamlearn")
        topics = [(Names(m, prefix).status_topic, 0) for m in cfg.models]
        try:
            self.client = mqtt.connect(
                env["STREAMLEARN_MQTT_URL"],
                subscriptions=topics,
                on_message=self._on_message,
                ca_file=env.get("STREAMLEARN_MQTT_CA_FILE"),
            )
        except Exception as exc:  # the summary line is a nicety, never a reason to fail
            log.warning("no live summary: %s", exc)
            self.client = None

    def _on_message(self, _c: object, _u: object, msg: object) -> None:
        try:
            status = json.loads(msg.payload)  # type: ignore[attr-defined]
            self.latest[status["model"]] = status
        except (ValueError, KeyError, TypeError):
            pass

    def maybe_print(self) -> None:
        if time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        for name, s in sorted(self.latest.items()):
            loss = s.get("online_loss")
            metric = s.get("online_metric")
            _say(
                f"{name}: version {s['version']}  step {s['step']}  samples {s['samples_seen']}  "
                f"loss {loss if loss is None else round(loss, 4)}  "
                f"{s.get('metric') or 'metric'} {metric if metric is None else round(metric, 4)}"
            )


def read_status(cfg: AppConfig, settings: Settings, wait_s: float = 1.5) -> list[dict]:
    """Per model: its retained learner status plus the queue figures from Redis."""
    import redis

    from streamlearn import mqtt
    from streamlearn.queue import GROUP

    prefix, keys = settings.topic_prefix, settings.key_prefix
    statuses: dict[str, dict] = {}

    def on_message(_c: object, _u: object, msg: object) -> None:
        try:
            doc = json.loads(msg.payload)  # type: ignore[attr-defined]
            statuses[doc["model"]] = doc
        except (ValueError, KeyError, TypeError):
            pass

    client = mqtt.connect(
        settings.mqtt,
        on_message=on_message,
        ca_file=settings.mqtt_ca_file,
        subscriptions=[(Names(m, prefix).status_topic, 0) for m in cfg.models],
    )
    time.sleep(wait_s)
    mqtt.close(client)
    r = redis.Redis.from_url(settings.redis)
    rows = []
    for name in cfg.models:
        names = Names(name, prefix, keys)
        pending = 0
        if r.exists(names.samples_key):
            try:
                pending = r.xpending(names.samples_key, GROUP)["pending"]
            except redis.ResponseError:
                pending = 0
        rows.append(
            {
                "model": name,
                **statuses.get(name, {}),
                "queue_length": r.xlen(names.samples_key),
                "pending": pending,
                "deadletters": r.xlen(names.deadletter_key),
                "latest_version": int(r.get(names.latest_key) or 0),
            }
        )
    return rows


def _say(message: str) -> None:
    print(f"[streamlearn] {message}", flush=True)
