"""The Open Inference Protocol (KServe V2 REST) as the actor reads and writes it.

What Triton, KServe, Seldon MLServer and TorchServe speak, and what their clients
(`tritonclient[http]`, KServe's) send. This module is the protocol's documents only;
`streamlearn.actor.http` serves them.

An inference request holds `inputs: [{name, shape, datatype, data}]`:
- a positional model takes one input `x` of shape `[rows, inputs]` (`[rows, window,
  inputs]` with a window); `data` is flat (row-major) or nested;
- a model with named inputs takes one input per field, shape `[rows]` or `[rows, 1]`
  (`BYTES` strings for a categorical field), or `x` as a positional model does.
Numbers may come as any numeric datatype (`FP32` is the usual); Triton's binary tensor
extension is read too (`Inference-Header-Content-Length`, `binary_data_size`). The
response holds one output, `y`, `FP32` of shape `[rows, 1]` (`[rows, classes]` for
multiclass), always as JSON, and the version that computed it as `model_version`.
"""

from __future__ import annotations

import json
import math
from importlib import metadata
from typing import Any, cast

import numpy as np

from streamlearn.actor.bodies import BodyBounds
from streamlearn.config.app import ModelConfig
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.schemas import request_id
from streamlearn.errors import PayloadError

OUTPUT = "y"
POSITIONAL = "x"
# The protocol's numeric datatypes, as numpy reads their binary form (little-endian).
NUMERIC = {
    "BOOL": "<u1",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}
MAX_INPUTS = 1024  # a request's inputs, at most (`streamlearn.config.inputs.MAX_FIELDS`)


def server_metadata() -> dict[str, Any]:
    """`GET /v2`."""
    return {"name": "streamlearn", "version": metadata.version("streamlearn"), "extensions": []}


def model_metadata(cfg: ModelConfig, versions: list[int]) -> dict[str, Any]:
    """`GET /v2/models/{model}`: its inputs and output, and the versions kept."""
    if cfg.fields is None or cfg.window is not None:
        inputs = [{"name": POSITIONAL, "datatype": "FP32", "shape": [-1, *cfg.sample_shape]}]
    else:
        inputs = [
            {
                "name": name,
                "datatype": "BYTES" if name in cfg.categorical else "FP32",
                "shape": [-1, 1],
            }
            for name in cfg.fields
        ]
    width = cfg.classes if cfg.task == "multiclass" else 1
    return {
        "name": cfg.name,
        "versions": [str(v) for v in versions],
        "platform": "keras",
        "inputs": inputs,
        "outputs": [{"name": OUTPUT, "datatype": "FP32", "shape": [-1, width]}],
    }


def read_infer(
    cfg: ModelConfig, parser: PayloadParser, body: bytes, header_length: int | None
) -> tuple[np.ndarray, str | None]:
    """An inference request's rows `(n, *sample_shape)` and id; PayloadError saying what
    is wrong (a 400). `header_length`: the JSON's bytes when binary tensors follow it. The
    JSON is decoded only when it is no wider than the model's largest request (`bodies`)."""
    head, tail = body, b""
    if header_length is not None:
        if not 0 < header_length <= len(body):
            raise PayloadError(
                f"Inference-Header-Content-Length {header_length} does not fit a body of "
                f"{len(body)} bytes"
            )
        head, tail = body[:header_length], body[header_length:]
    BodyBounds(cfg).check(head)
    try:
        doc = json.loads(head)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PayloadError(f"the request must be a JSON object, got {type(doc).__name__}")
    rid = cast(str | None, request_id(doc.get("id"), integers=False))  # a string in OIP
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs or len(inputs) > MAX_INPUTS:
        raise PayloadError(f"inputs: a list of 1 to {MAX_INPUTS} tensors expected")
    _check_outputs(doc.get("outputs"))
    max_rows = cfg.actor.max_request_rows
    tensors = _tensors(inputs, tail, max_rows * max(math.prod(cfg.sample_shape), cfg.inputs))
    if POSITIONAL in tensors and len(tensors) == 1:
        return _positional(cfg, tensors[POSITIONAL], max_rows), rid
    if cfg.fields is None:
        raise PayloadError(f"inputs: one tensor named {POSITIONAL!r} expected, got {list(tensors)}")
    return _named(cfg, parser, tensors, max_rows), rid


