"""`pip install streamlearn` alone (paho only, no extras), in a fresh venv: the command
works, says which extra a service command needs, and installs no top-level `workers`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT, role_env

TOML = """
[models.b]
inputs = 2
task = "regression"
hidden = [8]

[models.b.learner]
publish.every_ms = 100
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the base install of this checkout."""
    env = tmp_path_factory.mktemp("base") / "venv"
    venv.create(env, with_pip=True)
    pip = [env / "bin" / "python", "-m", "pip", "install", "-q"]
    for argv in ([*pip, "--upgrade", "pip"], [*pip, str(ROOT)]):  # a pip that shows a
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)  # PEP 639
        assert done.returncode == 0, done.stderr[-3000:]  # license expression
    return env


def run(env: Path, *argv: str, environ: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(env / "bin" / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=env,  # not the checkout: the installed package, not the source tree
        env=environ,
    )


def test_the_command_works_without_the_service_extra(base):
    assert run(base, "python", "-c", "import pydantic").returncode != 0, "a base install"
    for argv in (("streamlearn", "--help"), ("python", "-m", "streamlearn", "--help")):
        done = run(base, *argv)
        assert done.returncode == 0, done.stderr
        assert "publish" in done.stdout and "predict" in done.stdout
    version = run(base, "streamlearn", "--version")
    assert version.returncode == 0 and version.stdout.startswith("streamlearn 0."), version


def test_a_service_command_names_the_extra_in_one_line(base):
    helped = run(base, "streamlearn", "up", "--help")
    assert helped.returncode == 0
    assert "pip install 'streamlearn[service]'" in " ".join(helped.stdout.split())
    for argv in (
        ("streamlearn", "up"),
        ("streamlearn", "init", "data.csv"),
        ("streamlearn", "ingest"),
    ):
        done = run(base, *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.strip().splitlines() == [
            "streamlearn: this command needs the service extra: pip install 'streamlearn[service]'"
        ], argv


def test_the_wheel_claims_no_generic_top_level_name_and_names_its_license(base):
    site = next((base / "lib").glob("python3*/site-packages"))
    assert (site / "streamlearn").is_dir()
    assert not (site / "workers").exists()
    shown = run(base, "python", "-m", "pip", "show", "streamlearn").stdout
    assert "Apache-2.0" in shown, shown
    metadata = next(site.glob("streamlearn-*.dist-info")) / "METADATA"
    assert "License-Expression: Apache-2.0" in metadata.read_text()
    assert sys.version_info >= (3, 11)


def test_publish_and_predict_work_without_the_service_extra(base, start_role, settings, tmp_path):
    """The base install's `publish` and `predict` against a running stack (its roles run
    with the service): samples from a CSV in, then a prediction from a trained version."""
    for role in ("learner", "ingest", "actor"):
        start_role(role, TOML)
    config = tmp_path / "streamlearn.toml"  # start_role wrote it
    csv = tmp_path / "data.csv"
    csv.write_text("a,b,y\n" + "".join(f"{i % 7 / 7},{i % 3 / 3},{i % 5}\n" for i in range(200)))
    environ = role_env(settings)
    published = run(
        base,
        "streamlearn",
        "publish",
        str(csv),
        "--config",
        str(config),
        "--batch",
        "20",
        environ=environ,
    )
    assert published.returncode == 0, published.stderr
    assert "published 200 samples in 10 messages" in published.stdout
    for _ in range(30):  # until a version trained on them is served
        done = run(
            base, "streamlearn", "predict", "[0.5, 0.25]", "--config", str(config), environ=environ
        )
        if done.returncode == 0 and json.loads(done.stdout).get("version", 0) > 0:
            break
        time.sleep(1)
    assert done.returncode == 0, (done.stdout, done.stderr)
    reply = json.loads(done.stdout)
    assert reply["version"] > 0 and isinstance(reply["y"], float), reply  # one row: a number

    # No config here (an empty folder): the model's inputs come from its learner's status.
    done = run(base, "streamlearn", "predict", "--model", "b", environ=environ)
    assert done.returncode == 0, (done.stdout, done.stderr)
    reply = json.loads(done.stdout)
    assert reply["model"] == "b" and reply["version"] > 0, reply
    unknown = run(base, "streamlearn", "predict", "--model", "nope", environ=environ)
    assert unknown.returncode == 2, unknown
    assert "no model 'nope': the config has ['demo']; the broker holds a status for ['b']" in (
        unknown.stderr
    )
