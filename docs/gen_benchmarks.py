"""The docs' benchmarks page: each benchmark's latest run in bench/results/history.jsonl.

Every full run of a benchmark (`python -m bench.NAME`, not `--quick`) appends one line to
the history: the benchmark, the time, the commit, its figures and its checks with their
verdicts (`bench/_report.py`). `render` turns those lines into one markdown page, a
section per benchmark with its latest run's figures and checks; it is pure, so
tests/unit/test_bench_pages.py checks it without mkdocs. mkdocs-gen-files runs this file
at build time (`runpy.run_path`) and writes the page as `benchmarks/results.md`; run
standalone, it prints the page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HISTORY = Path(__file__).resolve().parent.parent / "bench" / "results" / "history.jsonl"
PAGE = "benchmarks/results.md"
ORDER = (
    "ingest",
    "learner",
    "serve",
    "doors",
    "quality",
    "coldstart",
    "library",
    "startup",
    "hostile",
    "hostile_http",
    "soak",
    "mutants",
)
NOTES = {  # below a benchmark's figures
    "quality": "Scores are prequential over the whole stream: accuracy (acc) or mean absolute "
    "error (mae). The margin is the service's score against the best River model's, signed so "
    "that positive is better (accuracy points, or MAE saved).",
    "coldstart": "Each stream's first 500 samples, one sample per message at 25 a second: "
    "accuracy (acc) or mean absolute error (mae) over the first 50, the first 200 (the first "
    "third of a stream shorter than 600) and the rest; the service and in-process figures are "
    "means over 3 runs, `river` is River's best model over the first 200. `stale`: answers "
    "from a version that had not yet learned the sample before.",
}
NOTES["library"] = (
    "Per stream: samples per CPU second (`/s`) and the prequential score, accuracy or mean "
    "absolute error (wine and sea: accuracy; friedman: MAE). `one`: `predict_one` then "
    "`learn_one` a sample at a time; `many (40)`: `predict_many` then `learn_many` a message "
    "of 40; River's models a sample at a time."
)
REPRODUCE = {"hostile_http": "python -m bench.hostile"}  # its HTTP rows; else bench.NAME
ABOUT = {
    "ingest": "samples per second through one ingest process, against a raw MQTT subscriber",
    "learner": "the learner's throughput, against training from memory",
    "serve": "prediction latency and throughput of one actor, over MQTT and HTTP",
    "doors": "NVIDIA's tritonclient against one actor's HTTP and gRPC doors at 1, 8 and 64 "
    "requests in flight, and the same answers over HTTP, gRPC and MQTT",
    "quality": "how well the service learns, test-then-train, against River's online models",
    "coldstart": "how useful a new model is over its first samples, one sample per message",
    "library": "the library's `learn_one`/`predict_one` a sample at a time, and `learn_many` "
    "40 at a time, against River's models on the same streams",
    "startup": "from `streamlearn up` on a new model to its first reply and first trained "
    "version, as a device asks",
    "hostile": "what a malformed or malicious request costs the actor, against a valid one",
    "hostile_http": "legitimate requests' latency while the actor's HTTP door is abused",
    "soak": "hours of mixed traffic with restarts: nothing lost, nothing learned twice",
    "mutants": "deliberately broken copies of the service: the tests must catch each",
}


def parse(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The history's runs, oldest first (blank lines skipped)."""
    return [json.loads(line) for line in lines if line.strip()]


def title(run: dict[str, Any]) -> str:
    """A run's benchmark, with its variant's options where it is one (`bench._report`).

    >>> title({"benchmark": "quality", "variant": "--message-size 1 --no-service"})
    'quality --message-size 1 --no-service'
    """
    return " ".join(filter(None, (run["benchmark"], run.get("variant"))))


def anchor(name: str) -> str:
    """The heading's anchor, as mkdocs makes it.

    >>> anchor("quality --message-size 1 --no-service")
    'quality-message-size-1-no-service'
    """
    return re.sub(r"-+", "-", re.sub(r"[^\w\- ]", "", name.lower()).strip().replace(" ", "-"))