def response(cfg: ModelConfig, reply: dict[str, Any], rid: str | None) -> dict[str, Any]:
    """The response to a request the actor answered with `reply` (no `error` in it)."""
    y = np.asarray(reply["y"], np.float32)
    y = y.reshape(len(y), -1)
    return {
        "model_name": cfg.name,
        "model_version": str(reply["version"]),
        **({"id": rid} if rid is not None else {}),
        "parameters": {"variant": reply.get("variant")},
        "outputs": [
            {
                "name": OUTPUT,
                "datatype": "FP32",
                "shape": list(y.shape),
                "data": y.ravel().tolist(),
            }
        ],
    }


def status_of(reason: str) -> int:
    """The HTTP status of an error the actor answered: 503 while it cannot serve yet,
    504 past the request's deadline, 400 otherwise (the protocol's error response).

    >>> status_of("deadline exceeded: waited 5002 ms"), status_of("x: 3 rows")
    (504, 400)
    """
    if reason.startswith("deadline exceeded"):
        return 504
    if reason.startswith(("no weights published yet", "internal error")):
        return 503
    return 400


# -- helpers ---------------------------------------------------------------------------------


def _check_outputs(outputs: Any) -> None:
    if outputs is None:
        return
    if not isinstance(outputs, list) or any(
        not isinstance(o, dict) or o.get("name") != OUTPUT for o in outputs
    ):
        raise PayloadError(f"outputs: this model has one output, {OUTPUT!r}")


def _tensors(inputs: list[Any], tail: bytes, max_values: int) -> dict[str, np.ndarray | list[Any]]:
    """Each input's values by name: an array of its shape, or a list of strings (BYTES).
    No tensor of a valid request holds more than `max_values`, nor a size past it."""
    tensors: dict[str, np.ndarray | list[Any]] = {}
    offset = 0
    for i, tensor in enumerate(inputs):
        if not isinstance(tensor, dict):
            raise PayloadError(f"inputs.{i}: an object {{name, shape, datatype, data}} expected")
        name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
        where = f"inputs.{i} ({name!r})" if isinstance(name, str) else f"inputs.{i}"
        if not isinstance(name, str) or name in tensors:
            raise PayloadError(f"{where}: a name of its own expected")
        if (
            not isinstance(shape, list)
            or not shape
            or len(shape) > 4
            or any(type(d) is not int or d < 0 for d in shape)
        ):
            raise PayloadError(f"{where}: shape must be a list of 1 to 4 sizes, got {shape!r}")
        count = math.prod(shape)
        if count > max_values or max(shape) > max_values:
            raise PayloadError(
                f"{where}: shape {shape} holds more values than a request may: at most "
                f"{max_values} (max_request_rows × inputs)"
            )
        params = tensor.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if type(size) is not int or not 0 <= size <= len(tail) - offset:
                raise PayloadError(f"{where}: binary_data_size {size!r} past the body's end")
            raw, offset = tail[offset : offset + size], offset + size
            tensors[name] = _binary(where, datatype, raw, shape, count)
        else:
            tensors[name] = _json_data(where, datatype, tensor.get("data"), shape, count)
    return tensors


def _json_data(where: str, datatype: Any, data: Any, shape: list[int], count: int) -> Any:
    if not isinstance(data, list):
        raise PayloadError(f"{where}: data must be a list")
    if datatype == "BYTES":
        flat = _flatten(data)
        if len(flat) != count or any(not isinstance(v, str) for v in flat):
            raise PayloadError(f"{where}: {count} strings expected for shape {shape}")
        return flat
    if datatype not in NUMERIC:
        raise PayloadError(f"{where}: datatype {datatype!r} is not one of {sorted(NUMERIC)}")
    try:
        with np.errstate(over="ignore"):
            arr = np.asarray(data, dtype=np.float32)
    except (ValueError, TypeError):
        raise PayloadError(f"{where}: data must be numbers, flat or nested") from None
    if arr.size != count:
        raise PayloadError(f"{where}: {arr.size} values for shape {shape} ({count})")
    return arr.reshape(shape)


