"""`streamlearn evaluate` for named samples and for labels that come later.

A named model's rows are replayed as the devices send them: each row a prediction request
of its fields, then its label. With `--label-delay N` every request carries an id and the
row's label goes out on the labels topic N rows later, on its own (`Client.label`), as a
label that is only known after the fact does; the service joins it to the features its
actor kept for that id. Each row is so scored by the model that served it, and the
service's own figure for the same labels (`served` in the model's status) is printed
beside the one computed here from the replies.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from streamlearn.cli.light import MAX_SAMPLES, LightModel, csv_objects, ndjson_lines, put
from streamlearn.client.replay import Replay
from streamlearn.errors import ConfigError
from streamlearn.online.evaluate import decide

SERVED_WAIT_S = 5.0  # how long `evaluate` waits for the status to count its last labels


def read_named(path: str, model: Any, target: str) -> tuple[list[dict], np.ndarray]:
    """A CSV (a column per field) or NDJSON file (named objects, or `{"samples": [..]}`) as
    prediction requests (the fields without the label) and the labels."""
    requests: list[dict] = []
    labels: list[float] = []
    for number, doc in _named_docs(path, model, target):
        if len(labels) == MAX_SAMPLES:
            raise ConfigError(f"{path}: more than {MAX_SAMPLES:,} samples; cut the file")
        y = _take(doc, target)
        if isinstance(y, bool) or not isinstance(y, int | float) or not math.isfinite(y):
            raise ConfigError(
                f"{path}:{number}: the label {target!r} is not a finite number, got {y!r}"[:300]
            )
        requests.append(doc)
        labels.append(float(y))
    if not labels:
        raise ConfigError(f"{path}: no samples")
    return requests, np.asarray(labels, np.float32)


def _named_docs(path: str, model: Any, target: str) -> Iterator[tuple[int, dict]]:
    if not path.endswith((".ndjson", ".jsonl")):
        light = LightModel(model.name, model.inputs, model.fields, target, model.categorical)
        yield from csv_objects(path, light)
        return
    for number, _, doc in ndjson_lines(path):
        docs = doc.get("samples") if isinstance(doc, dict) else None
        for one in docs if isinstance(docs, list) else [doc]:
            if not isinstance(one, dict):
                raise ConfigError(f"{path}:{number}: not a named sample: {one!r}"[:300])
            yield number, one


def _take(doc: dict, name: str) -> Any:
    """Remove a (dotted) field from a named sample and return its value (None: absent).

    >>> doc = {"a": {"y": 1, "b": 2}}; _take(doc, "a.y"), doc
    (1, {'a': {'b': 2}})
    """
    *parents, leaf = name.split(".")
    for part in parents:
        doc = doc.get(part)  # type: ignore[assignment]
        if not isinstance(doc, dict):
            return None
    return doc.pop(leaf, None)


def label_value(y: float) -> int | float:
    """A label as JSON's number: a class index as an integer."""
    return int(y) if float(y).is_integer() else float(y)


def replay_rows(
    client: Any,
    model: str,
    task: str,
    requests: list,
    y: np.ndarray,
    *,
    label_delay: int | None,
    batch: int,
    target: str = "y",
    rate: float = 0.0,
    timeout_s: float = 5.0,
    newest: Callable[[], int | None] = lambda: None,
    progress: Callable[[int], None] = lambda _done: None,
) -> Replay:
    """Ask for each row, then give its label: with `label_delay` None, `batch` rows a
    message as named samples (`{"samples": [..]}`); else per row, the request with an id,
    the label of the row `label_delay` rows back on the labels topic, the last ones at the
    end. A row every `1 / rate` s (0: as fast as the actor answers)."""
    n = len(y)
    predicted = np.full(n, np.nan, np.float32)
    versions = np.full(n, -1, np.int64)
    behind = np.full(n, -1, np.int64)
    errors: dict[str, int] = {}

    def record(i: int, future: Future) -> None:
        try:
            reply = future.result()
        except Exception as exc:  # PredictionError, TimeoutError: no answer, counted
            key = f"{type(exc).__name__}: {exc}"[:200]
            if key in errors or len(errors) < 20:  # bounded: a few kinds of failure
                errors[key] = errors.get(key, 0) + 1
            return
        predicted[i] = decide(task, np.asarray(reply.y, np.float32).reshape(1, -1))[0]
        versions[i] = reply.version
        latest = newest()
        if latest is not None:
            behind[i] = max(0, latest - reply.version)

    start = time.perf_counter()
    step = 1 if label_delay is not None else batch
    ids = [f"ev-{uuid.uuid4().hex[:8]}-{i}" for i in range(n)] if label_delay is not None else []
    messages = 0
    asked: list[Future] = []
    for lo in range(0, n, step):
        if rate > 0:
            time.sleep(max(0.0, start + lo / rate - time.perf_counter()))
        hi = min(lo + step, n)
        if label_delay is None:
            rows = range(lo, hi)
            now = [client.predict_async(model, requests[i], timeout=timeout_s) for i in rows]
            for i, future in zip(rows, now, strict=True):
                record(i, future)
            client.publish(model, [_labelled(requests[i], target, y[i]) for i in range(lo, hi)])
        else:  # up to label_delay requests in flight; a label goes once its request is served
            asked.append(client.predict_async(model, requests[lo], id=ids[lo], timeout=timeout_s))
            if lo >= label_delay:
                back = lo - label_delay
                record(back, asked[back])
                client.label(model, ids[back], label_value(y[back]))
        messages += 1
        progress(hi)
    if label_delay is not None:
        rest = range(max(0, n - label_delay), n)
        for i in rest:
            record(i, asked[i])
        client.labels(model, [(ids[i], label_value(y[i])) for i in rest])
    seconds = time.perf_counter() - start
    return Replay(predicted, versions, behind, seconds, messages, errors)


def _labelled(request: dict, target: str, y: float) -> dict:
    """A named request with its label: the sample a device sends when it knows the label."""
    doc = json.loads(json.dumps(request))  # nested objects copied, the request kept as it is
    put(doc, target, label_value(y))
    return doc


def served_lines(watch: Any, labels: int, wait_s: float = SERVED_WAIT_S) -> list[str]:
    """The service's own score of the labels it joined (`served` in the status), once it
    counts `labels` of them or after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        served = watch.latest.get("served")
        if isinstance(served, dict) and served.get("labels", 0) >= labels:
            break
        time.sleep(0.2)
    served = watch.latest.get("served")
    if not isinstance(served, dict):
        return ["service's served score: not in the model's status (no labels joined yet)"]
    parts = [f"{served.get('labels', 0):,} labels joined"]
    for key in ("accuracy", "mae", "loss"):
        if isinstance(served.get(key), int | float):
            parts.append(f"{key} {served[key]:.4f}")
    if isinstance(served.get("delay_p50_s"), int | float):
        p95 = served.get("delay_p95_s")
        parts.append(
            f"label delay p50 {served['delay_p50_s']:.2f} s"
            + (f", p95 {p95:.2f} s" if isinstance(p95, int | float) else "")
        )
    if served.get("unknown"):
        parts.append(f"{served['unknown']:,} labels for unknown ids")
    return ["service's served score: " + ", ".join(parts)]
