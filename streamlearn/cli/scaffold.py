"""`streamlearn init FILE.csv`: a `streamlearn.toml` for a CSV file, every setting spelled out.

The shape of the model (inputs, task, classes) is read from the data; every other setting is
written with its default and a comment taken from the pydantic field it sets, so the file
never goes out of date with the config and a user reads what they may change right where
they change it. The target is the column `publish` reads labels from: `y` when the file has
one, else the last column.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import textwrap
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from streamlearn.config import DEFAULT_CONFIG, ModelConfig, parse_config
from streamlearn.errors import ConfigError

TARGET = "y"  # the column `streamlearn publish FILE.csv` takes as the label
MAX_CLASSES = 50  # integer labels 0..N-1 with N up to this are classes; more: regression
_NESTED = ("ingest", "learner", "actor", "promotion")
_LATER = (*_NESTED, "variants")  # not plain keys of the model's table
# Fields whose pydantic definition carries no description.
_NOTES = {
    "task": "what the model predicts",
    "architecture": "the built-in network",
    "hidden": "units of each hidden layer (mlp; lstm/conv1d: per layer too)",
    "learning_rate": "the optimizer's base learning rate",
    "optimizer": "the optimizer the learner trains with",
    "max_samples_per_message": "samples in one MQTT message, at most",
    "publish_every_steps": "publish weights to the actors after this many train steps",
    "publish_every_ms": "or after this many milliseconds, whichever comes first",
    "status_every_ms": "the learner's retained status refresh",
}
# Examples for settings that are unset by default (TOML has no null): written commented out.
_EXAMPLES = {
    "classes": 3,
    "window": 16,
    "factory": "mypackage.models:build",
    "buckets": [16, 64, 256],
    "checkpoint_dir": "checkpoints",
    "clip_norm": 1.0,
    "tensorboard_dir": "tensorboard",
}


@dataclass(frozen=True)
class Inferred:
    """What the data says about the model."""

    features: list[str]
    target: str
    rows: int
    task: str
    classes: int | None
    reason: str


def infer(path: Path, target: str | None = None, task: str | None = None) -> Inferred:
    """Read the CSV once: every feature must be numeric; the target's values pick the task.

    Integer labels exactly {0, 1} are binary; integer labels 0..N-1 with 3 <= N <= 50 are
    multiclass with N classes (ingest accepts nothing else for either); anything else is
    regression. Memory stays bounded: at most `MAX_CLASSES` + 1 distinct labels are kept.
    """
    try:
        f = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise ConfigError(f"{path}: no header row (the first line names the columns)")
        if len(set(header)) != len(header):
            raise ConfigError(f"{path}: duplicate column names in the header: {header}")
        target = target or (TARGET if TARGET in header else header[-1])
        if target not in header:
            raise ConfigError(f"--target {target!r}: no such column; the columns: {header}")
        if len(header) < 2:
            raise ConfigError(f"{path}: only the target column {target!r}, no feature columns")
        labels: set[float] = set()
        integral = True
        rows = 0
        try:
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise ConfigError(
                        f"{path}:{line}: {len(row)} values, the header names {len(header)}"
                    )
                for name, cell in zip(header, row, strict=True):
                    value = _number(cell, path, line, name, name == target)
                    if name == target and integral:
                        integral = value.is_integer() and value >= 0
                        if len(labels) <= MAX_CLASSES:
                            labels.add(value)
                rows += 1
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None
    if rows == 0:
        raise ConfigError(f"{path}: no data rows under the header")
    features = [h for h in header if h != target]
    inferred_task, classes, reason = _task(labels, integral)
    if task is not None and task != inferred_task:
        if task != "regression":  # ingest takes nothing else as labels of a classifier
            raise ConfigError(
                f"--task {task}: the values of {target!r} are not labels of one ({reason}); "
                f"binary needs 0/1, multiclass class indices 0..N-1 with N <= {MAX_CLASSES}"
            )
        inferred_task, classes, reason = task, None, f"--task {task} ({reason})"
    return Inferred(features, target, rows, inferred_task, classes, reason)


def _number(cell: str, path: Path, line: int, column: str, is_target: bool) -> float:
    try:
        value = float(cell)
    except ValueError:
        role = "target" if is_target else "feature"
        raise ConfigError(
            f"{path}:{line}: {role} column {column!r} is not numeric, got {cell!r} "
            f"(every column must be a number; encode or drop {column!r})"
        ) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{path}:{line}: column {column!r} is not finite, got {cell!r}")
    return value


def _task(labels: set[float], integral: bool) -> tuple[str, int | None, str]:
    if integral and labels <= {0.0, 1.0}:
        return "binary", None, "target values are 0 and 1"
    top = int(max(labels)) + 1 if labels else 0
    if integral and len(labels) <= MAX_CLASSES and top <= MAX_CLASSES:
        return "multiclass", top, f"target values are class indices in 0..{top - 1}"
    why = "not all integers >= 0" if not integral else f"more than {MAX_CLASSES} classes"
    return "regression", None, f"target values are numbers, {why}"


def model_name(path: Path) -> str:
    """The file's stem made a valid model name: `my data.csv` -> `my_data`."""
    name = re.sub(r"[^A-Za-z0-9_\-]+", "_", path.stem).strip("_")[:64]
    return name or "model"


