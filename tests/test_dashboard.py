"""The live dashboard, driven in headless Chromium against a running learner and ingest."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from streamlearn.config import parse_config
from streamlearn.dashboard import Dashboard
from tests.conftest import ROOT

TOML = """
[models.d]
inputs = 3
task = "binary"
"""
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def wait_for_points(dashboard: Dashboard, n: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(len(p) >= n for p in dashboard.data()["models"].values()):
            return True
        time.sleep(0.1)
    return False


def chromium(tmp_path: Path, *args: str) -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is needed (run.sh / .ci/run install it)"
    result = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout


@pytest.fixture
def feed(settings, client_for):
    """A device streaming labelled samples until the test ends."""
    client = client_for("d")
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            batch = [
                {"x": [((i + k) % 7) - 3.0, 1.0, -1.0], "y": float((i + k) % 7 > 3)}
                for k in range(20)
            ]
            client.publish_samples([{"samples": batch}])
            i += 20
            stop.wait(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)


def test_dashboard_charts_get_data_points(start_role, settings, feed, tmp_path):
    start_role("learner", TOML)
    start_role("ingest", TOML)
    dashboard = Dashboard(
        parse_config({"models": {"d": {"inputs": 3, "task": "binary"}}}), settings, every_s=0.5
    )
    url = dashboard.start()
    try:
        assert wait_for_points(dashboard, 6, 60)
        points = dashboard.data()["models"]["d"]
        assert points[-1]["samples_seen"] > 0 and points[-1]["version"] > 0
        assert any((p["samples_per_s"] or 0) > 0 for p in points)

        dom = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", url)
        counts = [int(n) for n in re.findall(r'<canvas data-chart="\d" data-points="(\d+)"', dom)]
        assert len(counts) == 4, dom[:2000]
        assert all(n > 0 for n in counts), f"every chart has points: {counts}"
        assert re.search(r'id="points" data-count="[1-9]', dom)

        shot = ROOT / "bench" / "results" / "dashboard.png"
        shot.parent.mkdir(exist_ok=True)
        chromium(
            tmp_path,
            "--virtual-time-budget=5000",
            "--window-size=1280,800",
            f"--screenshot={shot}",
            url,
        )
        assert shot.exists() and shot.stat().st_size > 10_000
    finally:
        dashboard.close()
