"""`streamlearn up`: every role of every model as child processes on one machine.

With no broker or Redis configured it starts its own `mosquitto` and `redis-server`
(the embedded default). Each child writes to its own log file in a run directory
(`streamlearn.stack.runlog`); the terminal shows one live line per model. Children that die are
restarted; Ctrl-C or SIGTERM stops the roles first, then the servers it started.
While it runs, a run file (`streamlearn.config.runfile`) tells the client tools in other shells
where its servers listen. The servers it starts listen on 127.0.0.1 and ask for passwords
made for the run, which only that file (0600) and the children's environment hold.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from streamlearn.actor import runtimes
from streamlearn.config import environment, runfile
from streamlearn.config.app import AppConfig
from streamlearn.config.settings import Settings
from streamlearn.config.tfconfig import Workers
from streamlearn.errors import ConfigError
from streamlearn.observe.monitor import StatusMonitor
from streamlearn.observe.status_text import fmt_number
from streamlearn.stack import embedded
from streamlearn.stack.dashboard import Dashboard
from streamlearn.stack.runlog import QUIET_ENV, Board, ChildLog

log = logging.getLogger(__name__)

DEFAULT_DASHBOARD_PORT = 8321
# The account of up's own broker, its password made per run. Each demo feed has its own
# (`demo-MODEL`): a client with a username takes it as its client id, and a user's client,
# or another feed, would otherwise take over the feed's connection.
MQTT_USER = "streamlearn"


@dataclass
class Child:
    name: str
    argv: list[str]
    log: ChildLog
    metrics_port: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # over the stack's
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = field(default=0.0)


class Stack:
    def __init__(
        self,
        cfg: AppConfig,
        settings: Settings,
        *,
        run_dir: Path,
        config_path: str | None = None,
        data_dir: str | None = None,
        demo_rate: float | None = None,
        dashboard_port: int | None = DEFAULT_DASHBOARD_PORT,
        metrics_port: int | None = None,
        board: Board | None = None,
    ) -> None:
        """`dashboard_port` None: no dashboard; `metrics_port` None: no /metrics, else the
        first child's port (the next ones count up; 0: free ports)."""
        self.cfg = cfg
        self.settings = settings
        self.run_dir = run_dir
        self.config_path = config_path
        self.config_args = ["--config", config_path] if config_path else []
        self.data_dir = data_dir
        self.demo_rate = demo_rate
        self.dashboard_port = dashboard_port
        self.metrics_port = metrics_port
        self.board = board or Board()
        self.servers: list[embedded.ServerProcess] = []
        self.children: list[Child] = []
        # The children's settings come from here; each gets its own metrics port below.
        self.env = {k: v for k, v in os.environ.items() if k != environment.METRICS_PORT}
        for model in cfg.models.values():  # a multi-host learner: this host runs one worker
            if model.learner.distribute == "multi_worker":
                Workers.from_env(self.env).partitions(model.ingest.partitions)  # or a ConfigError
        self.env.update(QUIET_ENV)
        # The prefixes these settings name (perhaps another stack's, from its run file).
        self.env[environment.TOPIC_PREFIX] = settings.topic_prefix
        self.env[environment.KEY_PREFIX] = settings.key_prefix
        # This run's bearer token: the dashboard, the workers' /metrics and (unless the user
        # gave it one) the HTTP door ask for it; another local user cannot read the run file.
        self.token = secrets.token_urlsafe(32)
        self.env[environment.METRICS_TOKEN] = self.token
        if not {environment.HTTP_TOKEN, environment.HTTP_TOKEN_FILE} & set(self.env):
            self.env[environment.HTTP_TOKEN] = self.token
        self.demo_urls: dict[str, str] = {}  # model: its demo feed's account on our broker
        self._stop = threading.Event()

    def run(self, quiet: bool = False) -> int:
        previous = {
            s: signal.signal(s, lambda *_: self._stop.set())
            for s in (signal.SIGINT, signal.SIGTERM)
        }
        monitor = dashboard = None
        record = None
        try:
            self.board.say(f"logs in {self.run_dir}")
            self._start_servers()
            record = self._record()
            self._start_children()
            settings = self.settings.model_copy(
                update={
                    "mqtt_url": self.env[environment.MQTT_URL],
                    "redis_url": self.env[environment.REDIS_URL],
                }
            )
            if self.dashboard_port is not None:
                dashboard = self._open_dashboard(settings)
            monitor = StatusMonitor(self.cfg, settings)
            lines = None if quiet else LiveLines(monitor)
            self.board.say("Ctrl-C stops everything")
            while not self._stop.wait(0.5):
                self._supervise()
                if lines:
                    self.board.show(lines.render())
            return 0
        finally:
            if record is not None:  # first: no client should find a stack that is stopping
                runfile.remove(record.pid)
            self.board.freeze()
            for part in (dashboard, monitor):
                if part is not None:
                    part.close()
            self._shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start_servers(self) -> None:
        """The servers no URL names, each with a password made for this run: a local user
        who cannot read the run file (0600) can neither connect to the broker nor to Redis.
        The URLs that carry the passwords reach the children through their environment.

        With a data dir they keep what they hold across a restart: Redis appends every
        write to its AOF (fsync every second), the broker saves its sessions and queues
        every second, so a hard stop loses about the last second. Without one nothing is
        kept: every sample not yet learned and every published version go when `up` stops.
        """
        data = self.data_dir
        if not self.settings.mqtt_url:
            feeds = [f"demo-{name}" for name in self.cfg.models] if self.demo_rate else []
            accounts = {user: secrets.token_hex(24) for user in [MQTT_USER, *feeds]}
            broker = embedded.mosquitto(
                workdir=os.path.join(data, "mosquitto") if data else self.run_dir / "mosquitto",
                persistence=bool(data),
                accounts=accounts,
            ).start()
            self.servers.append(broker)
            urls = {u: f"mqtt://{u}:{pw}@127.0.0.1:{broker.port}" for u, pw in accounts.items()}
            self.env[environment.MQTT_URL] = urls.pop(MQTT_USER)
            self.demo_urls = {user.removeprefix("demo-"): url for user, url in urls.items()}
        if not self.settings.redis_url:
            password = secrets.token_hex(24)
            extra = ("--appendonly", "yes", "--appendfsync", "everysec") if data else ()
            workdir = os.path.join(data, "redis") if data else self.run_dir / "redis"
            store = embedded.redis_server(None, workdir, *extra, password=password).start()
            self.servers.append(store)
            self.env[environment.REDIS_URL] = f"redis://:{password}@127.0.0.1:{store.port}/0"
        mqtt_url, redis_url = self.env[environment.MQTT_URL], self.env[environment.REDIS_URL]
        self.board.say(f"broker {runfile.redact(mqtt_url)}  redis {runfile.redact(redis_url)}")

    def _record(self) -> runfile.StackRecord:
        """Write the run file: where this stack listens, for the client tools."""
        record = runfile.new_record(
            self.env[environment.MQTT_URL],
            self.env[environment.REDIS_URL],
            self.settings.topic_prefix,
            self.settings.key_prefix,
            self.config_path,
            self.token,
        )
        self.board.say(f"stack recorded in {runfile.write(record)} (its token: `token`)")
        return record

    def _start_children(self) -> None:
        self.children = self._plan()
        workers = [c for c in self.children if not c.name.startswith("demo:")]
        if self.metrics_port is not None:
            for child, port in zip(
                workers, metrics_ports(self.metrics_port, len(workers)), strict=True
            ):
                child.metrics_port = port
        for child in self.children:
            self._spawn(child)
        self.board.say(f"started {len(self.children)} processes for models {list(self.cfg.models)}")
        if self.metrics_port is not None:
            self.board.say(
                "metrics ports (/metrics, with the run file's token as a bearer token): "
                + "  ".join(f"{c.name}={c.metrics_port}" for c in workers)
            )

    def _plan(self) -> list[Child]:
        """Every child process: the roles of each model (workers quieted), the demo feed."""
        quiet = [sys.executable, "-m", "streamlearn.stack.runlog"]
        keras = [*quiet, "--tensorflow"]  # the learner imports it anyway
        planned: list[Child] = []

        def add(name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
            path = self.run_dir / f"{name.replace(':', '-').replace('/', '-')}.log"
            planned.append(Child(name, argv, ChildLog(path), env=env or {}))

        for name, model in self.cfg.models.items():
            common = [*self.config_args, "--model", name]
            roles = [
                ("learner", 1),
                ("ingest", model.ingest.replicas),
                ("actor", model.actor.replicas),
            ]
            served_by_keras = runtimes.choose(model)[0] == "tensorflow"
            for role, count in roles:
                # ingest, and an actor serving with numpy, load no TensorFlow to quiet
                uses_keras = role == "learner" or (role == "actor" and served_by_keras)
                launcher = keras if uses_keras else quiet
                for i in range(count):
                    add(
                        f"{role}:{name}:{i}",
                        [*launcher, f"streamlearn.{role}.worker", *common, "--instance", f"{i}"],
                    )
            for variant in model.variants:  # each variant learns in its own process
                argv = [
                    *keras,
                    "streamlearn.learner.worker",
                    *common,
                    "--variant",
                    variant,
                    "--instance",
                    "0",
                ]
                add(f"learner:{name}:{variant}", argv)
            if self.demo_rate:
                rate = ["--rate", str(self.demo_rate), "--batch", "10"]
                add(
                    f"demo:{name}",
                    [sys.executable, "-m", "streamlearn", "publish", "--demo", *common, *rate],
                    {environment.MQTT_URL: self.demo_urls[name]} if self.demo_urls else None,
                )
        return planned

    def _spawn(self, child: Child) -> None:
        env = {**self.env, **child.env}
        if child.metrics_port is not None:
            env[environment.METRICS_PORT] = str(child.metrics_port)
        with child.log.open() as out:
            child.proc = subprocess.Popen(
                child.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=embedded.die_with_parent,
            )
        child.started_at = time.monotonic()

    def _supervise(self) -> None:
        for child in self.children:
            child.log.bound()
            if child.proc is None or child.proc.poll() is None:
                continue
            delay = min(30.0, 2.0**child.restarts)
            if time.monotonic() - child.started_at < delay:
                continue
            child.restarts += 1
            last = " | ".join(child.log.tail(1))
            self.board.say(
                f"{child.name} exited with {child.proc.returncode}; restart #{child.restarts} "
                f"(log {child.log.path}{': ' + last if last else ''})"
            )
            self._spawn(child)

    def _shutdown(self) -> None:
        self.board.say("stopping...")
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
        self.board.say("stopped")

    def _open_dashboard(self, settings: Settings) -> Dashboard:
        """On `dashboard_port`; if that is the default and taken, on any free port."""
        try:
            dashboard = Dashboard(
                self.cfg, settings, port=self.dashboard_port or 0, token=self.token
            )
        except OSError as exc:
            if self.dashboard_port != DEFAULT_DASHBOARD_PORT:
                raise ConfigError(
                    f"dashboard port {self.dashboard_port} is not free ({exc.strerror}); "
                    "pick another with --dashboard-port, or --no-dashboard"
                ) from None
            dashboard = Dashboard(self.cfg, settings, port=0, token=self.token)
        self.board.say(f"dashboard {dashboard.start()}")
        return dashboard


class LiveLines:
    """One line per model: samples/s, samples seen, online metric, version, actors.

    Short enough for an 80-column terminal (the loss is in `streamlearn status`).
    """

    def __init__(self, monitor: StatusMonitor) -> None:
        self.monitor = monitor
        self.seen: dict[str, tuple[float, int]] = {}
        self.rates: dict[str, float] = {}

    def render(self) -> list[str]:
        now = time.monotonic()
        return [self._line(name, now) for name in self.monitor.names]

    def _line(self, name: str, now: float) -> str:
        s = self.monitor.learner(name)
        actors = len(self.monitor.actor_list(name))
        if not s:
            return f"{name}: waiting for the learner's first status  actors {actors}"
        seen = int(s.get("samples_seen") or 0)
        prev_t, prev_n = self.seen.get(name, (now, seen))
        if now - prev_t >= 2.0 or name not in self.seen:  # a rate over 2 s, not per redraw
            if now > prev_t:
                self.rates[name] = (seen - prev_n) / (now - prev_t)
            self.seen[name] = (now, seen)
        return (
            f"{name}: {self.rates.get(name, 0.0):,.0f} samples/s  {seen:,} seen  "
            f"{s.get('metric') or 'metric'} {fmt_number(s.get('online_metric'), 3)}  "
            f"version {s.get('version', 0)}  actors {actors}"
            + (f"  champion {s['champion']}" if s.get("champion") else "")
        )


def metrics_ports(base: int, count: int) -> list[int]:
    """base, base+1, ... for `count` children; base 0: that many distinct free ports."""
    if base == 0:
        with ExitStack() as held:  # keep each bound until all are picked: no repeats
            socks = [held.enter_context(socket.socket()) for _ in range(count)]
            for sock in socks:
                sock.bind(("127.0.0.1", 0))
            return [sock.getsockname()[1] for sock in socks]
    if not 1 <= base <= 65535 - count + 1:
        raise ConfigError(
            f"metrics port base must leave room for {count} ports (1..{65536 - count}), got {base}"
        )
    return list(range(base, base + count))
