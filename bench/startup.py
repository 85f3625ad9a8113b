"""Start-up as a device sees it: from `streamlearn up` on a new model to useful answers.

A device asks for a prediction, then sends its labelled sample, one at a time (about 20 a
second, each request waiting for its reply up to `--reply-timeout`), from the moment `up`
is launched: the stack file's broker is not even there yet. Timed from the launch:

- the first reply (of any kind), and how many of the replies from then on were errors
  (before issue 61 a new model answered "no weights published yet" for its first seconds);
- the first reply with weights (any `version`, 0 included: a built-in model answers its
  prior as version 0 before the learner's first version);
- the first reply by a trained version (`version` >= 2: version 1 is the initial weights,
  published before the learner's first step).

`--baseline DIR` runs a checkout of another release (a `git worktree` of it) the same way,
turn about with this one, `--runs` each, with this checkout's virtual environment: the
release before, measured in the same sitting. Writes bench/results/startup.json.

    .venv/bin/python -m bench.startup
    git worktree add /tmp/before HEAD~1 && .venv/bin/python -m bench.startup --baseline /tmp/before
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._report import exit_status, report

ROOT = Path(__file__).resolve().parent.parent
TOML = '[models.startup]\ninputs = 4\ntask = "binary"\n'


def one_start(source: Path, seconds: float, reply_timeout: float, seed: int) -> dict[str, Any]:
    """`streamlearn up` from the checkout `source`, a device at it from the launch."""
    from streamlearn import Client
    from streamlearn.client.pending import PredictionError
    from streamlearn.errors import StreamlearnError

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        config = work / "streamlearn.toml"
        config.write_text(TOML)
        stack_file = work / "stack.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
        env |= {
            "STREAMLEARN_STACK_FILE": str(stack_file),
            "XDG_STATE_HOME": str(work / "state"),
            "PYTHONPATH": str(source),
            "PYTHONUNBUFFERED": "1",
        }
        argv = [sys.executable, "-m", "streamlearn.cli", "up", "--config", str(config)]
        argv += ["--quiet", "--no-dashboard", "--runs-dir", str(work / "runs")]
        launched = time.monotonic()
        up = subprocess.Popen(
            argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        os.environ["STREAMLEARN_STACK_FILE"] = str(stack_file)
        client: Client | None = None
        first = answered = trained = None
        replies = errors = timeouts = sent = 0
        error_texts: list[str] = []
        try:
            while time.monotonic() - launched < seconds:
                if client is None:
                    if not stack_file.exists():  # else the client would try the default URL
                        time.sleep(0.02)
                        continue
                    try:
                        client = Client(connect_timeout=1.0)
                    except StreamlearnError:
                        time.sleep(0.05)  # the stack file or its broker is not there yet
                        continue
                x = rng.normal(size=4)
                y = float(x[0] + x[1] > 0)
                sent += 1
                now = time.monotonic() - launched
                try:
                    p = client.predict("startup", x.tolist(), timeout=reply_timeout)
                except PredictionError as exc:
                    first = first if first is not None else now
                    replies, errors = replies + 1, errors + 1
                    error_texts.append(str(exc)[:80])
                except (TimeoutError, StreamlearnError):
                    timeouts += 1  # no actor subscribed yet: the broker drops the request
                else:
                    done = time.monotonic() - launched
                    first = first if first is not None else done
                    answered = answered if answered is not None else done
                    if trained is None and p.version >= 2:
                        trained = done
                    replies += 1
                client.publish("startup", x.tolist(), y)
                time.sleep(0.03)
        finally:
            if client is not None:
                client.close()
            os.environ.pop("STREAMLEARN_STACK_FILE", None)
            up.send_signal(signal.SIGINT)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
    return {
        "first_reply_s": _s(first),
        "first_answer_s": _s(answered),
        "first_trained_s": _s(trained),
        "requests": sent,
        "replies": replies,
        "error_replies": errors,
        "unanswered_before_first": timeouts,
        "errors_seen": sorted(set(error_texts))[:3],
    }


def _s(t: float | None) -> float | None:
    return None if t is None else round(t, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="per start, from launch")
    parser.add_argument("--runs", type=int, default=2, help="starts of each checkout")
    parser.add_argument("--reply-timeout", type=float, default=0.5)
    parser.add_argument("--baseline", type=Path, help="a checkout of the release before")
    args = parser.parse_args(argv)
    sources = {"this checkout": ROOT}
    if args.baseline is not None:
        sources["baseline: " + str(args.baseline)] = args.baseline.resolve()
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for label, source in sources.items():
            row = {"checkout": label, "run": run + 1}
            row |= one_start(source, args.seconds, args.reply_timeout, seed=run)
            print(row, flush=True)
            rows.append(row)
    mine = [r for r in rows if r["checkout"] == "this checkout"]
    worst = {
        k: max((r[k] if r[k] is not None else float("inf")) for r in mine)
        for k in ("first_reply_s", "first_trained_s")
    }
    errors = sum(r["error_replies"] for r in mine)
    checks = {
        f"no error reply from the first reply on (got {errors} in {len(mine)} starts)": (
            errors == 0
        ),
        f"first reply <= 3 s from `up` (worst {worst['first_reply_s']} s)": (
            worst["first_reply_s"] <= 3
        ),
        f"first reply by a trained version <= 8 s from `up` (worst "
        f"{worst['first_trained_s']} s)": worst["first_trained_s"] <= 8,
    }
    figures = {f"worst_{k}": v for k, v in worst.items()} | {"error_replies": errors}
    report("startup", rows, checks, figures=figures, settings=vars(args) | {"toml": TOML})
    return exit_status(checks)


if __name__ == "__main__":
    raise SystemExit(main())