def render(name: str, data: Inferred, source: str) -> str:
    """The TOML text: inferred fields, then every default with its comment."""
    model = ModelConfig(name=name, inputs=len(data.features), task=data.task, classes=data.classes)
    out = [
        f"# streamlearn.toml written by `streamlearn init {source}`.",
        f"# {data.rows} rows; target column {data.target!r}: {data.reason}.",
        *_wrap(f"features, in the order x lists them: {', '.join(data.features)}", "# "),
        "# Every setting below is at its default unless marked inferred; change any of them.",
        "# Unset settings are shown commented out with an example value.",
        "",
        f"[models.{name}]",
    ]
    inferred = {"inputs", "task", "classes"}
    for key, field in ModelConfig.model_fields.items():
        if key == "name" or key in _LATER:
            continue
        note = "inferred from the data" if key in inferred else None
        out += _setting(key, field, getattr(model, key), note)
    for section in _NESTED:
        policy = getattr(model, section)
        out += ["", f"# {_doc(type(policy))}", f"[models.{name}.{section}]"]
        for key, field in type(policy).model_fields.items():
            out += _setting(key, field, getattr(policy, key))
    out += [
        "",
        f"# {ModelConfig.model_fields['variants'].description}; e.g.:",
        f"# [models.{name}.variants.wide]",
        "# hidden = [256, 256]",
        "# learning_rate = 0.003",
        "",
    ]
    return "\n".join(out)


def _setting(key: str, field: FieldInfo, value: Any, note: str | None = None) -> list[str]:
    comment = field.description or _NOTES.get(key, key.replace("_", " "))
    comment = f"{comment} [{_kind(field)}]" + (f" ({note})" if note else "")
    lines = _wrap(comment, "# ")
    if value is None:
        example = _EXAMPLES.get(key)
        shown = _toml(example) if example is not None else "..."
        return [*lines, f"# {key} = {shown}  (unset)"]
    if field.annotation is float:
        value = float(value)
    return [*lines, f"{key} = {_toml(value)}"]


def _kind(field: FieldInfo) -> str:
    """The field's type and bounds, read from its annotation: `int, >= 1`."""
    args = typing.get_args(field.annotation)
    literals = [a for a in args if isinstance(a, str)]
    if typing.get_origin(field.annotation) is typing.Literal:
        kind = "one of " + ", ".join(literals)
    else:
        kind = re.sub(r"\b(typing\.|NoneType)", "", str(field.annotation).replace("<class '", ""))
        kind = kind.replace("'>", "").replace(" | None", "") or "value"
        kind = re.sub(r"tuple\[(\w+), \.\.\.\]", r"list of \1", kind)
    ops = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    for meta in field.metadata:
        for attr, op in ops.items():
            if getattr(meta, attr, None) is not None:
                kind += f", {op} {getattr(meta, attr)}"
    return kind


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _wrap(text: str, prefix: str) -> list[str]:
    return textwrap.wrap(text, 96, initial_indent=prefix, subsequent_indent=prefix) or [prefix]


def _doc(cls: type[BaseModel]) -> str:
    return (cls.__doc__ or cls.__name__).strip().splitlines()[0]


def write(args: argparse.Namespace) -> int:
    """The `init` command."""
    path = Path(args.file)
    output = Path(args.output or DEFAULT_CONFIG)
    if output.exists() and not args.force:
        raise ConfigError(f"{output} exists; pass --force to overwrite it, or --output PATH")
    name = args.name or model_name(path)
    if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", name):
        raise ConfigError(f"--name must be 1-64 of A-Z a-z 0-9 _ -, got {name!r}")
    data = infer(path, args.target, args.task)
    text = render(name, data, path.name)
    # The file must mean exactly the defaults plus what was inferred: check before writing.
    expected = ModelConfig(
        name=name, inputs=len(data.features), task=data.task, classes=data.classes
    )
    if parse_config(tomllib.loads(text), str(output)).model(name) != expected:
        raise AssertionError("streamlearn init wrote a config that differs from the defaults")
    output.write_text(text, encoding="utf-8")
    print(
        f"wrote {output}: model {name!r}, {len(data.features)} inputs, task {data.task}"
        + (f" with {data.classes} classes" if data.classes else "")
        + f" ({data.reason}; target column {data.target!r}, {data.rows} rows)"
    )
    if data.target != TARGET:
        print(
            f"note: `streamlearn publish {path.name}` reads the label from a column named "
            f"{TARGET!r}: rename column {data.target!r} to {TARGET!r} in the file"
        )
    config = (
        "" if output.name == DEFAULT_CONFIG and output.parent == Path() else f" --config {output}"
    )
    print(
        f"next: streamlearn up{config}   then: streamlearn publish {shlex.quote(str(path))}{config}"
    )
    return 0


def add_command(sub: Any) -> None:
    """Register `init` on the `streamlearn` command's subparsers."""
    p = sub.add_parser(
        "init",
        help="write a streamlearn.toml for a CSV file",
        description="Write a streamlearn.toml for FILE.csv: inputs, task and classes from the "
        "data, every other setting at its default with a comment.",
    )
    p.add_argument("file", help="CSV with a header row; numeric columns only")
    p.add_argument("--target", help=f"the label column (default: {TARGET!r}, else the last)")
    p.add_argument("--task", choices=["regression", "binary", "multiclass"], help="override")
    p.add_argument("--name", help="the model's name (default: from the file name)")
    p.add_argument("--output", help=f"where to write (default: ./{DEFAULT_CONFIG})")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=write)
