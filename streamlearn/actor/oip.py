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
multiclass), and the version that computed it as `model_version`. What a request asks of
it (`Wanted`): the output in binary (`binary_data`, `binary_data_output`: what
`tritonclient` asks by default), as its top classes (`classification`: `BYTES`
`"score:class"`), and a deadline of its own (`timeout`, microseconds). `model_config`
is the model as Triton's tools (perf_analyzer, Model Analyzer) read it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import metadata
from typing import Any, NamedTuple, cast

import numpy as np

from streamlearn.actor.bodies import BodyBounds
from streamlearn.actor.tensors import read_tensors
from streamlearn.config.app import ModelConfig
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.schemas import request_id
from streamlearn.errors import PayloadError

OUTPUT = "y"
POSITIONAL = "x"
MAX_INPUTS = 1024  # a request's inputs, at most (`streamlearn.config.inputs.MAX_FIELDS`)
# Triton's extensions served (their names as Triton's server metadata gives them), and
# streamlearn's own: labels that come later (`POST /v2/models/{model}/labels`).
EXTENSIONS = ["binary_tensor_data", "classification", "model_configuration", "labels"]
TRITON_TYPES = {"FP32": "TYPE_FP32", "BYTES": "TYPE_STRING"}  # a model config's data_type


@dataclass(frozen=True)
class Wanted:
    """What a request asks of its response, beyond its inputs."""

    binary: bool = False  # the output as binary data after the JSON
    classification: int = 0  # the top K classes instead of the probabilities (0: not)
    timeout_s: float | None = None  # its own deadline, when shorter than the actor's


class Infer(NamedTuple):
    x: np.ndarray  # (rows, *sample_shape)
    id: str | None
    wanted: Wanted


def server_metadata() -> dict[str, Any]:
    """`GET /v2`."""
    return {
        "name": "streamlearn",
        "version": metadata.version("streamlearn"),
        "extensions": EXTENSIONS,
    }


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


def model_config(cfg: ModelConfig) -> dict[str, Any]:
    """`GET /v2/models/{model}/config`: the model in Triton's terms, what perf_analyzer
    and Model Analyzer read first: inputs and output without the batch dimension, up to
    `max_request_rows` rows a request, batched by the actor (`dynamic_batching`)."""
    meta = model_metadata(cfg, [])

    def tensor(t: dict[str, Any]) -> dict[str, Any]:
        return {"name": t["name"], "data_type": TRITON_TYPES[t["datatype"]], "dims": t["shape"][1:]}

    return {
        "name": cfg.name,
        "platform": meta["platform"],
        "backend": "streamlearn",
        "max_batch_size": cfg.actor.max_request_rows,
        "input": [tensor(t) for t in meta["inputs"]],
        "output": [tensor(t) for t in meta["outputs"]],
        "dynamic_batching": {"max_queue_delay_microseconds": int(cfg.actor.max_wait_ms * 1000)},
    }


def read_infer(
    cfg: ModelConfig, parser: PayloadParser, body: bytes, header_length: int | None
) -> Infer:
    """An inference request's rows `(n, *sample_shape)`, id and what it asks of its
    response; PayloadError saying what is wrong (a 400). `header_length`: the JSON's bytes
    when binary tensors follow it. The JSON is decoded only when it is no wider than the
    model's largest request (`bodies`)."""
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
    return read_document(cfg, parser, doc, tail)


def read_document(
    cfg: ModelConfig, parser: PayloadParser, doc: dict[str, Any], tail: bytes = b""
) -> Infer:
    """`read_infer` of a request decoded already (the gRPC door's message as the JSON's
    document): `id`, `inputs`, `outputs` and `parameters` as the JSON holds them, `tail`
    the binary tensors its inputs' `binary_data_size` count, in order."""
    rid = cast(str | None, request_id(doc.get("id"), integers=False))  # a string in OIP
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs or len(inputs) > MAX_INPUTS:
        raise PayloadError(f"inputs: a list of 1 to {MAX_INPUTS} tensors expected")
    wanted = _wanted(cfg, doc.get("parameters"), doc.get("outputs"))
    max_rows = cfg.actor.max_request_rows
    tensors = read_tensors(inputs, tail, max_rows * max(math.prod(cfg.sample_shape), cfg.inputs))
    if POSITIONAL in tensors and len(tensors) == 1:
        return Infer(_positional(cfg, tensors[POSITIONAL], max_rows), rid, wanted)
    if cfg.fields is None:
        raise PayloadError(f"inputs: one tensor named {POSITIONAL!r} expected, got {list(tensors)}")
    return Infer(_named(cfg, parser, tensors, max_rows), rid, wanted)


