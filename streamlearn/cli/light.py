"""What `publish` and `predict` read with the base install alone (paho, no pydantic or
numpy): samples from CSV and NDJSON files with the standard library, a request's x from
the command line, and a progress bar. Which model and broker they talk to:
`streamlearn.cli.target`.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamlearn.cli.target import LightModel
from streamlearn.errors import ConfigError

MAX_SAMPLES = 2_000_000  # a file is held in memory: ~16 MB per input column at the cap


def csv_rows(path: str) -> Iterator[tuple[int, list[str]]]:
    """The header (line 1), then (line, cells) per row of a CSV file. The file is UTF-8 (a
    BOM, as Excel writes, is not a name), its header distinct names without control
    characters, every row as long as the header: anything else is a ConfigError naming the
    file and the line."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            try:
                header = check_header(path, next(reader, None))
                yield 1, header
                for row in reader:
                    if row and len(row) != len(header):
                        raise ConfigError(
                            f"{path}:{reader.line_num}: {len(row)} values, "
                            f"the header names {len(header)}"
                        )
                    if row:
                        yield reader.line_num, row
            except (UnicodeDecodeError, csv.Error) as exc:
                raise unreadable(path, exc, reader.line_num) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def check_header(path: str | Path, header: list[str] | None) -> list[str]:
    """The header row, if it names distinct columns without control characters."""
    if not header or not any(h.strip() for h in header):
        raise ConfigError(f"{path}: no header row (the first line names the columns)")
    for i, name in enumerate(header, 1):
        if re.search(r"[\x00-\x1f\x7f]", name):
            raise ConfigError(
                f"{path}:1: column {i} of the header, {shown(name)}, has a control character; "
                "fix the header (a column's name is a field name devices send)"
            )
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise ConfigError(f"{path}:1: duplicate column names in the header: {twice}")
    return header


def unreadable(path: str | Path, exc: Exception, line: int | None = None) -> ConfigError:
    """A file that is not UTF-8 text, or not CSV, said in one line with where."""
    if isinstance(exc, UnicodeDecodeError):
        line, offset = _first_bad_utf8(path)
        return ConfigError(f"{path}:{line}: not UTF-8 text ({exc.reason} at byte {offset})")
    where = f"{path}:{line}" if line else str(path)
    if "field limit" in str(exc):
        limit = csv.field_size_limit()
        return ConfigError(f"{where}: a field over {limit // 1024} KiB ({limit} characters)")
    return ConfigError(f"{where}: not a CSV file ({exc})")


def _first_bad_utf8(path: str | Path) -> tuple[int, int]:
    """The line and file offset of the first byte that is not UTF-8 (the decoder only knows
    its place in the chunk it was given): read again, on the error path only."""
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return number, offset + exc.start
            offset += len(raw)
    return 0, offset


def json_line(path: str, number: int, line: str) -> Any:
    """One NDJSON line, strictly JSON: NaN and Infinity, which Python reads but the service
    refuses, and nesting too deep to read are errors naming the line."""
    try:
        return json.loads(line, parse_constant=_not_json)
    except RecursionError:
        raise ConfigError(f"{path}:{number}: not JSON (nested too deep)") from None
    except ValueError as exc:
        raise ConfigError(f"{path}:{number}: not JSON ({str(exc)[:200]})") from None


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number; the service refuses it")


def shown(cell: str, limit: int = 40) -> str:
    """A cell for an error message: quoted, control characters escaped, cut to `limit`.

    >>> shown("a" * 50)
    "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (50 characters)"
    """
    return repr(cell) if len(cell) <= limit else f"{cell[:limit]!r}... ({len(cell)} characters)"


def csv_samples(path: str, target: str = "y") -> Iterator[tuple[list[float], float]]:
    """(x, y) per row of a CSV file with a header: y is the `target` column, x the others
    in file order. A cell that is not a finite number is a ConfigError naming its line."""
    rows = csv_rows(path)
    _, header = next(rows)
    if target not in header:
        raise ConfigError(f"{path}: no {target!r} column in the header {header}")
    at = header.index(target)
    for line, row in rows:
        x = [_finite(path, line, name, cell) for name, cell in zip(header, row, strict=True)]
        y = x.pop(at)
        yield x, y


