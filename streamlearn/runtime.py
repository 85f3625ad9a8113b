"""What every worker process does before and around its loop."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import socket
import threading
import time

import paho.mqtt.client as paho
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from streamlearn.config import cpus, environment
from streamlearn.config.app import ModelConfig
from streamlearn.config.loading import load_config
from streamlearn.config.settings import Settings, load_settings
from streamlearn.contract.names import Names
from streamlearn.errors import ConfigError
from streamlearn.observe import health
from streamlearn.store.redis_client import connect


def parse_args(role: str, argv: list[str] | None) -> argparse.Namespace:
    return role_parser(role).parse_args(argv)


def role_parser(role: str) -> argparse.ArgumentParser:
    """The command line of `streamlearn {role}` (the commands reference reads it too)."""
    parser = argparse.ArgumentParser(prog=f"streamlearn {role}")
    parser.add_argument(
        "--config", help="streamlearn.toml (default: ./streamlearn.toml or the demo)"
    )
    parser.add_argument("--model", help="model name (default: the only model)")
    parser.add_argument("--instance", help="stable id of this process (default: hostname)")
    if role == "learner":
        parser.add_argument("--variant", help="one of the model's variants (default: base)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return parser


LOG_FORMATS = ("text", "json")


class JsonLines(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, role, model, logger, message,
    and the traceback as `exc` when there is one (`STREAMLEARN_LOG_FORMAT=json`)."""

    def __init__(self, role: str, model: str) -> None:
        super().__init__()
        self.role, self.model = role, model

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "role": self.role,
            "model": self.model,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(role: str, model: str, verbose: bool = False) -> None:
    """The worker's log on stderr: `STREAMLEARN_LOG_LEVEL` (INFO; DEBUG with -v) and
    `STREAMLEARN_LOG_FORMAT` (`text`, or `json`: `JsonLines`); a bad value is a
    ConfigError that names the variable."""
    level = os.environ.get(environment.LOG_LEVEL, "DEBUG" if verbose else "INFO").upper()
    if level not in logging.getLevelNamesMapping():
        raise ConfigError(f"STREAMLEARN_LOG_LEVEL: {level!r} is not a level (DEBUG, INFO, ...)")
    kind = os.environ.get(environment.LOG_FORMAT, "text").lower()
    if kind not in LOG_FORMATS:
        raise ConfigError(f"STREAMLEARN_LOG_FORMAT: {kind!r} is not one of {LOG_FORMATS}")
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonLines(role, model)
        if kind == "json"
        else logging.Formatter(
            f"%(asctime)s {role}[%(process)d] %(levelname)s %(name)s: %(message)s"
        )
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)


def load(role: str, args: argparse.Namespace) -> tuple[ModelConfig, Settings, Names, str]:
    """Config, logging and settings; raises ConfigError naming the bad field."""
    model = load_config(args.config).model(args.model)
    configure_logging(role, model.name, args.verbose)
    settings = load_settings()
    names = Names(model.name, settings.topic_prefix, settings.key_prefix)
    return model, settings, names, f"sl-{role}-{model.name}-{instance_of(args, settings)}"


def instance_of(args: argparse.Namespace, settings: Settings) -> str:
    """This process's stable id: --instance, STREAMLEARN_INSTANCE, else the hostname."""
    return args.instance or settings.instance or socket.gethostname()


def usable_cpus() -> cpus.Cpus:
    """The CPUs this worker may use (`streamlearn.config.cpus`: its affinity within its
    cgroup's quota), said in its log; its thread pools are sized to them."""
    found = cpus.usable_cpus()
    logging.getLogger("streamlearn").info("%d usable CPUs (%s)", found.usable, found.source)
    return found


def redis_client(settings: Settings) -> redis.Redis:
    retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=5)
    return connect(
        settings.redis,
        retry=retry,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
    )


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """The first SIGTERM/SIGINT lets the loop finish its batch (sets `stop`, a new event by
    default); a second one stops hard."""
    stop = stop or threading.Event()

    def handler(signum: int, _frame: object) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        logging.getLogger("streamlearn").info("signal %d: finishing the current batch", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def connected_health(role: str, client: paho.Client, settings: Settings | None) -> health.Health:
    """A `Health` ready while `client` is connected to the broker and, unless `settings`
    is None, Redis answers; the role adds its own checks."""
    h = health.Health(role)
    h.add("broker", health.broker_connected(client))
    if settings is not None:
        h.add("redis", health.redis_reachable(health.quick_redis(settings.redis)))
    return h


def settle() -> None:
    """Before the loop: move what start-up allocated (imports, config, connections, a
    model) out of the cyclic collector's reach. Otherwise each full collection walks it
    all again, and a loop that makes objects per message (paho makes several) triggers
    one every few thousand messages: it cut ingest's backlog rate in half (bench.ingest).
    """
    gc.collect()
    gc.freeze()
