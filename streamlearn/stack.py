"""`streamlearn up`: every role of every model as child processes on one machine.

With no broker or Redis configured it starts its own `mosquitto` and `redis-server`
(the embedded default). Children that die are restarted; Ctrl-C or SIGTERM stops the
roles first, then the servers it started.
"""

from __future__ import annotations

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
from streamlearn.dashboard import Dashboard
from streamlearn.monitor import StatusMonitor, fmt_number

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
        dashboard_port: int | None = 8321,
    ) -> None:
        self.cfg = cfg
        self.settings = settings
        self.config_args = ["--config", config_path] if config_path else []
        self.data_dir = data_dir
        self.demo_rate = demo_rate
        self.dashboard_port = dashboard_port
        self.servers: list[embedded.ServerProcess] = []
        self.children: list[Child] = []
        self.env = dict(os.environ)
        self._stop = threading.Event()

    def run(self, quiet: bool = False) -> int:
        previous = {
            s: signal.signal(s, lambda *_: self._stop.set())
            for s in (signal.SIGINT, signal.SIGTERM)
        }
        monitor = dashboard = None
        try:
            self._start_servers()
            self._start_children()
            settings = self.settings.model_copy(
                update={
                    "mqtt_url": self.env["STREAMLEARN_MQTT_URL"],
                    "redis_url": self.env["STREAMLEARN_REDIS_URL"],
                }
            )
            if self.dashboard_port is not None:
                dashboard = _open_dashboard(self.cfg, settings, self.dashboard_port)
            monitor = StatusMonitor(self.cfg, settings)
            watcher = None if quiet else StatusLine(monitor)
            while not self._stop.wait(0.5):
                self._supervise()
                if watcher:
                    watcher.maybe_print()
            return 0
        finally:
            for part in (dashboard, monitor):
                if part is not None:
                    part.close()
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
            for variant in model.variants:  # each challenger learns in its own process
                argv = [*py, "workers.learner", *common, "--variant", variant, "--instance", "0"]
                self.children.append(Child(f"learner:{name}:{variant}", argv))
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
    """Prints one line per model every few seconds: samples/s, loss, metric, version."""

    def __init__(self, monitor: StatusMonitor, every_s: float = 3.0) -> None:
        self.monitor = monitor
        self.every_s = every_s
        self.last = time.monotonic()
        self.seen: dict[str, tuple[float, int]] = {}

    def maybe_print(self) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        for name in self.monitor.names:
            s = self.monitor.learner(name)
            if not s:
                continue
            prev_t, prev_n = self.seen.get(name, (now, s["samples_seen"]))
            self.seen[name] = (now, s["samples_seen"])
            rate = (s["samples_seen"] - prev_n) / (now - prev_t) if now > prev_t else 0.0
            _say(
                f"{name}: {rate:,.0f} samples/s  version {s['version']}  "
                f"loss {fmt_number(s.get('online_loss'))}  "
                f"{s.get('metric') or 'metric'} {fmt_number(s.get('online_metric'))}  "
                f"samples {s['samples_seen']:,}"
                + (f"  champion {s['champion']}" if s.get("champion") else "")
            )


def _open_dashboard(cfg: AppConfig, settings: Settings, port: int) -> Dashboard:
    try:
        dashboard = Dashboard(cfg, settings, port=port)
    except OSError:  # the port is taken: any free one will do
        dashboard = Dashboard(cfg, settings, port=0)
    _say(f"dashboard {dashboard.start()}")
    return dashboard


def _say(message: str) -> None:
    print(f"[streamlearn] {message}", flush=True)
