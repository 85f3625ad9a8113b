"""The Open Inference Protocol's tensors as numpy reads them: JSON `data`, flat or nested,
or Triton's binary tensor extension (`binary_data_size`, little-endian; `BYTES` as
length-prefixed strings), each checked against its shape and the most a valid request
holds before it is read. `streamlearn.actor.oip` reads a request's inputs with it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamlearn.errors import PayloadError

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


def read_tensors(
    inputs: list[Any], tail: bytes, max_values: int
) -> dict[str, np.ndarray | list[Any]]:
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
