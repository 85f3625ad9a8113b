"""Cold start: how useful a new model is over its first samples, judged one sample per
message as River is (`progressive_val_score`: each sample predicted before it is learned).

Per stream of bench.quality (`bench/_quality_streams.py`), over its first `--head`
samples (default 500; the whole of a shorter stream):

- through the service (`bench/_quality_service.py`, default settings): a fresh learner,
  ingest and actor per run, one sample a message, each asked for before it is published
  (a request, its reply, then the labelled sample), `--rate` samples a second (default 25,
  a device's pace, at which each answer comes from a version that learned the sample
  before it: as fast as the service answers, each is tens of samples behind);
- River's models on the same samples in the same order, one at a time (the references);
- streamlearn in this process, one sample per message (`--no-service`: this view alone).

Columns: the first 50 samples, the first 200 (the first third of a stream shorter than
600), and the rest of the head; accuracy or mean absolute error. The service and the
in-process learner are means over `--runs` runs (default 3: 200 samples are too few to
judge 0.02 in one); the in-process runs are seeded 0, 1, 2..., the service's start from
fresh processes, on keys of their own. River's models are seeded: one run.

Checks (issue 51): over the first 200 samples, the service within 0.02 of River's best
model on the same samples (MAE within 5%). The 40-sample view, against River given the
same messages, stays in bench.quality (`river_msg`). Writes bench/results/coldstart.json.

    .venv/bin/python -m bench.coldstart                          # every stream: about an hour
    .venv/bin/python -m bench.coldstart --streams sea,wine --runs 1
    .venv/bin/python -m bench.coldstart --no-service             # in-process only: minutes
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import _quality_learners as learners
from bench import _quality_streams as streams
from bench._report import exit_status, report, variant
from bench.quality import _stale, add_model_settings, overrides

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
FIRST = 50
START = 200  # the start the issue judges; the first third of a stream shorter than 600
ACC_MARGIN = 0.02  # accuracy points below River's best allowed over the start
MAE_MARGIN = 0.05  # MAE above River's best allowed over the start, as a share


def spans(n_stream: int, head: int) -> dict[str, slice]:
    """The columns' samples: the first 50, the start, the rest of the head.

    >>> [(k, s.start, s.stop) for k, s in spans(2500, 500).items()]
    [('first 50', 0, 50), ('first 200', 0, 200), ('rest', 200, 500)]
    >>> spans(178, 500)["first 200"]  # wine: the first third
    slice(0, 59, None)
    """
    start = START if n_stream >= 3 * START else n_stream // 3
    head = min(head, n_stream)
    return {
        f"first {FIRST}": slice(0, FIRST),
        f"first {START}": slice(0, start),
        "rest": slice(start, head),
    }


def _split(outcome: learners.Outcome, cols: dict[str, slice]) -> dict[str, float]:
    return {name: float(np.mean(outcome.scores[s])) for name, s in cols.items()}


def _mean(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def evaluate(
    stream: streams.Stream, args: argparse.Namespace, stack: object, work: Path
) -> tuple[dict, dict]:
    """Every learner on the head of `stream`: its table row and the JSON details."""
    head = dataclasses.replace(stream, x=stream.x[: args.head], y=stream.y[: args.head])
    cols = spans(stream.n, args.head)
    river = {k: _split(learners.run_river(k, head), cols) for k in learners.REFERENCES}
    inproc = []
    for run in range(args.runs):
        learners.seed(run)
        learner = learners.in_process(learners.model_config(head, args.overrides))
        inproc.append(_split(learners.run_in_process(head, 1, learner), cols))
    # served: the versions that answered; stale: answered by no newer version than the
    # sample before (it had not learned that sample yet)
    service: list[dict[str, float]] = []
    stale: list[dict[str, int]] = []
    served: list[list[int]] = []
    if stack is not None:
        from bench._quality_service import Service

        for run in range(args.runs):
            svc = Service(stack, head, work, args.overrides, tag=f"cold{run}")
            try:
                svc.wait_ready()
                outcome = svc.run(1, args.rate)
            finally:
                svc.close()
            service.append(_split(outcome, cols))
            versions = (outcome.info or {}).get("versions", [])
            stale.append({c: _stale(versions[s]) for c, s in cols.items()})
            served.append(versions[: cols[f"first {START}"].stop])
    start = f"first {START}"
    pick = max if stream.classification else min
    best = pick(river, key=lambda k: river[k][start])
    row: dict[str, Any] = {"stream": stream.name, "metric": _metric(stream), "n": head.n}
    for view, scores in (("river", river[best]), ("inproc", _mean(inproc))):
        row |= {f"{view} {col}": v for col, v in scores.items()}
    row["best River"] = best
    if service:
        row |= {f"service {col}": v for col, v in _mean(service).items()}
    if stale:
        row |= {f"stale {col}": v for col, v in _mean(stale).items()}
    details = {"river": river, "inproc": inproc, "service": service, "stale": stale}
    details["versions over the start"] = served
    return row, details


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _metric(stream: streams.Stream) -> str:
    return "acc" if stream.classification else "mae"


def within(row: dict, view: str) -> bool | None:
    """`view`'s score over the start within the issue's margin of River's best there.

    >>> within({"metric": "acc", "river first 200": 0.8, "service first 200": 0.79}, "service")
    True
    >>> within({"metric": "mae", "river first 200": 2.0, "service first 200": 2.2}, "service")
    False
    """
    mine, best = row.get(f"{view} first {START}"), row[f"river first {START}"]
    if mine is None:
        return None
    if row["metric"] == "acc":
        return bool(mine >= best - ACC_MARGIN)
    return bool(mine <= best * (1 + MAE_MARGIN))


def _parser() -> argparse.ArgumentParser:
    names = [s.name for s in streams.specs()]
    parser = argparse.ArgumentParser(prog="bench.coldstart", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--streams", help="comma-separated names (default: all): " + ", ".join(names)
    )
    parser.add_argument("--head", type=int, default=500, help="samples judged per stream")
    parser.add_argument("--runs", type=int, default=3, help="runs averaged, per learner")
    parser.add_argument(
        "--rate",
        type=float,
        default=25,
        help="service: samples/s sent (0: as fast as it answers; on 2 cores that is hundreds "
        "a second, and each answer is then tens of samples behind the learner)",
    )
    add_model_settings(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.overrides = overrides(args.set)
    specs = streams.chosen(args.streams, "bench.coldstart")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    started = time.monotonic()
    rows, details = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-coldstart-") as tmp:
        work = Path(tmp)
        with contextlib.ExitStack() as servers:
            from bench.quality import _stack

            stack = None if args.no_service else _stack(servers, work)
            for spec in specs:
                t = time.monotonic()
                # bench.quality's stream, of which the head is judged (2,500 samples: the
                # same first samples as there)
                row, details[spec.name] = evaluate(streams.load(spec, 2500), args, stack, work)
                rows.append(row)
                print(f"  {spec.name}: {time.monotonic() - t:.0f} s", flush=True)
    view = "inproc" if args.no_service else "service"
    checks = {
        f"{r['stream']}: {view} over the first {START} within "
        f"{'0.02' if r['metric'] == 'acc' else '5%'} of River's best ({r['best River']})": ok
        for r in rows
        if (ok := within(r, view)) is not None
    }
    report(
        "coldstart",
        rows,
        checks,
        record=args.streams is None,
        variant=variant(parser, args),
        figures={r["stream"]: {k: _round(v) for k, v in r.items() if k != "stream"} for r in rows},
        seconds=round(time.monotonic() - started, 1),
        head=args.head,
        runs=args.runs,
        overrides=args.overrides,
        references=learners.REFERENCES,
        streams=details,
    )
    return exit_status(checks)


if __name__ == "__main__":
    raise SystemExit(main())