def latest(runs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each benchmark's (and each variant's) last run, in `ORDER`, then any other by name;
    a variant after its benchmark."""
    last: dict[str, dict[str, Any]] = {}
    for run in runs:
        last[title(run)] = run
    rank = {name: i for i, name in enumerate(ORDER)}
    names = sorted(
        last,
        key=lambda name: (rank.get(last[name]["benchmark"], len(ORDER)), name),
    )
    return {name: last[name] for name in names}


def render(runs: list[dict[str, Any]]) -> str:
    """The whole page: an overview line per benchmark, then a section each."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[title(run)] = counts.get(title(run), 0) + 1
    chosen = latest(runs)
    parts = [
        "# Benchmark results",
        "Each benchmark's latest full run, as recorded in `bench/results/history.jsonl` "
        "(one line per full run, kept in git). The checks are the project's targets, most "
        "of them ratios against a baseline measured in the same run, so that a busy "
        "machine moves both sides alike. The numbers come from a shared 2-core machine: "
        "rerun on yours to compare.",
        table(
            ["benchmark", "latest run", "commit", "checks passed", "runs recorded"],
            [
                [
                    f"[{name}](#{anchor(name)})",
                    _date(run),
                    _commit(run),
                    _passed(run["checks"]),
                    str(counts[name]),
                ]
                for name, run in chosen.items()
            ],
        ),
    ]
    parts += [section(run) for run in chosen.values()]
    return "\n\n".join(parts) + "\n"


def section(run: dict[str, Any]) -> str:
    """One benchmark's latest run: figures (per stream where it has streams), then checks."""
    name = run["benchmark"]
    figures, checks = run.get("figures") or {}, run.get("checks") or {}
    parts = [f"## {title(run)}"]
    if name in ABOUT:
        parts.append(ABOUT[name][0].upper() + ABOUT[name][1:] + ".")
    parts.append(
        f"Run {_date(run)} at commit {_commit(run)}; {_passed(checks)} checks passed. "
        f"Reproduce: `{run.get('command') or REPRODUCE.get(name, f'python -m bench.{name}')}`."
    )
    per_subject = bool(figures) and all(isinstance(v, dict) for v in figures.values())
    if per_subject:
        parts.append(pivot(figures))
        if name in NOTES:
            parts.append(NOTES[name])
        failed = [label for label, ok in checks.items() if not ok]
        if failed:
            parts.append("Checks that failed:\n\n" + "\n".join(f"- {_cell(c)}" for c in failed))
        return "\n\n".join(parts)
    if figures:
        rows = [[_cell(k), _number(v)] for k, v in figures.items()]
        parts.append(table(["figure", "value"], rows))
    if checks:
        verdicts = [["PASS" if ok else "**FAIL**", _cell(c)] for c, ok in checks.items()]
        parts.append(table(["verdict", "check"], verdicts))
    if not figures and not checks:
        parts.append("This run recorded no figures and no checks.")
    return "\n\n".join(parts)


def pivot(figures: dict[str, dict[str, Any]]) -> str:
    """`{subject: {measure: value}}` as a table: a row per subject, a column per measure.

    >>> print(pivot({"sea": {"service": 0.9}, "wine": {"service": 0.8, "n": 178}}))
    | stream | service | n |
    | --- | --- | --- |
    | sea | 0.900 | - |
    | wine | 0.800 | 178 |
    """
    measures = list(dict.fromkeys(m for values in figures.values() for m in values))
    rows = [
        [_cell(subject), *(_number(values.get(m)) for m in measures)]
        for subject, values in figures.items()
    ]
    return table(["stream", *measures], rows)


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table.

    >>> print(table(["a", "b"], [["1", "2"]]))
    | a | b |
    | --- | --- |
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _number(value: Any) -> str:
    """A figure as a table cell: ratios to 3 places, large rates with thousands separators.

    >>> [_number(v) for v in (1.04118, 178997.6, 3, None, "arf", 0.0000123)]
    ['1.041', '178,998', '3', '-', 'arf', '1.23e-05']
    """
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _cell(str(value))
    if isinstance(value, int):
        return f"{value:,}"
    if value != 0 and abs(value) < 0.001:
        return f"{value:.3g}"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _passed(checks: dict[str, bool]) -> str:
    return f"{sum(1 for ok in checks.values() if ok)} of {len(checks)}"


def _date(run: dict[str, Any]) -> str:
    return str(run.get("at", "?")).replace("T", " ").replace("Z", " UTC")


def _commit(run: dict[str, Any]) -> str:
    commit = run.get("commit")
    if not commit:
        return "unknown"
    head, dirty, _ = commit.partition("+dirty")
    return f"`{head}`" + (" (with uncommitted changes)" if dirty else "")


def page(history: Path = HISTORY) -> str:
    """The page for `history` (by default the repository's)."""
    return render(parse(history.read_text().splitlines()))


if __name__ == "<run_path>":  # mkdocs-gen-files, at build time
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "w") as out:
        out.write(page())
elif __name__ == "__main__":
    print(page(), end="")
