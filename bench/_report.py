"""Shared output of the benchmarks: a printed table and a JSON file under bench/results/.

A full run (not `--quick`) also appends one line to `bench/results/history.jsonl`, kept in
git: the benchmark, the time, the commit and each check with its verdict, so a regression
shows against the runs before it. `--quick` is the CI smoke: a short run whose ratio checks
are held to `QUICK_MARGIN` of each goal (short runs on a shared machine are noisy; a 2x
regression still fails), exiting 1 on a FAIL like a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
HISTORY = RESULTS / "history.jsonl"
QUICK_MARGIN = 0.5  # a --quick run checks half of each goal


def goal(value: float, target: float, quick: bool) -> bool:
    """`value >= target`, or `>= QUICK_MARGIN * target` in a quick run (for a ceiling,
    pass both inverted: `goal(1 / ratio, 1 / limit, quick)`)."""
    return value >= target * (QUICK_MARGIN if quick else 1.0)


def exit_status(checks: dict[str, bool]) -> int:
    """What a benchmark's main returns: 1 if any check failed."""
    return 0 if all(checks.values()) else 1


def report(
    name: str,
    rows: Sequence[dict[str, Any]],
    checks: dict[str, bool] | None = None,
    *,
    quick: bool = False,
    figures: dict[str, float] | None = None,
    record: bool = True,
    variant: str | None = None,
    **meta: Any,
) -> Path:
    """Print `rows` as a table, then each named check as PASS/FAIL; write all to JSON.

    `checks` are the issue's targets, computed as ratios against a baseline measured in the
    same run, so that a noisy shared machine moves both sides alike. `figures`, the few
    numbers the checks judge (ratios, rates), go to the history with them, unless `quick`
    or not `record` (a run of some streams only). A `variant` (another view of the same
    benchmark: `--message-size 1 --no-service`) is recorded with the command that ran it, and
    the results page shows it beside the default run rather than in its place.
    """
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    if quick and checks:
        print(f"--quick: each check below holds its figure to {QUICK_MARGIN:.0%} of the goal named")
    for label, ok in (checks or {}).items():
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {
        "benchmark": name,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "quick": quick,
        **meta,
        "figures": figures or {},
        "rows": list(rows),
        "checks": checks or {},
    }
    if quick:
        path = RESULTS / f"{name}-quick.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"wrote {path}")
    if not quick and record:
        line = {k: doc[k] for k in ("benchmark", "at", "figures", "checks")}
        line["commit"] = _commit()
        if variant:
            line["variant"] = variant
            line["command"] = f"python -m bench.{name} {variant}"
        with HISTORY.open("a") as history:
            history.write(json.dumps(line, default=str) + "\n")
        print(f"appended to {HISTORY}")
    return path


def variant(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The options of `args` that differ from `parser`'s defaults, but `--streams` (a run
    of some streams only is not recorded at all): what makes a run a variant, or None.

    >>> p = argparse.ArgumentParser()
    >>> _ = p.add_argument("--message-size", type=int, default=40)
    >>> _ = p.add_argument("--no-service", action="store_true")
    >>> variant(p, p.parse_args(["--message-size", "1", "--no-service"]))
    '--message-size 1 --no-service'
    >>> variant(p, p.parse_args([])) is None
    True
    """
    defaults = vars(parser.parse_args([]))
    words = []
    for action in parser._actions:
        key = action.dest
        if key in ("help", "streams") or getattr(args, key, None) == defaults.get(key):
            continue
        flag = action.option_strings[-1]
        value = getattr(args, key)
        values = value if isinstance(value, list) else [value]
        words += [flag if v is True else f"{flag} {v}" for v in values]
    return " ".join(words) or None


def _commit() -> str | None:
    """HEAD, with `+dirty` when the tree has uncommitted changes (None outside git)."""
    root = RESULTS.parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)
