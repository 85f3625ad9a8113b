"""The docs' benchmarks page (docs/gen_benchmarks.py), rendered from a few history lines."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

OLD_QUALITY = {
    "benchmark": "quality",
    "at": "2026-11-20T10:00:00Z",
    "figures": {},
    "checks": {"sea: service >= best River (linear)": False},
    "commit": "aaaaaaaaaa",
}
QUALITY = {
    "benchmark": "quality",
    "at": "2026-11-28T09:00:00Z",
    "figures": {
        "sea": {
            "metric": "acc",
            "service": 0.91234,
            "best River": 0.9,
            "River model": "linear",
            "margin": 0.01234,
        },
        "friedman": {
            "metric": "mae",
            "service": 1.5,
            "best River": 1.75,
            "River model": "hat",
            "margin": 0.25,
        },
    },
    "checks": {
        "sea: service >= best River (linear)": True,
        "friedman: service <= best River (hat)": True,
        "wine: service >= best River (knn)": False,
    },
    "commit": "bbbbbbbbbb+dirty",
}
OLD_SERVE = {
    "benchmark": "serve",
    "at": "2026-11-26T12:00:00Z",
    "figures": {"p50_low_ms": 9.0},
    "checks": {"freshness p50 <= 300 ms (got 900 ms)": False},
    "commit": "cccccccccc",
}
SERVE = {
    "benchmark": "serve",
    "at": "2026-11-27T15:10:26Z",
    "figures": {"p50_low_ms": 1.893083, "max_per_s": 3754.67},
    "checks": {"freshness p50 <= 300 ms (got 73 ms)": True, "HTTP | MQTT both answer": True},
    "commit": "dddddddddd",
}
SOAK = {
    "benchmark": "soak",
    "at": "2026-11-25T02:47:33Z",
    "figures": {},
    "checks": {"no sample lost": True},
    "commit": "eeeeeeeeee",
}


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_benchmarks", ROOT / "docs/gen_benchmarks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page(gen: ModuleType) -> str:
    lines = [json.dumps(run) for run in (OLD_QUALITY, OLD_SERVE, SOAK, QUALITY, SERVE)]
    return gen.render(gen.parse(["", *lines, ""]))


def section(page: str, name: str) -> str:
    return page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]


def test_each_benchmark_gets_a_section_in_order(page: str):
    heads = [line for line in page.splitlines() if line.startswith("## ")]
    assert heads == ["## serve", "## quality", "## soak"]


def test_the_latest_runs_figures_and_checks_with_date_commit_and_how_to_reproduce(page: str):
    serve = section(page, "serve")
    assert "2026-11-27 15:10:26 UTC" in serve and "`dddddddddd`" in serve
    assert "| p50_low_ms | 1.893 |" in serve and "| max_per_s | 3,755 |" in serve
    assert "| PASS | freshness p50 <= 300 ms (got 73 ms) |" in serve
    assert "| PASS | HTTP \\| MQTT both answer |" in serve  # a | in a label stays in its cell
    assert "`python -m bench.serve`" in serve
    assert "Prediction latency and throughput of one actor, over MQTT and HTTP." in serve
    assert "900 ms" not in page and "9.000" not in page  # the older run is not shown


def test_quality_shows_its_per_stream_figures_and_failed_checks(page: str):
    quality = section(page, "quality")
    assert "| stream | metric | service | best River | River model | margin |" in quality
    assert "| sea | acc | 0.912 | 0.900 | linear | 0.012 |" in quality
    assert "| friedman | mae | 1.500 | 1.750 | hat | 0.250 |" in quality
    assert "2 of 3 checks passed" in quality and "(with uncommitted changes)" in quality
    assert "- wine: service >= best River (knn)" in quality
    assert "2026-11-20" not in quality  # the old run without figures is not the latest


def test_a_run_without_figures_shows_its_checks(gen: ModuleType):
    quality = gen.render([OLD_QUALITY])
    assert "| **FAIL** | sea: service >= best River (linear) |" in quality
    assert "0 of 1 checks passed" in quality
    assert "| PASS | no sample lost |" in gen.render([SOAK])


def test_the_overview_links_each_section(page: str):
    assert "| [quality](#quality) | 2026-11-28 09:00:00 UTC |" in page
    assert "| [soak](#soak) | 2026-11-25 02:47:33 UTC | `eeeeeeeeee` | 1 of 1 | 1 |" in page


def test_a_variant_is_shown_beside_the_default_run_not_in_its_place(gen: ModuleType):
    """A run with other options (`bench._report.variant`) newer than the default run."""
    one = {
        **QUALITY,
        "at": "2026-11-28T12:00:00Z",
        "figures": {"sea": {**QUALITY["figures"]["sea"], "service": None}},
        "variant": "--message-size 1 --no-service",
        "command": "python -m bench.quality --message-size 1 --no-service",
    }
    page = gen.render([QUALITY, one, SERVE])
    heads = [line for line in page.splitlines() if line.startswith("## ")]
    assert heads == ["## serve", "## quality", "## quality --message-size 1 --no-service"]
    assert "| sea | acc | 0.912 |" in section(page, "quality")  # the default run stays
    variant = section(page, "quality --message-size 1 --no-service")
    assert "`python -m bench.quality --message-size 1 --no-service`" in variant
    assert "(#quality-message-size-1-no-service)" in page


def test_the_benches_page_keeps_no_copy_of_the_latest_figures(gen: ModuleType):
    """Its performance table gives each bench's figures and goals and links to the section
    written from the history (a hand-kept "latest" column drifted: 242k against 295k)."""
    index = (ROOT / "docs" / "benchmarks" / "index.md").read_text(encoding="utf-8")
    rows = [line for line in index.splitlines() if line.startswith("| ")]
    assert rows[0] == "| command | figure | goal |"
    for bench in ("ingest", "learner", "serve"):
        assert f"`.venv/bin/python -m bench.{bench}` ([latest](results.md#{bench}))" in index
        assert bench in gen.ORDER
