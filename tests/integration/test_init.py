"""`streamlearn init FILE.csv`: a config inferred from the data that a real stack runs."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from sklearn import datasets

from streamlearn.config import ModelConfig, load_config
from streamlearn.contract.names import Names
from tests.conftest import ROOT, eventually, retained, role_env


def write_csv(path: Path, x: np.ndarray, y: np.ndarray, names: list[str]) -> Path:
    lines = [",".join([*names, "y"])]
    rows = zip(x.tolist(), y.tolist(), strict=True)
    lines += [",".join([*map(repr, row), repr(label)]) for row, label in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def sklearn_csv(tmp_path: Path, loader, name: str) -> Path:
    data = loader()
    names = [str(n).replace(",", " ") for n in data.feature_names]
    return write_csv(tmp_path / f"{name}.csv", data.data, data.target, names)


def init(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamlearn", "init", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("loader", "inputs", "task", "classes", "named"),
    [
        # "mean radius": no field name (whitespace), so x stays positional
        (datasets.load_breast_cancer, 30, "binary", None, False),
        (datasets.load_wine, 13, "multiclass", 3, True),
        (datasets.load_diabetes, 10, "regression", None, True),
    ],
)
def test_init_infers_the_model_and_spells_out_every_default(
    tmp_path, loader, inputs, task, classes, named
):
    csv = sklearn_csv(tmp_path, loader, "my data")
    done = init(str(csv), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{inputs} inputs, task {task}" in done.stdout

    config = load_config(tmp_path / "streamlearn.toml")
    model = config.model("my_data")  # the name comes from the file, made valid
    assert (model.inputs, model.task, model.classes) == (inputs, task, classes)
    header = csv.read_text().splitlines()[0].split(",")[:-1]
    if named:
        assert model.fields == tuple(header) and model.target == "y"
        assert model == ModelConfig(
            name="my_data", inputs=header, target="y", task=task, classes=classes
        )
    else:
        assert "cannot be a field name: it has whitespace" in done.stdout
        assert model == ModelConfig(name="my_data", inputs=inputs, task=task, classes=classes)

    lines = (tmp_path / "streamlearn.toml").read_text().splitlines()
    sections = {
        "[models.my_data]": ModelConfig,
        "[models.my_data.ingest]": type(model.ingest),
        "[models.my_data.learner]": type(model.learner),
        "[models.my_data.learning]": type(model.learning),
        "[models.my_data.learner.publish]": type(model.learner.publish),
        "[models.my_data.learner.history]": type(model.learner.history),
        "[models.my_data.learner.checkpoint]": type(model.learner.checkpoint),
        "[models.my_data.learner.lease]": type(model.learner.lease),
        "[models.my_data.actor]": type(model.actor),
        "[models.my_data.promotion]": type(model.promotion),
        "[models.my_data.labels]": type(model.labels),
    }
    for header, cls in sections.items():
        start = lines.index(header)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), None)
        block = lines[start + 1 : end]
        for field in cls.model_fields:
            if field in ("name", "ingest", "learner", "learning", "actor", "promotion"):
                continue
            if field in ("publish", "history", "checkpoint", "lease"):  # the learner's groups
                continue
            if field in ("variants", "labels"):
                continue
            if field in ("fields", "sources"):  # written as `inputs = [..]`, a table array
                continue
            at = [
                i
                for i, line in enumerate(block)
                if line.startswith((f"{field} = ", f"# {field} = "))
            ]
            assert at, f"{header} lacks {field}"
            assert block[at[0] - 1].startswith("# "), f"{field} has no comment"
    assert any(line.startswith("# [models.my_data.variants.") for line in lines)
    assert "# [[models.my_data.sources]]" in lines


def test_init_refuses_to_overwrite_and_names_a_bad_column(tmp_path):
    csv = tmp_path / "plant.csv"
    csv.write_text("temp,valve,load\n20.5,open,3.1\n21.0,1,2.9\n")  # text among numbers
    bad = init(str(csv), cwd=tmp_path)
    assert bad.returncode == 2
    assert "'valve' is not numeric" in bad.stderr and "open" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "streamlearn.toml").exists()

    csv.write_text("temp,valve,load\n20.5,1,3.1\n21.0,0,2.9\n")
    first = init(str(csv), "--name", "boiler", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "target column 'load'" in first.stdout  # no y column: the last one
    model = load_config(tmp_path / "streamlearn.toml").model("boiler")
    assert (model.fields, model.target) == (("temp", "valve"), "load")  # publish reads it
    written = (tmp_path / "streamlearn.toml").read_text()

    csv.write_text("temp,y\n1,0\n2,1\n")
    again = init(str(csv), cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    assert (tmp_path / "streamlearn.toml").read_text() == written

    forced = init(str(csv), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    model = load_config(tmp_path / "streamlearn.toml").model(None)
    assert (model.name, model.inputs, model.fields, model.task) == ("plant", 1, ("temp",), "binary")


def test_init_names_the_inputs_and_finds_categorical_columns(tmp_path):
    csv = tmp_path / "press.csv"
    rows = ["temperature,machine_type,ENERGY.Power,failed"]
    rows += [f"{70 + i},{('press', 'lathe', 'mill')[i % 3]},{100 + i},{i % 2}" for i in range(9)]
    rows.append("80,lathe,,1")  # an empty cell: a missing field, not an error
    csv.write_bytes(("\n".join(rows) + "\n").encode("utf-8-sig"))  # as Excel saves it
    done = init(str(csv), "--target", "failed", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 inputs, 1 categorical, task binary" in done.stdout
    text = (tmp_path / "streamlearn.toml").read_text()
    assert 'inputs = ["temperature", "machine_type", "ENERGY.Power"]' in text
    assert 'target = "failed"' in text
    assert 'categorical = {machine_type = ["press", "lathe", "mill"]}' in text
    model = load_config(tmp_path / "streamlearn.toml").model("press")
    assert model.fields == ("temperature", "machine_type", "ENERGY.Power")
    assert model.categorical == {"machine_type": ("press", "lathe", "mill")}
    assert model.target == "failed" and model.task == "binary"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"temp,ma\x01chine,y\n1,2,0\n", "has a control character"),
        (b"temp,y\n1,\xff\xfe\n", "not UTF-8 text"),
        (b"temp,kind,y\n" + b"".join(b"1,k%d,0\n" % i for i in range(40)), "distinct values"),
        (b"mean temp,kind,y\n1,a,0\n", "positional inputs are numbers"),
        (b"temp,y\n1,0,7\n", "3 values, the header names 2"),
    ],
)
def test_init_says_what_is_wrong_with_a_file_in_one_line(tmp_path, content, said):
    csv = tmp_path / "bad.csv"
    csv.write_bytes(content)
    done = init(str(csv), cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "streamlearn.toml").exists()


def test_a_crafted_file_name_and_cells_are_text_never_toml(tmp_path):
    """A file name and cells with newlines, quotes, escapes and TOML of their own: the file
    means exactly one model, whose names and values are the cells as they are."""
    name = 'x.csv\n[models.evil]\ninputs = 1\nfactory = "os:system"\n#.csv'
    cells = ["a\nb", 'say "hi"', "x\x1b]0;title\x07", "[models.evil]", "\U0001f600"]
    quoted = [v.replace('"', '""') for v in cells]
    rows = "".join(f'{i},"{v}",{i % 2}\n' for i, v in enumerate(quoted))
    (tmp_path / name).write_text('te"mp,kind\U0001f600,y\n' + rows, encoding="utf-8")
    done = init(name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = tomllib.loads((tmp_path / "streamlearn.toml").read_text(encoding="utf-8"))
    assert list(doc) == ["models"] and len(doc["models"]) == 1, doc.get("models")
    (model,) = doc["models"].values()
    assert "factory" not in model
    assert model["inputs"] == ['te"mp', "kind\U0001f600"]
    assert model["categorical"] == {"kind\U0001f600": cells}


def test_init_config_runs_and_learns_the_file(start_role, settings, redis, tmp_path):
    """init, then the roles with its config, then `streamlearn publish` of the same file."""
    data = datasets.load_breast_cancer()
    csv = write_csv(
        tmp_path / "cancer.csv", data.data[:300], data.target[:300], [f"f{i}" for i in range(30)]
    )
    out = tmp_path / "out"
    out.mkdir()
    done = init(str(csv), cwd=out)
    assert done.returncode == 0, done.stderr
    toml = (out / "streamlearn.toml").read_text()
    start_role("learner", toml)
    start_role("ingest", toml)

    published = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamlearn",
            "publish",
            str(csv),
            "--batch",
            "50",
            "--config",
            str(out / "streamlearn.toml"),
        ],
        env=role_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert published.returncode == 0, published.stderr
    assert "published 300 samples" in published.stdout
    names = Names("cancer", settings.topic_prefix, settings.key_prefix)

    def seen() -> int:
        status = retained(settings, names.status_topic)
        return status["samples_seen"] if status else 0

    eventually(lambda: seen() >= 300, 60, "the learner trained on every row")
    assert seen() == 300
    assert json.loads(redis.get(names.latest_key) or "0") > 0  # weights were published
