"""`streamlearn evaluate`: how well the running service learns a stream, test-then-train.

A file's samples are replayed through the real service a message at a time: the rows are
asked for first (a prediction request to the actor, its reply awaited), then published
with their labels for the learner. Each sample is so scored by a model that has not seen
it, as River's `evaluate.progressive_val_score` does in one process, but with the
service's staleness counted: a sample is learned, published as a new version and loaded
by the actor only some time after it was sent.

The same core (`replay`) drives the quality benchmark's service runs (bench/quality.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streamlearn.cli.light import ProgressBar, csv_samples, ndjson_lines
from streamlearn.errors import ConfigError, StreamlearnError

MAX_SAMPLES = 2_000_000  # a file is held in memory: ~16 MB per input column at the cap
DEFAULT_BATCH = 40
DEFAULT_LAST = 1000


# -- reading a file ----------------------------------------------------------------------


def ndjson_samples(path: str, target: str = "y") -> Iterator[tuple[list[float], float]]:
    """(x, y) per sample of an NDJSON file of sample payloads: `{"x": row, "y": v}` or the
    columnar `{"x": [row, ...], "y": [v, ...]}`, the label under `target`."""
    for number, _, doc in ndjson_lines(path):
        try:
            xs, ys = doc["x"], doc[target]
            if not isinstance(ys, list):
                xs, ys = [xs], [ys]
            pairs = [([float(v) for v in x], float(y)) for x, y in zip(xs, ys, strict=True)]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{path}:{number}: not a labelled sample payload with x and {target!r} "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None
        for x, y in pairs:
            if not all(math.isfinite(v) for v in (*x, y)):
                raise ConfigError(
                    f"{path}:{number}: a number that is not finite (the service refuses it)"
                )
        yield from pairs


def read_samples(path: str, target: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """A CSV or NDJSON file as float32 rows and labels, at most MAX_SAMPLES of them."""
    if not Path(path).is_file():
        raise ConfigError(f"no such file: {path}")
    samples = ndjson_samples if path.endswith((".ndjson", ".jsonl")) else csv_samples
    xs, ys = [], []
    for x, y in samples(path, target):
        if len(ys) == MAX_SAMPLES:
            raise ConfigError(f"{path}: more than {MAX_SAMPLES:,} samples; cut the file")
        xs.append(x)
        ys.append(y)
    if not ys:
        raise ConfigError(f"{path}: no samples")
    widths = {len(x) for x in xs}
    if len(widths) > 1:
        raise ConfigError(f"{path}: rows differ in length: {sorted(widths)}")
    return np.asarray(xs, np.float32), np.asarray(ys, np.float32)


# -- scoring -----------------------------------------------------------------------------


def decide(task: str, outputs: np.ndarray) -> np.ndarray:
    """The model's outputs (a row per sample) as labels (argmax, or > 0.5) or values."""
    outputs = np.asarray(outputs, np.float32)
    if task == "multiclass":
        return outputs.reshape(len(outputs), -1).argmax(axis=1).astype(np.float32)
    flat = outputs.reshape(len(outputs))
    return (flat > 0.5).astype(np.float32) if task == "binary" else flat


