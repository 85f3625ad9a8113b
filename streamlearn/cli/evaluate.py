"""`streamlearn evaluate`: how well the running service learns a stream, test-then-train.

A file's samples are replayed through the real service a message at a time: the rows are
asked for first (a prediction request to the actor, its reply awaited), then published
with their labels for the learner. Each sample is so scored by a model that has not seen
it, as River's `evaluate.progressive_val_score` does in one process, but with the
service's staleness counted: a sample is learned, published as a new version and loaded
by the actor only some time after it was sent.

The replay itself is `streamlearn.client.replay`, which the quality benchmark's service
runs drive too (bench/quality.py); the scores are `streamlearn.online.evaluate`'s.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from streamlearn.cli.light import MAX_SAMPLES, ProgressBar, csv_samples, ndjson_lines
from streamlearn.client.replay import DEFAULT_BATCH, LearnerWatch, Replay, replay
from streamlearn.errors import ConfigError, StreamlearnError
from streamlearn.online.evaluate import rolling, score

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
    xs: list[list[float]]
    ys: list[float]
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
    versions = result.versions[result.versions >= 0]
    known = result.behind[result.behind >= 0]
    if not len(versions):
        lines.append("freshness: no request was answered")
    else:
        lag = (
            f"{known.mean():.1f} versions behind the newest the learner reported on average "
            f"(max {known.max()})"
            if len(known)
            else "the learner's newest version unknown (no status seen)"
        )
        lines.append(
            f"freshness: replies came from versions {versions.min()}..{versions.max()}, {lag}"
        )
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
    """`streamlearn evaluate`, for `streamlearn.cli.main`'s parser."""
    p = sub.add_parser("evaluate", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("file", help="CSV (header with the target column) or NDJSON payloads")
    p.add_argument("--config", help="streamlearn.toml (default: ./streamlearn.toml or the demo)")
    p.add_argument("--model", help="model name (default: the only model)")
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
    from streamlearn.config.loading import load_config
    from streamlearn.config.settings import load_settings
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
            f"labels {args.label_delay} rows after their requests, on "
            f"{names.topic('labels/' + client.client_id)} (each joined to this client's "
            "served request of its id)"
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
