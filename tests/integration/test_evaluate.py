"""`streamlearn evaluate` through the real ingest, learner and actor gives the figure an
in-process test-then-train loop gives on the same file, within TOLERANCE."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from streamlearn.cli import evaluate
from streamlearn.errors import ConfigError
from streamlearn.online import evaluate as scores
from tests.conftest import ROOT, eventually, plain_paho, role_env

# Through the service the first message is asked for before any weights exist (no answer:
# wrong), and each reply comes from a model a few messages behind; over 3,000 samples of
# a stream learned within a few hundred, that costs up to a few points of accuracy.
TOLERANCE = 0.05
SAMPLES = 3000
# One padded batch size (the default traces three, 16 to 256, before a learner is ready):
# one trace at each start, in the learner and in process alike. Batch sizes are not what
# these tests check; the service and the in-process loop share the config either way.
ONE_BUCKET = "[models.{}.learner]\nbuckets = [256]\n"
TOML = '[models.separable]\ninputs = 4\ntask = "binary"\n' + ONE_BUCKET.format("separable")


def separable_csv(path: Path, n: int = SAMPLES) -> Path:
    """A noise-free, linearly separable binary stream: y = 1 where w . x > 0."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 1.0, 0.5], np.float32) > 0).astype(int)
    lines = ["a,b,label,c,d"]  # the target among the inputs: --target picks it out
    lines += [f"{r[0]:.6f},{r[1]:.6f},{t},{r[2]:.6f},{r[3]:.6f}" for r, t in zip(x, y, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def in_process_accuracy(x: np.ndarray, y: np.ndarray, batch: int) -> float:
    """The learner's training component in this process, test-then-train per message."""
    import tomllib

    import keras

    from bench._quality_learners import in_process
    from streamlearn.config import parse_config

    cfg = parse_config(tomllib.loads(TOML)).model(None)
    keras.utils.set_random_seed(0)
    learner = in_process(cfg)
    predicted = np.full(len(y), np.nan, np.float32)
    for lo in range(0, len(y), batch):
        predicted[lo : lo + batch] = learner.predict_many(x[lo : lo + batch])
        learner.learn_many(x[lo : lo + batch], y[lo : lo + batch])
    return float(scores.score("binary", y, predicted).mean())


def test_reads_the_target_column_and_rejects_bad_cells(tmp_path: Path) -> None:
    x, y = evaluate.read_samples(str(separable_csv(tmp_path / "s.csv", 10)), "label")
    assert x.shape == (10, 4) and set(y.tolist()) <= {0.0, 1.0}
    bad = tmp_path / "bad.csv"
    bad.write_text("a,y\n1,0\nx,1\n")
    with pytest.raises(ConfigError, match=r"bad.csv:3: every cell must be a number"):
        evaluate.read_samples(str(bad))
    nd = tmp_path / "s.ndjson"
    nd.write_text('{"x": [1, 2], "y": 0}\n{"x": [[3, 4], [5, 6]], "y": [1, 0]}\n')
    x, y = evaluate.read_samples(str(nd))
    assert x.tolist() == [[1, 2], [3, 4], [5, 6]] and y.tolist() == [0, 1, 0]
    bad_utf8 = (("bad.csv", b"a,y\n1,\xff\n"), ("bad.ndjson", b'{"x": [1], "y": \xff}\n'))
    for name, content in bad_utf8:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ConfigError, match=rf"{name}:[12]: not UTF-8 text"):
            evaluate.read_samples(str(tmp_path / name))
    bom = tmp_path / "bom.csv"
    bom.write_bytes("y,a\n1,2\n".encode("utf-8-sig"))  # as Excel saves it
    assert evaluate.read_samples(str(bom))[1].tolist() == [1.0]


def test_evaluate_through_the_service_matches_in_process(
    settings: object, start_role: object, tmp_path: Path
) -> None:
    for role in ("ingest", "learner", "actor"):
        start_role(role, TOML)
    data = separable_csv(tmp_path / "stream.csv")
    plot = tmp_path / "curve.png"
    argv = [sys.executable, "-m", "streamlearn", "evaluate", str(data)]
    argv += ["--config", str(tmp_path / "streamlearn.toml"), "--target", "label"]
    argv += ["--rate", "300", "--last", "500", "--plot", str(plot)]
    done = subprocess.run(
        argv, env=role_env(settings), cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines() if ":" in line}
    print(done.stdout)

    service = float(lines["prequential accuracy"].split()[2])
    x, y = evaluate.read_samples(str(data), "label")
    local = in_process_accuracy(x, y, evaluate.DEFAULT_BATCH)
    assert local > 0.9  # the stream is learnable: a check that can tell
    print(f"service {service:.4f}, in process {local:.4f}")
    assert abs(service - local) <= TOLERANCE, (service, local)

    assert float(lines["last 500 accuracy"].split()[3]) > 0.9
    assert f"over {SAMPLES:,} samples" in lines["prequential accuracy"]
    assert float(lines["samples/s"].split()[1].replace(",", "")) > 0
    assert f"{SAMPLES // evaluate.DEFAULT_BATCH} messages" in lines["samples/s"]
    assert "versions behind the newest the learner reported" in lines["freshness"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{SAMPLES:,}/{SAMPLES:,}" in done.stderr  # the progress bar reached the end


NAMED_TOML = (
    '[models.named]\ninputs = ["a", "b", "c", "d"]\ntarget = "label"\ntask = "binary"\n'
    + ONE_BUCKET.format("named")
)


def test_label_delay_sends_each_label_on_its_own_rows_after_its_request(
    settings: object, tmp_path: Path
) -> None:
    """No service: what goes on the wire, in order, read by a plain subscriber."""
    config = tmp_path / "streamlearn.toml"
    config.write_text(NAMED_TOML)
    data = separable_csv(tmp_path / "five.csv", 5)
    seen: list[tuple[str, dict]] = []
    sub = plain_paho(settings)
    sub.on_message = lambda _c, _u, m: seen.append((m.topic.split("/")[2], json.loads(m.payload)))
    for leaf in ("labels/#", "samples/#", "predict/#"):  # labels/{client id}
        sub.subscribe(f"{settings.topic_prefix}/named/{leaf}", qos=1)
    time.sleep(0.5)
    argv = [sys.executable, "-m", "streamlearn", "evaluate", str(data), "--config", str(config)]
    argv += ["--label-delay", "2", "--rate", "0", "--timeout", "0.2"]
    try:
        done = subprocess.run(
            argv, env=role_env(settings), cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        eventually(lambda: len(seen) == 5 + 3 + 1, 10, "5 requests, 3 labels, 1 of 2 labels")
    finally:
        sub.loop_stop()
        sub.disconnect()
    kinds = [kind for kind, _ in seen]
    assert kinds == ["predict"] * 3 + ["labels", "predict"] * 2 + ["labels"] * 2, kinds
    requests = [doc for kind, doc in seen if kind == "predict"]
    rows = [line.split(",") for line in data.read_text().splitlines()[1:]]
    for request, row in zip(requests, rows, strict=True):
        assert set(request) == {"a", "b", "c", "d", "id"}  # the features, never the label
        assert request["a"] == float(row[0]) and request["d"] == float(row[4])
    labels = [doc for kind, doc in seen if kind == "labels"]
    joined = [*labels[:3], *labels[3]["labels"]]
    assert [label["id"] for label in joined] == [r["id"] for r in requests]
    assert [label["y"] for label in joined] == [int(row[2]) for row in rows]
    assert "served accuracy: 0.0000 over 5 samples" in done.stdout  # nothing answered
    assert "labels 2 rows after their requests" in done.stdout
    assert "service's served score" in done.stdout
    argv[argv.index("--label-delay") + 1] = "0"
    refused = subprocess.run(argv, env=role_env(settings), cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "--label-delay must be >= 1" in refused.stderr


def test_label_delay_through_the_service_learns_from_labels_that_come_later(
    settings: object, start_role: object, tmp_path: Path
) -> None:
    for role in ("ingest", "learner", "actor"):
        start_role(role, NAMED_TOML)
    data = separable_csv(tmp_path / "stream.csv", 2000)
    argv = [sys.executable, "-m", "streamlearn", "evaluate", str(data)]
    argv += ["--config", str(tmp_path / "streamlearn.toml"), "--label-delay", "20"]
    argv += ["--rate", "300", "--last", "500"]
    lines = evaluated(argv, settings)
    assert "over 2,000 samples" in lines["served accuracy"]
    assert float(lines["last 500 accuracy"].split()[3]) > 0.85, lines  # it learned from them
    served = lines["service's served score"]
    assert "labels joined" in served, served


def evaluated(argv: list[str], settings: object) -> dict[str, str]:
    """Run `streamlearn evaluate`; its printed lines by what comes before their colon."""
    done = subprocess.run(
        argv, env=role_env(settings), cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    return {line.split(":")[0]: line for line in done.stdout.splitlines() if ":" in line}


def test_a_named_model_is_evaluated_with_named_objects(
    settings: object, start_role: object, tmp_path: Path
) -> None:
    """Without --label-delay: each message's rows asked for as objects of their fields, then
    published with their labels as `{"samples": [..]}`."""
    for role in ("ingest", "learner", "actor"):
        start_role(role, NAMED_TOML)
    data = separable_csv(tmp_path / "stream.csv", 1200)
    argv = [sys.executable, "-m", "streamlearn", "evaluate", str(data)]
    argv += ["--config", str(tmp_path / "streamlearn.toml"), "--rate", "300", "--last", "400"]
    lines = evaluated(argv, settings)
    assert "over 1,200 samples" in lines["prequential accuracy"]
    assert float(lines["last 400 accuracy"].split()[3]) > 0.85, lines
    assert f"{1200 // evaluate.DEFAULT_BATCH} messages" in lines["samples/s"]
