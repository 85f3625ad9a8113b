"""The library's speed and accuracy a sample at a time: `OnlineModel.learn_one` and
`predict_one` against River's `learn_one` and `predict_one` on the same streams, in one run.

Per stream (`bench/_quality_streams.py`: River's synthetic generators, scikit-learn's
bundled sets), test-then-train over its first `--samples`:

- `streamlearn one`: the service's model as `OnlineModel` (the default spec, as the
  quality bench builds it), `predict_one(x)` then `learn_one(x, y)` per sample;
- `streamlearn many`: the same model, `predict_many` then `learn_many` a message of
  `--message-size` samples (the learner's way: one step per message);
- River's references one sample at a time (`--river`, default linear and hat: logistic or
  linear regression behind a scaler, the Hoeffding Adaptive Tree).

Columns: samples per CPU second of this process (every thread's: `time.process_time`,
so other load does not move it; the model is built and warmed up before the clock
starts), and the prequential score (accuracy, or mean absolute error). `speed_vs_river`
is samples/s over River's linear model's on the same stream. No goal is set (issue 63
asks for the figures); the table and bench/results/library.json hold them, and a full run
(the default streams and samples) goes to the history.

    .venv/bin/python -m bench.library                       # sea, wine, friedman: minutes
    .venv/bin/python -m bench.library --streams sea --samples 300
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from bench import _quality_learners as learners
from bench import _quality_streams as streams
from bench._report import report

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
STREAMS, SAMPLES, RIVER = "sea,wine,friedman", 1000, "linear,hat"  # a full run's (recorded)


def one_at_a_time(stream: streams.Stream, model: Any) -> learners.Outcome:
    """`predict_one`, then `learn_one`, a sample at a time, as a user's loop does."""
    predicted = np.full(stream.n, np.nan, np.float32)
    start = time.process_time()
    for i in range(stream.n):
        x = stream.x[i]
        predicted[i] = model.predict_one(x)
        model.learn_one(x, stream.y[i])
    return learners.Outcome(learners.scores(stream, predicted), time.process_time() - start)


def _row(stream: streams.Stream, learner: str, outcome: learners.Outcome) -> dict[str, Any]:
    metric = "acc" if stream.classification else "mae"
    return {
        "stream": stream.name,
        "learner": learner,
        "samples": stream.n,
        "samples_per_s": round(outcome.samples_per_s, 1),
        metric: round(outcome.score, 4),
    }


def run(stream: streams.Stream, args: argparse.Namespace) -> list[dict[str, Any]]:
    cfg = learners.model_config(stream)
    rows = []
    learners.seed(0)
    model = learners.in_process(cfg)
    rows.append(_row(stream, "streamlearn one", one_at_a_time(stream, model)))
    learners.seed(0)
    model = learners.in_process(cfg)
    many = learners.run_in_process(stream, args.message_size, model)
    rows.append(_row(stream, f"streamlearn many ({args.message_size})", many))
    for kind in args.river.split(","):
        rows.append(_row(stream, f"river {kind}", learners.run_river(kind, stream, 1)))
    linear = next(r for r in rows if r["learner"] == "river linear")["samples_per_s"]
    for row in rows:
        row["speed_vs_river"] = round(row["samples_per_s"] / linear, 4)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.library", description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default=STREAMS, help="comma-separated")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="per synthetic stream")
    parser.add_argument("--message-size", type=int, default=40, help="samples a learn_many")
    parser.add_argument("--river", default=RIVER, help="River's references to run")
    args = parser.parse_args(argv)
    if "linear" not in args.river.split(","):
        parser.error("--river: include linear (the speed column's baseline)")
    rows = []
    for spec in streams.chosen(args.streams, "bench.library"):
        stream = streams.load(spec, args.samples)
        started = time.monotonic()
        rows += run(stream, args)
        print(f"  {stream.name}: {time.monotonic() - started:.0f} s", flush=True)
    figures: dict[str, dict[str, float]] = {}
    for r in rows:
        short = r["learner"].replace("streamlearn ", "")
        score = r.get("acc", r.get("mae"))
        figures.setdefault(r["stream"], {}).update(
            {f"{short} /s": r["samples_per_s"], short: score}
        )
    whole = (args.streams, args.samples, args.river) == (STREAMS, SAMPLES, RIVER)
    report("library", rows, None, figures=figures, record=whole, samples=args.samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
