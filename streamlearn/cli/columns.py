"""What a CSV file says about a model, for `streamlearn init`: its columns as named inputs
(numbers, or text of few values: categorical) or, when a column's name cannot be a field's,
positional inputs as before; the label column's values pick the task. The file is read
once, in bounded memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

from streamlearn.cli.light import csv_rows, shown
from streamlearn.config.app import ModelConfig
from streamlearn.config.inputs import MAX_CATEGORY_CHARS, MAX_DEPTH
from streamlearn.errors import ConfigError

TARGET = "y"  # the label column when none is named: `y`, else the last column
MAX_CLASSES = 50  # integer labels 0..N-1 with N up to this are classes; more: regression
MAX_CATEGORY_VALUES = 32  # a text column of at most this many values is categorical
# A named sample's own fields (config/app.py refuses them as input names).
PAYLOAD_FIELDS = frozenset({"id", "ids", "key", "seq", "reply_to", "samples"})


@dataclass(frozen=True)
class Inferred:
    """What the data says about the model: named inputs (`fields`) unless a column's name
    cannot be a field's (`positional` says why), then `inputs = N` as before."""

    features: list[str]
    target: str
    rows: int
    task: str
    classes: int | None
    reason: str
    categorical: dict[str, tuple[str, ...]] = dataclass_field(default_factory=dict)
    positional: str | None = None  # why the inputs are not named, or None

    @property
    def named(self) -> bool:
        return self.positional is None

    def model(self, name: str) -> ModelConfig:
        """The model the written file must mean: the defaults plus what was inferred."""
        if not self.named:
            return ModelConfig(
                name=name, inputs=len(self.features), task=self.task, classes=self.classes
            )
        return ModelConfig(
            name=name,
            inputs=self.features,
            target=self.target,
            categorical=self.categorical,
            task=self.task,
            classes=self.classes,
        )


@dataclass
class _Column:
    """One feature column as read: how many cells were numbers, its text values (first
    seen first, at most `MAX_CATEGORY_VALUES` + 1 kept), and the first text cell's line."""

    numbers: int = 0
    empty: int = 0
    texts: dict[str, None] = dataclass_field(default_factory=dict)
    first_text: tuple[int, str] | None = None


def infer(path: Path, target: str | None = None, task: str | None = None) -> Inferred:
    """Read the CSV once: a feature is numeric, or text of few distinct values (categorical,
    with named inputs); the target's values pick the task.

    Integer labels exactly {0, 1} are binary; integer labels 0..N-1 with 3 <= N <= 50 are
    multiclass with N classes (ingest accepts nothing else for either); anything else is
    regression. Memory stays bounded: at most `MAX_CLASSES` + 1 distinct labels, and
    `MAX_CATEGORY_VALUES` + 1 values of a text column, are kept.
    """
    reader = csv_rows(str(path))
    _, header = next(reader)
    target = target or (TARGET if TARGET in header else header[-1])
    if target not in header:
        raise ConfigError(f"--target {target!r}: no such column; the columns: {header}")
    if len(header) < 2:
        raise ConfigError(f"{path}: only the target column {target!r}, no feature columns")
    labels: set[float] = set()
    integral = True
    rows = 0
    columns = {name: _Column() for name in header if name != target}
    for line, row in reader:
        for name, cell in zip(header, row, strict=True):
            if name == target:
                value = _number(cell, path, line, name, True)
                if integral:
                    integral = value.is_integer() and value >= 0
                    if len(labels) <= MAX_CLASSES:
                        labels.add(value)
            else:
                _read_cell(columns[name], cell, f"{path}:{line}: column {name!r}", line)
        rows += 1
    if rows == 0:
        raise ConfigError(f"{path}: no data rows under the header")
    features = [h for h in header if h != target]
    positional = _unnamed(features, target)
    categorical = _categories(path, columns, positional)
    inferred_task, classes, reason = _task(labels, integral)
    if task is not None and task != inferred_task:
        if task != "regression":  # ingest takes nothing else as labels of a classifier
            raise ConfigError(
                f"--task {task}: the values of {target!r} are not labels of one ({reason}); "
                f"binary needs 0/1, multiclass class indices 0..N-1 with N <= {MAX_CLASSES}"
            )
        inferred_task, classes, reason = task, None, f"--task {task} ({reason})"
    return Inferred(features, target, rows, inferred_task, classes, reason, categorical, positional)


