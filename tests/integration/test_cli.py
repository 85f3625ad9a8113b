"""The client commands against a running stack: publish a CSV, status, predict."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

from streamlearn.cli import light, target
from streamlearn.contract.names import Names
from tests.conftest import ROOT, eventually, plain_paho, role_env

TOML = """
[models.c]
inputs = 2
task = "regression"

[models.c.learner]
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's
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


NAMED_TOML = """
[models.press]
inputs = ["temperature", "machine_type", "ENERGY.Power"]
target = "failed"
categorical = {machine_type = ["press", "lathe", "mill"]}
task = "binary"
"""


def wire(settings, model: str, leaves: tuple[str, ...]) -> tuple[object, list]:
    """A plain subscriber to a model's topics: (client, [(leaf, document), ...])."""
    seen: list = []
    sub = plain_paho(settings)
    sub.on_message = lambda _c, _u, m: seen.append((m.topic.split("/")[2], json.loads(m.payload)))
    for leaf in leaves:
        sub.subscribe(f"{settings.topic_prefix}/{model}/{leaf}", qos=1)
    time.sleep(0.5)
    return sub, seen


def test_publish_and_predict_send_named_objects_for_a_named_model(settings, tmp_path):
    config = tmp_path / "streamlearn.toml"
    config.write_text(NAMED_TOML)
    csv = tmp_path / "press.csv"
    csv.write_text(
        "failed,machine_type,temperature,ENERGY.Power,note\n"
        "0,press,70.5,100,a\n1,lathe,88,,b\n0,mill,71.25,95.5,c\n"
    )
    sub, seen = wire(settings, "press", ("samples", "predict/#"))
    try:
        single = streamlearn(settings, config, "publish", str(csv))
        assert single.returncode == 0, single.stderr
        assert "published 3 samples in 3 messages" in single.stdout
        batched = streamlearn(settings, config, "publish", str(csv), "--batch", "2")
        assert batched.returncode == 0, batched.stderr
        asked = streamlearn(
            settings,
            config,
            "predict",
            '{"temperature": 90, "machine_type": "mill"}',
            "--id",
            "r-1",
            "--timeout",
            "0.3",
        )
        assert asked.returncode == 1 and "no reply within 0.3 s" in asked.stderr
        eventually(lambda: len(seen) == 6, 10, "3 + 2 sample messages and a request")
    finally:
        sub.loop_stop()
        sub.disconnect()
    rows = [
        {"temperature": 70.5, "machine_type": "press", "ENERGY": {"Power": 100}, "failed": 0},
        {"temperature": 88, "machine_type": "lathe", "failed": 1},  # an empty cell: left out
        {"temperature": 71.25, "machine_type": "mill", "ENERGY": {"Power": 95.5}, "failed": 0},
    ]
    assert [doc for _, doc in seen[:3]] == rows  # a column the model does not read: not sent
    assert [doc for _, doc in seen[3:5]] == [{"samples": rows[:2]}, {"samples": rows[2:]}]
    assert seen[5] == ("predict", {"temperature": 90, "machine_type": "mill", "id": "r-1"})


def test_publish_says_what_is_wrong_with_a_file_in_one_line(settings, tmp_path):
    config = tmp_path / "streamlearn.toml"
    config.write_text(NAMED_TOML)
    bad = tmp_path / "bad.csv"
    for content, said in (
        (b"failed,machine_type,temperature,ENERGY.Power\n0,press,\xff\xfe,1\n", "not UTF-8"),
        (b"failed,temperature\n0,1\n", "reads columns ['machine_type', 'ENERGY.Power']"),
        (b"failed,machine_type,temperature,ENERGY.Power\n0,press,hot,1\n", "'temperature' is not"),
        (b"failed,machine_type,temperature,ENERGY.Power\n0,press,1\n", "3 values, the header"),
    ):
        bad.write_bytes(content)
        done = streamlearn(settings, config, "publish", str(bad))
        assert done.returncode == 2, (content, done.stdout)
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_base_install_reads_named_inputs_with_the_standard_library(tmp_path):
    config = tmp_path / "streamlearn.toml"
    config.write_text(NAMED_TOML)
    csv = tmp_path / "press.csv"
    csv.write_text("temperature,machine_type,ENERGY.Power,failed\n70,press,100,0\n")
    model = target.model(str(config), None)
    assert model.fields == ("temperature", "machine_type", "ENERGY.Power")
    assert model.target == "failed"
    assert model.categorical == {"machine_type": ("press", "lathe", "mill")}
    assert [json.loads(p) for _, p in light.file_payloads(str(csv), 1, model)] == [
        {"temperature": 70, "machine_type": "press", "ENERGY": {"Power": 100}, "failed": 0}
    ]
    assert light.named_default(model) == {
        "temperature": 0.0,
        "machine_type": "press",
        "ENERGY": {"Power": 0.0},
    }


def test_publish_never_calls_a_refused_file_a_success(start_role, settings, redis, tmp_path):
    """NaN cells are bad input (exit 2, the line named); samples the model's checks refuse
    are counted as ingest counts them, and publish exits 1 saying so."""
    start_role("ingest", TOML)
    config = tmp_path / "streamlearn.toml"
    nan = tmp_path / "nan.csv"
    nan.write_text("a,b,y\nnan,1,0\nnan,2,1\n")
    done = streamlearn(settings, config, "publish", str(nan))
    assert done.returncode == 2, done.stdout
    assert "nan.csv:2: column 'a' is not a finite number" in done.stderr
    assert "published" not in done.stdout and "Traceback" not in done.stderr
    nan.write_text("a,b,y\n0.5,1,0\n0.25,2,1\ninf,3,0\n")
    done = streamlearn(settings, config, "publish", str(nan), "--batch", "2")
    assert done.returncode == 2 and "nan.csv:4: column 'a' is not a finite" in done.stderr
    assert "(published before it: 2 samples)" in done.stderr

    dead = tmp_path / "dead.ndjson"  # 1e400 is a JSON number no float holds: infinity
    dead.write_text('{"x": [1e400, 1], "y": 0}\n' * 3)
    done = streamlearn(settings, config, "publish", str(dead))
    assert done.returncode == 1, done.stdout
    assert "published 0 samples in 0 messages" in done.stdout
    assert "3 of 3 samples refused" in done.stderr and "Traceback" not in done.stderr

    mixed = tmp_path / "mixed.ndjson"  # one message with a sample of the wrong width
    mixed.write_text(
        '{"samples": [{"x": [1, 2], "y": 0.5}, {"x": [1], "y": 1}]}\n{"x": [3, 4], "y": 1}\n'
    )
    done = streamlearn(settings, config, "publish", str(mixed))
    assert done.returncode == 1, done.stdout
    assert "published 2 samples in 2 messages" in done.stdout
    assert "1 of 3 samples refused" in done.stderr and "first: samples 1..2" in done.stderr
    names = Names("c", settings.topic_prefix, settings.key_prefix)

    def stored() -> tuple[int, int]:
        return int(redis.get(names.ingest_count_key) or 0), redis.xlen(names.deadletter_key)

    eventually(lambda: stored() == (4, 1), 10, "2 + 2 good samples kept, one dead letter")


def test_status_with_redis_unreachable_says_so_in_one_line(settings, tmp_path):
    """No traceback, and the URL's password never printed."""
    config = tmp_path / "streamlearn.toml"
    config.write_text("[models.m]\ninputs = 2\n")
    unreachable = settings.model_copy(update={"redis_url": "redis://:s3cret@127.0.0.1:1/0"})
    done = streamlearn(unreachable, config, "status")
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr + done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("streamlearn: Redis: "), done.stderr
