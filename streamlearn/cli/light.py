"""What `publish` and `predict` need with the base install alone (paho, no pydantic or
numpy): the model's name and input width read from `streamlearn.toml` with `tomllib`,
samples from CSV and NDJSON files with the standard library, a progress bar, and the
broker the client resolves itself (`STREAMLEARN_MQTT_URL`, else the run file of
`streamlearn up`, else the local default). With the service installed the commands
validate the whole config instead (`streamlearn.config`).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamlearn.config.defaults import DEMO_TOML, config_path
from streamlearn.errors import ConfigError
from streamlearn.stack import runfile

MQTT_URL_ENV = "STREAMLEARN_MQTT_URL"


@dataclass(frozen=True)
class LightModel:
    """A model as the client tools see it: its name, and its inputs per sample."""

    name: str
    inputs: int


def model(config: str | None, name: str | None) -> LightModel:
    """The named model (or the only one) of `config`, `$STREAMLEARN_CONFIG` or
    `./streamlearn.toml`; the demo model when there is none."""
    path = config_path(config)
    try:
        text = DEMO_TOML if path is None else Path(path).read_text(encoding="utf-8")
        models = tomllib.loads(text).get("models", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    if name is None and len(models) != 1:
        raise ConfigError(f"several models configured, pick one with --model: {list(models)}")
    name = name or next(iter(models))
    if name not in models:
        raise ConfigError(f"no model {name!r} in the config; known: {list(models)}")
    inputs = models[name].get("inputs")
    width = len(inputs) if isinstance(inputs, list) else inputs
    if not isinstance(width, int) or width < 1:
        raise ConfigError(f"models.{name}.inputs: a count or a list of names, got {inputs!r}")
    return LightModel(name, width)


def which_stack() -> str:
    """The line the client tools print on stderr: which broker, and why that one."""
    given = os.environ.get(MQTT_URL_ENV) or None
    stack = None if given else runfile.live()
    url = given or (stack.mqtt_url if stack else "mqtt://localhost:1883")
    return runfile.describe(given, stack, url, MQTT_URL_ENV)


def csv_samples(path: str, target: str = "y") -> Iterator[tuple[list[float], float]]:
    """(x, y) per row of a CSV file with a header: y is the `target` column, x the others
    in file order. A cell that is not a number is a ConfigError naming its line."""
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        if rows.fieldnames is None or target not in rows.fieldnames:
            raise ConfigError(f"{path}: no {target!r} column in the header {rows.fieldnames}")
        for row in rows:
            try:
                y = float(row.pop(target))
                x = [float(v) for v in row.values()]
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{path}:{rows.line_num}: every cell must be a number, got {row!r}"
                ) from None
            yield x, y


def file_payloads(path: str, batch: int) -> Iterator[tuple[int, bytes]]:
    """(samples, payload) per message for `publish FILE`: NDJSON lines as they are, CSV
    rows `batch` to a columnar message."""
    with open(path, newline="") as f:
        if path.endswith((".ndjson", ".jsonl")):
            for line in f:
                if line.strip():
                    doc = json.loads(line)
                    yield len(doc["y"]) if isinstance(doc.get("y"), list) else 1, line.encode()
            return
    xs: list[list[float]] = []
    ys: list[float] = []
    for x, y in csv_samples(path):
        xs.append(x)
        ys.append(y)
        if len(ys) == batch:
            yield len(ys), json.dumps({"x": xs, "y": ys}).encode()
            xs, ys = [], []
    if ys:
        yield len(ys), json.dumps({"x": xs, "y": ys}).encode()


class ProgressBar:
    """A one-line progress bar with samples/s on stderr; a plain line every 5 s off a terminal."""

    def __init__(self, total: int | None, width: int = 30) -> None:
        self.total = total
        self.width = width
        self.tty = sys.stderr.isatty()
        self.start = self.last = time.monotonic()

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < (0.2 if self.tty else 5.0):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        if self.total:
            filled = int(self.width * min(done / self.total, 1.0))
            bar = f"[{'#' * filled}{'.' * (self.width - filled)}] {done:,}/{self.total:,}"
        else:
            bar = f"{done:,} samples"
        line = f"{bar}  {rate:,.0f} samples/s"
        print(
            f"\r{line}" if self.tty else line,
            end="" if self.tty else "\n",
            file=sys.stderr,
            flush=True,
        )

    def finish(self, done: int) -> None:
        self.update(done, force=True)
        if self.tty:
            print(file=sys.stderr)