def _read_cell(column: _Column, cell: str, where: str, line: int) -> None:
    text = cell.strip()
    if not text:
        column.empty += 1
        return
    try:
        value = float(text)
    except ValueError:
        if column.first_text is None:
            column.first_text = (line, cell)
        if len(column.texts) <= MAX_CATEGORY_VALUES:
            column.texts.setdefault(text, None)
        return
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{where} is not a finite number, got {shown(cell)}")
    column.numbers += 1


def _unnamed(features: list[str], target: str) -> str | None:
    """Why these columns cannot be named inputs (their names are not field names), or None."""
    names = [*features, target]
    for name in names:
        why = _not_a_field(name)
        if why:
            return f"column {name!r} cannot be a field name: {why}"
    for name in names:
        if any(other.startswith(name + ".") for other in names):
            return f"column {name!r} is both a value and the object of a dotted name"
    return None


def _not_a_field(name: str) -> str | None:
    """Why a column is not taken as a field name, or None: a `FieldName` (config/inputs.py)
    without whitespace, which `FieldName` admits inside a segment for Sparkplug's metrics.

    >>> [_not_a_field(n) for n in ("ENERGY.Power", "mean radius", "a..b")]
    [None, 'it has whitespace', 'it has an empty dotted segment']
    """
    if re.search(r"\s", name):
        return "it has whitespace"
    if not name or any(not part for part in name.split(".")):
        return "it has an empty dotted segment"
    if len(name) > 256:
        return "it is longer than 256 characters"
    if name.count(".") >= MAX_DEPTH:
        return f"it is nested more than {MAX_DEPTH} levels deep"
    if name in PAYLOAD_FIELDS:
        return "it is one of the payload's own fields"
    return None


def _categories(
    path: Path, columns: dict[str, _Column], positional: str | None
) -> dict[str, tuple[str, ...]]:
    """The text columns as categorical inputs; a column of numbers and text, a text column
    of too many values, or any text with positional inputs, is an error naming the cell."""
    found: dict[str, tuple[str, ...]] = {}
    for name, column in columns.items():
        if column.first_text is None:
            if positional and column.empty:
                raise ConfigError(
                    f"{path}: feature column {name!r} has empty cells; positional inputs "
                    f"need every value ({positional})"
                )
            continue
        line, cell = column.first_text
        where = f"{path}:{line}: feature column {name!r} is not numeric, got {shown(cell)}"
        if positional:
            raise ConfigError(f"{where} (positional inputs are numbers: {positional})")
        if column.numbers:
            raise ConfigError(
                f"{where}, while {column.numbers} of its cells are numbers "
                f"(a column is all numbers, or text of few values; encode or drop {name!r})"
            )
        if len(column.texts) > MAX_CATEGORY_VALUES:
            raise ConfigError(
                f"{where}, and it has more than {MAX_CATEGORY_VALUES} distinct values: not a "
                f"category (encode or drop {name!r})"
            )
        too_long = [v for v in column.texts if len(v) > MAX_CATEGORY_CHARS]
        if too_long:
            raise ConfigError(
                f"{path}: column {name!r}: a value over {MAX_CATEGORY_CHARS} characters, "
                f"got {too_long[0][:40]!r}..."
            )
        found[name] = tuple(column.texts)
    return found


def _number(cell: str, path: Path, line: int, column: str, is_target: bool) -> float:
    try:
        value = float(cell)
    except ValueError:
        role = "target" if is_target else "feature"
        raise ConfigError(
            f"{path}:{line}: {role} column {column!r} is not numeric, got {shown(cell)} "
            f"(every column must be a number; encode or drop {column!r})"
        ) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(
            f"{path}:{line}: column {column!r} is not a finite number, got {shown(cell)}"
        )
    return value


def _task(labels: set[float], integral: bool) -> tuple[str, int | None, str]:
    if integral and labels <= {0.0, 1.0}:
        return "binary", None, "target values are 0 and 1"
    top = int(max(labels)) + 1 if labels else 0
    if integral and len(labels) <= MAX_CLASSES and top <= MAX_CLASSES:
        return "multiclass", top, f"target values are class indices in 0..{top - 1}"
    why = "not all integers >= 0" if not integral else f"more than {MAX_CLASSES} classes"
    return "regression", None, f"target values are numbers, {why}"
