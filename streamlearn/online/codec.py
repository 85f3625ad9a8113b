"""Weights blob codec: the safetensors layout, written and read with numpy alone.

Layout: 8-byte little-endian header length, a JSON header mapping each tensor name to
`{dtype, shape, data_offsets}` (plus `__metadata__` of strings), then the raw bytes.
Nothing in a blob can run code when loaded, and any safetensors reader can open it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

import numpy as np

from streamlearn.errors import WeightsError

_DTYPES = {
    "F32": np.float32,
    "F64": np.float64,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024


def encode(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialise named arrays.

    >>> arrays, meta = decode(encode({"w": np.ones((2, 3), np.float32)}, {"version": "7"}))
    >>> arrays["w"].shape, meta["version"]
    ((2, 3), '7')
    """
    header: dict[str, object] = {"__metadata__": dict(metadata or {})}
    chunks, offset = [], 0
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.dtype not in _NAMES:
            raise WeightsError(f"{name}: dtype {array.dtype} is not supported")
        data = array.tobytes(order="C")
        header[name] = {
            "dtype": _NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


def decode(blob: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Parse a blob; any malformation raises WeightsError (never a partial result)."""
    if len(blob) < 8:
        raise WeightsError(f"blob of {len(blob)} bytes is too short")
    (size,) = struct.unpack("<Q", blob[:8])
    if size > min(_MAX_HEADER, len(blob) - 8):
        raise WeightsError(f"header length {size} does not fit a blob of {len(blob)} bytes")
    try:
        header = json.loads(blob[8 : 8 + size])
        metadata = {str(k): str(v) for k, v in header.pop("__metadata__", {}).items()}
        data = memoryview(blob)[8 + size :]
        arrays = {}
        for name, info in header.items():
            dtype = np.dtype(_DTYPES[info["dtype"]])
            shape = tuple(int(d) for d in info["shape"])
            start, end = (int(o) for o in info["data_offsets"])
            if not 0 <= start <= end <= len(data) or end - start != dtype.itemsize * int(
                np.prod(shape)
            ):
                raise WeightsError(f"{name}: data offsets {start}..{end} do not match its shape")
            arrays[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(shape).copy()
    except WeightsError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise WeightsError(f"malformed header: {exc!r}") from None
    return arrays, metadata


def check_fits(
    arrays: Mapping[str, np.ndarray], expected: Mapping[str, tuple[tuple[int, ...], np.dtype]]
) -> None:
    """Refuse arrays whose names, shapes or dtypes differ from `expected`, or that hold NaN/inf."""
    if set(arrays) != set(expected):
        missing, extra = sorted(set(expected) - set(arrays)), sorted(set(arrays) - set(expected))
        raise WeightsError(f"weight names differ: missing {missing}, unexpected {extra}")
    for name, (shape, dtype) in expected.items():
        array = arrays[name]
        if array.shape != tuple(shape) or array.dtype != dtype:
            raise WeightsError(
                f"{name}: expected {dtype}{list(shape)}, got {array.dtype}{list(array.shape)}"
            )
        if not np.all(np.isfinite(array)):
            raise WeightsError(f"{name}: contains non-finite values")