def score(task: str, y: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Right (1) or wrong (0) per sample, or the absolute error; NaN (no answer) is wrong,
    or 0.0 for a regression."""
    if task in ("binary", "multiclass"):
        return (predicted == y).astype(np.float32)
    return np.abs(np.nan_to_num(predicted, nan=0.0) - y)


def rolling(scores: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` scores at each sample (fewer at the start).

    >>> rolling(np.array([1.0, 0.0, 1.0, 1.0]), 2).tolist()
    [1.0, 0.5, 0.5, 1.0]
    """
    total = np.concatenate([[0.0], np.cumsum(np.asarray(scores, np.float64))])
    end = np.arange(1, len(total))
    start = np.maximum(end - window, 0)
    return (total[end] - total[start]) / (end - start)


# -- the replay --------------------------------------------------------------------------


@dataclass
class Replay:
    """What came back for each sample of a replay."""

    predicted: np.ndarray  # label or value per sample; NaN where no answer came
    versions: np.ndarray  # the model version that answered, -1 where none did
    behind: np.ndarray  # versions the answer was behind the learner's newest; -1 unknown
    seconds: float  # wall seconds of the whole replay
    messages: int  # prediction requests sent, as many as labelled messages published
    errors: dict[str, int] = field(default_factory=dict)  # error reply or timeout -> count

    @property
    def answered(self) -> int:
        return int((self.versions >= 0).sum())


def replay(
    client: object,
    model: str,
    task: str,
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch: int = DEFAULT_BATCH,
    rate: float = 0.0,
    timeout_s: float = 5.0,
    newest: Callable[[], int | None] = lambda: None,
    progress: Callable[[int], None] = lambda _done: None,
) -> Replay:
    """Per message of `batch` rows: request, await the reply, publish the labels; a
    message every `batch / rate` s (0: as soon as the previous one is done). A missing or
    error reply counts as no answer. `newest()` gives the learner's newest version."""
    from streamlearn.client.client import PredictionError

    n = len(y)
    predicted = np.full(n, np.nan, np.float32)
    versions = np.full(n, -1, np.int64)
    behind = np.full(n, -1, np.int64)
    errors: dict[str, int] = {}
    start = time.perf_counter()
    for lo in range(0, n, batch):
        if rate > 0:
            time.sleep(max(0.0, start + lo / rate - time.perf_counter()))
        xs, ys = x[lo : lo + batch], y[lo : lo + batch]
        part = slice(lo, lo + len(ys))
        try:
            reply = client.predict(model, xs, timeout=timeout_s)
        except (PredictionError, TimeoutError) as exc:
            key = str(exc)[:200]
            if key in errors or len(errors) < 20:  # bounded: a few kinds of failure
                errors[key] = errors.get(key, 0) + 1
        else:
            predicted[part] = decide(task, np.asarray(reply.y))
            versions[part] = reply.version
            latest = newest()
            if latest is not None:
                behind[part] = max(0, latest - reply.version)
        client.publish_many(model, xs, ys)
        progress(part.stop)
    seconds = time.perf_counter() - start
    return Replay(predicted, versions, behind, seconds, -(-n // batch), errors)


class LearnerWatch:
    """The learner's newest version, from its retained status (about once a second)."""

    def __init__(self, client: object, status_topic: str) -> None:
        self.client, self.topic = client, status_topic
        self.latest: dict = {}
        client.mqtt.message_callback_add(status_topic, self._on_status)
        client.mqtt.subscribe(status_topic, qos=1)

    def _on_status(self, _c: object, _u: object, msg: object) -> None:
        try:
            self.latest = json.loads(msg.payload) if msg.payload else {}
        except ValueError:
            return  # not ours to judge: `status` reports a bad status document

    def newest(self) -> int | None:
        version = self.latest.get("version")
        return int(version) if isinstance(version, int | float) else None

    def close(self) -> None:
        self.client.mqtt.message_callback_remove(self.topic)
        self.client.mqtt.unsubscribe(self.topic)


# -- the figures -------------------------------------------------------------------------


def report(task: str, y: np.ndarray, result: Replay, last: int, served: bool = False) -> list[str]:
    """The lines `evaluate` prints: prequential (with labels that come later: served), last
    N, samples/s, freshness."""
    scores = score(task, y, result.predicted)
    metric = "accuracy" if task in ("binary", "multiclass") else "MAE"
    n = len(y)
    window = scores[-last:]
    how = "served" if served else "prequential"
    lines = [
        f"{how} {metric}: {scores.mean():.4f} over {n:,} samples "
        f"(each scored before it was learned; {result.answered:,} of {len(result.versions):,} "
        f"samples answered)",
        f"last {len(window):,} {metric}: {window.mean():.4f}",
        f"samples/s: {n / max(result.seconds, 1e-9):,.0f} ({n:,} samples in "
        f"{result.seconds:.1f} s, request then {'label' if served else 'publish'}, "
        f"{result.messages:,} messages)",
    ]
    served = result.versions[result.versions >= 0]
    known = result.behind[result.behind >= 0]
    if not len(served):
        lines.append("freshness: no request was answered")
    else:
        lag = (
            f"{known.mean():.1f} versions behind the newest the learner reported on average "
            f"(max {known.max()})"
            if len(known)
            else "the learner's newest version unknown (no status seen)"
        )
        lines.append(f"freshness: replies came from versions {served.min()}..{served.max()}, {lag}")
    lines += [f"  {count} x {error}" for error, count in result.errors.items()]
    return lines


def plot(task: str, y: np.ndarray, result: Replay, last: int, path: str) -> None:
    """The running prequential figure and the one over the last `last` samples."""
    try:
        import matplotlib
    except ImportError:
        raise StreamlearnError(
            "--plot needs matplotlib: pip install matplotlib (or streamlearn[bench])"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = score(task, y, result.predicted)
    seen = np.arange(1, len(scores) + 1)
    metric = "accuracy" if task in ("binary", "multiclass") else "MAE"
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(seen, np.cumsum(scores) / seen, label=f"prequential {metric}", linewidth=2)
    ax.plot(seen, rolling(scores, last), label=f"{metric}, last {last}", linewidth=1)
    ax.set_xlabel("samples")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# -- the command -------------------------------------------------------------------------


def add_command(sub: argparse._SubParsersAction) -> None:
    """`streamlearn evaluate`, for cli.py's parser."""
    p = sub.add_parser("evaluate", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("file", help="CSV (header with the target column) or NDJSON payloads")
    p.add_argument("--config", help="streamlearn.toml (default: ./streamlearn.toml or the demo)")
    p.add_argument("--model")
    p.add_argument(
        "--target", help="the label's column or field (default: the model's target, else y)"
    )
    p.add_argument(
        "--label-delay",
        type=int,
        metavar="N",
        help="labels come later: each row is asked for with an id, its label published on "
        "the labels topic N rows later (not with the features); prints the served score "
        "from the replies and the service's own",
    )
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="rows per message")
    p.add_argument(
        "--rate",
        type=float,
        default=400,
        help="samples/s sent (default 400, as the quality bench); 0 = as fast as the actor "
        "answers, which on a short file outruns the learner's publishing (every 250 ms)",
    )
    p.add_argument("--last", type=int, default=DEFAULT_LAST, help="the recent window (samples)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
    p.add_argument("--plot", metavar="FILE.png", help="draw the running curve")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streamlearn.client.client import Client
    from streamlearn.config import load_config, load_settings
    from streamlearn.contract.names import Names

    model = load_config(args.config).model(args.model)
    settings = load_settings()
    print(settings.which_stack(), file=sys.stderr)
    for flag in ("batch", "last"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.rate < 0 or args.timeout <= 0:
        raise ConfigError(f"--rate must be >= 0 and --timeout > 0, got {args.rate}, {args.timeout}")
    if model.window is not None:
        raise ConfigError(f"evaluate replays flat samples; model {model.name} takes windows")
    if args.label_delay is not None and args.label_delay < 1:
        raise ConfigError(
            f"--label-delay must be >= 1 (a label comes after its request was served), "
            f"got {args.label_delay}"
        )
    target = args.target or (model.target if model.fields is not None else "y")
    rows = _rows(args.file, model, target, args.label_delay is not None)
    names = Names(model.name, settings.topic_prefix, settings.key_prefix)
    y = rows[1]
    progress = ProgressBar(len(y))
    client = Client(settings.mqtt, ca_file=settings.mqtt_ca_file, topic_prefix=names.topic_prefix)
    served: list[str] = []
    try:
        watch = LearnerWatch(client, names.status_topic)
        options = dict(
            rate=args.rate, timeout_s=args.timeout, newest=watch.newest, progress=progress.update
        )
        if isinstance(rows[0], np.ndarray) and args.label_delay is None:
            result = replay(client, model.name, model.task, *rows, batch=args.batch, **options)
        else:
            from streamlearn.cli import labelled

            result = labelled.replay_rows(
                client,
                model.name,
                model.task,
                *rows,
                label_delay=args.label_delay,
                batch=args.batch,
                target=target,
                **options,
            )
            if args.label_delay is not None:
                served = labelled.served_lines(watch, len(y))
        watch.close()
    finally:
        client.close()
    progress.finish(len(y))
    print(f"evaluated {args.file} on model {model.name} ({names.topic_prefix}/{model.name})")
    if args.label_delay is not None:
        print(
            f"labels {args.label_delay} rows after their requests, on {names.labels_topic} "
            "(joined to the served request by its id)"
        )
    print("\n".join(report(model.task, y, result, args.last, served=args.label_delay is not None)))
    if served:
        print("\n".join(served))
    if args.plot:
        plot(model.task, y, result, args.last, args.plot)
        print(f"plot: {args.plot}")
    return 0


def _rows(path: str, model: Any, target: str, by_row: bool) -> tuple[Any, np.ndarray]:
    """The file as requests and labels: named objects for a named model; positional rows
    (as lists when each is asked for alone, by `--label-delay`) otherwise."""
    if model.fields is not None:
        from streamlearn.cli import labelled

        return labelled.read_named(path, model, target)
    x, y = read_samples(path, target)
    if x.shape[1] != model.inputs:
        raise ConfigError(
            f"{path}: {x.shape[1]} input columns, model {model.name} has inputs = {model.inputs}"
        )
    return (x.tolist(), y) if by_row else (x, y)
