"""Shared output of the benchmarks: a printed table and a JSON file under bench/results/."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def report(
    name: str, rows: Sequence[dict[str, Any]], checks: dict[str, bool] | None = None, **meta: Any
) -> Path:
    """Print `rows` as a table, then each named check as PASS/FAIL; write all to JSON.

    `checks` are the issue's targets, computed as ratios against a baseline measured in the
    same run, so that a noisy shared machine moves both sides alike.
    """
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
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
        **meta,
        "rows": list(rows),
        "checks": checks or {},
    }
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"wrote {path}")
    return path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)
