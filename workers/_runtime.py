"""What every worker process does before and around its loop."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import threading

import paho.mqtt.client as paho
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from streamlearn import health
from streamlearn.config import ModelConfig, Settings, load_config, load_settings
from streamlearn.names import Names
from streamlearn.redis_client import connect


def parse_args(role: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"streamlearn {role}")
    parser.add_argument(
        "--config", help="streamlearn.toml (default: ./streamlearn.toml or the demo)"
    )
    parser.add_argument("--model", help="model name (default: the only model)")
    parser.add_argument("--instance", help="stable id of this process (default: hostname)")
    if role == "learner":
        parser.add_argument("--variant", help="one of the model's variants (default: base)")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def load(role: str, args: argparse.Namespace) -> tuple[ModelConfig, Settings, Names, str]:
    """Logging, config and settings; raises ConfigError naming the bad field."""
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=f"%(asctime)s {role}[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    model = load_config(args.config).model(args.model)
    settings = load_settings()
    names = Names(model.name, settings.topic_prefix, settings.key_prefix)
    return model, settings, names, f"sl-{role}-{model.name}-{instance_of(args, settings)}"


def instance_of(args: argparse.Namespace, settings: Settings) -> str:
    """This process's stable id: --instance, STREAMLEARN_INSTANCE, else the hostname."""
    return args.instance or settings.instance or socket.gethostname()


def redis_client(settings: Settings) -> redis.Redis:
    retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=5)
    return connect(
        settings.redis,
        retry=retry,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
    )


def stop_on_signals() -> threading.Event:
    """The first SIGTERM/SIGINT lets the loop finish its batch; a second one stops hard."""
    stop = threading.Event()

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