def _binary(where: str, datatype: Any, raw: bytes, shape: list[int], count: int) -> Any:
    if datatype == "BYTES":
        # `count` values at most, read no further: a body of a million empty strings costs
        # what its shape allows (bounded by `max_request_rows`), not a walk over the million
        if len(raw) < 4 * count:
            raise PayloadError(
                f"{where}: {len(raw)} bytes cannot hold the {count} strings of shape {shape}"
            )
        values, at = [], 0
        for _ in range(count):  # each value: its length (uint32, little-endian), then it
            n = int.from_bytes(raw[at : at + 4], "little") if len(raw) - at >= 4 else -1
            if n < 0 or at + 4 + n > len(raw):  # Python ints: no uint32 wrap
                raise PayloadError(f"{where}: malformed BYTES tensor")
            values.append(raw[at + 4 : at + 4 + n].decode("utf-8", "replace"))
            at += 4 + n
        if at != len(raw):
            raise PayloadError(
                f"{where}: {count} strings expected for shape {shape}, and {len(raw) - at} "
                "bytes follow them"
            )
        return values
    if datatype not in NUMERIC:
        raise PayloadError(f"{where}: datatype {datatype!r} is not one of {sorted(NUMERIC)}")
    dtype = np.dtype(NUMERIC[datatype])
    if len(raw) != count * dtype.itemsize:
        raise PayloadError(f"{where}: {len(raw)} bytes for shape {shape} of {datatype}")
    return np.frombuffer(raw, dtype).astype(np.float32).reshape(shape)


def _flatten(data: list[Any]) -> list[Any]:
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                if len(stack) > 4:
                    raise PayloadError("data nested deeper than its shape")
                stack.append(iter(value))
                break
            out.append(value)
        else:
            stack.pop()
    return out


def _positional(cfg: ModelConfig, x: Any, max_rows: int) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise PayloadError(f"{POSITIONAL}: numbers expected, not BYTES")
    want = cfg.sample_shape
    if tuple(x.shape[1:]) != want:
        raise PayloadError(
            f"{POSITIONAL}: shape must be [rows, {', '.join(map(str, want))}], got {list(x.shape)}"
        )
    _check_rows(len(x), max_rows)
    if not np.all(np.isfinite(x)):
        raise PayloadError(f"{POSITIONAL}: value out of float32 range or not a number")
    return np.ascontiguousarray(x, np.float32)


def _named(
    cfg: ModelConfig, parser: PayloadParser, tensors: dict[str, Any], max_rows: int
) -> np.ndarray:
    """One tensor per field into the rows the MQTT door reads (`samples` of objects), so
    both doors check fields, categories and missing values the same way."""
    assert cfg.fields is not None
    unknown = [name for name in tensors if name not in cfg.fields]
    if unknown:
        raise PayloadError(f"inputs: {unknown[:3]} are not inputs of the model: {cfg.fields}")
    columns: dict[str, list[Any]] = {}
    rows = None
    for name, values in tensors.items():
        flat = values.reshape(-1).tolist() if isinstance(values, np.ndarray) else values
        shape: tuple[int, ...] = values.shape if isinstance(values, np.ndarray) else (len(values),)
        if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
            raise PayloadError(f"inputs ({name!r}): shape must be [rows] or [rows, 1]")
        if rows is not None and len(flat) != rows:
            raise PayloadError(f"inputs ({name!r}): {len(flat)} rows, the others have {rows}")
        rows = len(flat)
        columns[name] = flat
    assert rows is not None
    _check_rows(rows, max_rows)
    samples = []
    for r in range(rows):
        row: dict[str, Any] = {}
        for name, column in columns.items():
            into, path = row, name.split(".")
            for part in path[:-1]:
                into = into.setdefault(part, {})
            into[path[-1]] = column[r]
        samples.append(row)
    return parser.parse_request({"samples": samples}).x


def _check_rows(rows: int, max_rows: int) -> None:
    if rows < 1:
        raise PayloadError("no rows")
    if rows > max_rows:
        raise PayloadError(f"{rows} rows, more than max_request_rows={max_rows}")