def _finite(path: str, line: int, name: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(
            f"{path}:{line}: every cell must be a number; column {name!r} has {shown(cell)}"
        ) from None
    if value - value != 0:
        raise ConfigError(
            f"{path}:{line}: column {name!r} is not a finite number, got {shown(cell)} "
            "(the service refuses NaN and infinity)"
        )
    return value


def file_payloads(
    path: str, batch: int, model: LightModel | None = None
) -> Iterator[tuple[int, bytes]]:
    """(samples, payload) per message for `publish FILE`: NDJSON lines as they are; CSV rows
    `batch` to a message, as named objects (`{"samples": [..]}`) when the model names its
    inputs, else columnar."""
    if path.endswith((".ndjson", ".jsonl")):
        yield from _ndjson_payloads(path)
    elif model is not None and model.fields is not None:
        yield from _named_payloads(path, batch, model)
    else:
        yield from _columnar_payloads(path, batch, model)


def ndjson_lines(path: str) -> Iterator[tuple[int, str, Any]]:
    """(line number, line, document) per non-empty line of an NDJSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            try:
                for number, line in enumerate(f, 1):
                    if line.strip():
                        yield number, line, json_line(path, number, line)
            except UnicodeDecodeError as exc:
                raise unreadable(path, exc) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _ndjson_payloads(path: str) -> Iterator[tuple[int, bytes]]:
    for number, line, doc in ndjson_lines(path):
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}:{number}: not a JSON object")
        if isinstance(doc.get("samples"), list):
            yield len(doc["samples"]), line.encode()
        else:
            yield len(doc["y"]) if isinstance(doc.get("y"), list) else 1, line.encode()


def _columnar_payloads(
    path: str, batch: int, model: LightModel | None
) -> Iterator[tuple[int, bytes]]:
    xs: list[list[float]] = []
    ys: list[float] = []
    for x, y in csv_samples(path):
        if model is not None and not xs and len(x) != model.inputs:
            raise ConfigError(
                f"{path}: {len(x)} input columns, model {model.name} has inputs = {model.inputs}"
            )
        xs.append(x)
        ys.append(y)
        if len(ys) == batch:
            yield len(ys), json.dumps({"x": xs, "y": ys}).encode()
            xs, ys = [], []
    if ys:
        yield len(ys), json.dumps({"x": xs, "y": ys}).encode()


def _named_payloads(path: str, batch: int, model: LightModel) -> Iterator[tuple[int, bytes]]:
    docs: list[dict] = []
    for _, doc in csv_objects(path, model):
        docs.append(doc)
        if len(docs) == batch:
            yield len(docs), json.dumps(docs[0] if batch == 1 else {"samples": docs}).encode()
            docs = []
    if docs:
        yield len(docs), json.dumps(docs[0] if batch == 1 else {"samples": docs}).encode()


def csv_objects(path: str, model: LightModel, label: bool = True) -> Iterator[tuple[int, dict]]:
    """(line, named sample) per row of a CSV file: the model's fields (dotted names nested:
    `ENERGY.Power` -> `{"ENERGY": {"Power": ..}}`) and, with `label`, its target; numbers
    as numbers, a categorical field's text as it is, an empty cell left out."""
    fields = model.fields or ()
    wanted = [*fields, model.target] if label else list(fields)
    rows = csv_rows(path)
    _, header = next(rows)
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ConfigError(
            f"{path}: model {model.name} reads columns {missing} the header lacks "
            f"(the header: {header})"
        )
    at = {name: header.index(name) for name in wanted}
    for line, row in rows:
        doc: dict = {}
        for name in wanted:
            cell = row[at[name]].strip()
            if cell == "" and name != model.target:
                continue  # missing: the model's max_missing judges it
            value = cell if name in model.categorical else _number(cell)
            if value is None:
                raise ConfigError(
                    f"{path}:{line}: column {name!r} is not a finite number, got {shown(cell)}"
                )
            put(doc, name, value)
        yield line, doc


def count_samples(path: str) -> int | None:
    """Samples in a file, counted cheaply (None when unknown)."""
    try:
        with open(path, "rb") as f:
            lines = sum(1 for line in f if line.strip())
    except OSError:
        return None
    return lines - 1 if path.endswith(".csv") else None


def request_x(given: str | None, model: Any) -> object:
    """x from the command line (a JSON list, or an object of named fields), else a demo x."""
    if given:
        try:
            x = json.loads(given, parse_constant=_not_json)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"x: not JSON ({exc}), got {shown(given)}") from None
        if not isinstance(x, list | dict):
            raise ConfigError(f"x: a JSON list or an object of named fields, got {given!r}")
        return x
    if model.fields is not None:
        return named_default(model)
    if isinstance(model, LightModel):  # the base install: no demo stream (numpy)
        return [0.0] * model.inputs
    from streamlearn.stack.demo import DemoStream

    return DemoStream(model).sample(1).x[0].tolist()


def named_default(model: LightModel) -> dict:
    """A request of the model's named fields: 0 for a number, a categorical's first value."""
    doc: dict = {}
    for name in model.fields or ():
        values = model.categorical.get(name)
        put(doc, name, values[0] if values else 0.0)
    return doc


def _number(cell: str) -> int | float | None:
    """The cell as JSON's number: an integer stays one; None when it is not a finite number.

    >>> [_number("3"), _number("2.5"), _number("nan"), _number("open")]
    [3, 2.5, None, None]
    """
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if value - value == 0 else None


def put(doc: dict, name: str, value: object) -> None:
    """Set a dotted name in nested objects.

    >>> doc = {}; put(doc, "ENERGY.Power", 5); put(doc, "ENERGY.Voltage", 230); doc
    {'ENERGY': {'Power': 5, 'Voltage': 230}}
    """
    *parents, leaf = name.split(".")
    for part in parents:
        doc = doc.setdefault(part, {})
    doc[leaf] = value


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
