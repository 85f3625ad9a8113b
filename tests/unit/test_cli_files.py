"""A file `init`, `publish` or `evaluate` cannot use is one line naming the file, the line and
what is wrong, exit status 2, never a traceback. No servers: `evaluate` and `init` read the
file before they connect, and publish's reading is driven without a broker (its command
runs in test_cli.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamlearn.cli import light, target
from streamlearn.cli.main import main
from streamlearn.config import runfile
from streamlearn.errors import ConfigError

POSITIONAL = '[models.c]\ninputs = 1\ntask = "binary"\n'
NAMED = '[models.n]\ninputs = ["temp"]\ntask = "binary"\n'
# (file name, content, what the message says), for every command that reads the file
CSV_CASES = [
    ("ctl.csv", b"te\x01mp,y\n1,0\n", "ctl.csv:1: column 1 of the header, 'te\\x01mp', has a"),
    ("newline.csv", b'"te\nmp",y\n1,0\n', "newline.csv:1: column 1 of the header"),
    ("twice.csv", b"temp,temp,y\n1,2,0\n", "twice.csv:1: duplicate column names"),
    ("big.csv", b"temp,y\n1,0\n" + b"7" * 140_000 + b",0\n", "big.csv:3: a field over 128 KiB"),
    ("latin1.csv", b"temp,y\n1,0\n2,1\n3,caf\xe9\n", "latin1.csv:4: not UTF-8 text"),
    ("nan.csv", b"temp,y\nnan,0\n", "nan.csv:2: column 'temp' is not a finite number"),
    ("short.csv", b"temp,y\n1,0\n2\n", "short.csv:3: 1 values, the header names 2"),
]
NDJSON_CASES = [
    ("broken.ndjson", b'{"x": [1], "temp": 1, "y": 0}\n{nope\n', "broken.ndjson:2: not JSON"),
    ("deep.ndjson", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", "nested too deep"),
    ("nan.ndjson", b'{"x": [NaN], "temp": NaN, "y": 0}\n', "NaN is not a JSON number"),
    ("latin1.ndjson", b'{"x": [1], "y": 0}\n{"x": [2], "y": "\xe9"}\n', ":2: not UTF-8 text"),
]


@pytest.fixture(autouse=True)
def no_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No URL exported and no run file: the commands find no stack (and need none)."""
    for name in list(os.environ):
        if name.startswith("STREAMLEARN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(runfile.FILE_ENV, str(tmp_path / "no-stack.json"))
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The command's exit status and its last stderr line (the error), checked to be one."""
    status = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("streamlearn: configuration error: "), err
    return status, last


@pytest.mark.parametrize(("name", "content", "said"), CSV_CASES)
def test_init_says_what_is_wrong_with_a_csv_in_one_line(tmp_path, capsys, name, content, said):
    (tmp_path / name).write_bytes(content)
    status, line = run(capsys, "init", name)
    assert status == 2 and said in line, line
    assert not (tmp_path / "streamlearn.toml").exists()


@pytest.mark.parametrize("config", [POSITIONAL, NAMED])
@pytest.mark.parametrize(("name", "content", "said"), CSV_CASES + NDJSON_CASES)
def test_evaluate_says_what_is_wrong_with_a_file_in_one_line(
    tmp_path, capsys, config, name, content, said
):
    (tmp_path / "streamlearn.toml").write_text(config)
    (tmp_path / name).write_bytes(content)
    status, line = run(capsys, "evaluate", name)
    assert status == 2 and said in line, line


@pytest.mark.parametrize("config", [POSITIONAL, NAMED])
@pytest.mark.parametrize(("name", "content", "said"), CSV_CASES + NDJSON_CASES)
def test_publish_reads_a_file_to_one_clear_error(tmp_path, config, name, content, said):
    """What `publish FILE` sends, read as it reads it: the same errors (the command's exit
    status and its output are in tests/integration/test_cli.py)."""
    (tmp_path / "streamlearn.toml").write_text(config)
    (tmp_path / name).write_bytes(content)
    model = target.model(None, None)
    with pytest.raises(ConfigError) as caught:
        list(light.file_payloads(name, 1, model))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_publish_refuses_a_csv_narrower_than_the_model(tmp_path):
    (tmp_path / "streamlearn.toml").write_text('[models.c]\ninputs = 3\ntask = "binary"\n')
    (tmp_path / "two.csv").write_text("a,b,y\n1,2,0\n")
    with pytest.raises(ConfigError, match="2 input columns, model c has inputs = 3"):
        list(light.file_payloads("two.csv", 1, target.model(None, None)))


def test_an_error_is_one_line_without_a_password(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STREAMLEARN_MQTT_URL", "mqtt://dev:s3cret@127.0.0.1:99x")
    (tmp_path / "streamlearn.toml").write_text(POSITIONAL)
    (tmp_path / "ok.csv").write_text("a,y\n1,0\n")
    assert main(["publish", "ok.csv"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "mqtt://dev:***@127.0.0.1:99x" in err, err
    odd = "x.csv\n\x1b[2J"  # a newline and a terminal escape in a file name
    (tmp_path / odd).write_text("a,y\n1\n")
    status, line = run(capsys, "init", odd, "--output", "other.toml")
    assert status == 2 and "x.csv\\n\\x1b[2J:2: 1 values" in line, line