def response(
    cfg: ModelConfig, reply: dict[str, Any], rid: str | None, wanted: Wanted = Wanted()
) -> tuple[dict[str, Any], bytes]:
    """The response to a request the actor answered with `reply` (no `error` in it): its
    JSON document, and the binary data that follows it (empty unless `wanted.binary`)."""
    y = np.asarray(reply["y"], np.float32)
    y = y.reshape(len(y), -1)
    output: dict[str, Any] = {"name": OUTPUT, "datatype": "FP32", "shape": list(y.shape)}
    values: np.ndarray | list[str] = y
    if wanted.classification:
        values = _top_classes(cfg, y, wanted.classification)
        output.update(datatype="BYTES", shape=[len(y), len(values) // len(y)])
    tail = b""
    if not wanted.binary:
        output["data"] = values if isinstance(values, list) else y.ravel().tolist()
    elif isinstance(values, list):
        tail = b"".join(len(v).to_bytes(4, "little") + v.encode() for v in values)
    else:
        tail = values.astype("<f4").tobytes()
    if wanted.binary:
        output["parameters"] = {"binary_data_size": len(tail)}
    doc = {
        "model_name": cfg.name,
        "model_version": str(reply["version"]),
        **({"id": rid} if rid is not None else {}),
        "parameters": {"variant": reply.get("variant")},
        "outputs": [output],
    }
    return doc, tail


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


def _wanted(cfg: ModelConfig, parameters: Any, outputs: Any) -> Wanted:
    """The request's `parameters` (`binary_data_output`, `timeout` in microseconds, as
    tritonclient sends them; others ignored) and its `outputs`' (`binary_data`,
    `classification`)."""
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise PayloadError("parameters: an object expected")
    binary = _flag(parameters, "binary_data_output", "parameters")
    timeout = parameters.get("timeout")
    if timeout is not None and (type(timeout) is not int or timeout < 0):
        raise PayloadError(f"parameters.timeout: microseconds, a whole number, got {timeout!r}")
    classes = 0
    if outputs is not None:
        if not isinstance(outputs, list) or any(
            not isinstance(o, dict) or o.get("name") != OUTPUT for o in outputs
        ):
            raise PayloadError(f"outputs: this model has one output, {OUTPUT!r}")
        for o in outputs:
            params = o.get("parameters") or {}
            if not isinstance(params, dict):
                raise PayloadError(f"outputs ({OUTPUT!r}): parameters must be an object")
            binary = _flag(params, "binary_data", f"outputs ({OUTPUT!r})", binary)
            classes = params.get("classification", 0)
            if type(classes) is not int or classes < 0:
                raise PayloadError(f"classification: a number of classes, got {classes!r}")
    if classes and cfg.task == "regression":
        raise PayloadError(f"classification: model {cfg.name!r} is a regression, it has no classes")
    return Wanted(binary, classes, timeout / 1e6 if timeout else None)


def _flag(params: dict[str, Any], name: str, where: str, default: bool = False) -> bool:
    value = params.get(name, default)
    if type(value) is not bool:
        raise PayloadError(f"{where}.{name}: true or false, got {value!r}")
    return value


def _top_classes(cfg: ModelConfig, y: np.ndarray, k: int) -> list[str]:
    """Each row's `k` most probable classes, `"score:class"`, most probable first (a
    binary model's classes are 0 and 1), row-major, as Triton's classification gives."""
    probs = np.concatenate([1 - y, y], axis=1) if cfg.task == "binary" else y
    k = min(k, probs.shape[1])
    order = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return [f"{probs[r, c]:f}:{c}" for r in range(len(probs)) for c in order[r]]


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
