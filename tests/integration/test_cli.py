"""The client commands against a running stack: publish a CSV, status, predict."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.conftest import ROOT, eventually, role_env

TOML = """
[models.c]
inputs = 2
task = "regression"
"""


def streamlearn(settings, config, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamlearn", *args, "--config", str(config)],
        env=role_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_publish_status_predict(start_role, settings, tmp_path):
    start_role("learner", TOML)
    start_role("ingest", TOML)
    start_role("actor", TOML)
    config = tmp_path / "streamlearn.toml"
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (500, 2))
    csv = tmp_path / "samples.csv"
    csv.write_text("a,b,y\n" + "".join(f"{a},{b},{a - b}\n" for a, b in x))

    published = streamlearn(settings, config, "publish", str(csv), "--batch", "50")
    assert published.returncode == 0, published.stderr
    assert "published 500 samples in 10 messages" in published.stdout
    assert "500/500" in published.stderr and "samples/s" in published.stderr

    def status() -> dict:
        out = streamlearn(settings, config, "status", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)[0]

    eventually(lambda: status().get("samples_seen") == 500, 60, "status shows every sample")
    row = status()
    assert row["model"] == "c" and row["version"] > 0 and row["pending"] == 0
    assert row["deadletters"] == 0 and isinstance(row["online_loss"], float)

    table = streamlearn(settings, config, "status")
    assert table.stdout.splitlines()[1].startswith("c ")

    reply = streamlearn(settings, config, "predict", "[0.5, 0.25]")
    assert reply.returncode == 0, reply.stderr
    body = json.loads(reply.stdout)
    assert body["version"] > 0 and isinstance(body["y"], float)
