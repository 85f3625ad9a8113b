"""The run file is trusted only when no one else could have written it: the user's own
file, mode 0600, in a directory others cannot write to (or a sticky one, as /tmp). Any
other is ignored as a stale one is, said once on stderr."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamlearn.config import runfile


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    record = runfile.StackRecord(
        "mqtt://dev:s3cret@127.0.0.1:1883", "redis://:s3cret@127.0.0.1:6379/0", "t", "k", 1, 0.0
    )
    return runfile.write(record, folder / "stack.json")


def test_the_users_own_private_file_is_read(stack: Path, capsys: pytest.CaptureFixture[str]):
    assert (stack.stat().st_mode & 0o777) == 0o600
    assert runfile.read(stack) is not None
    assert capsys.readouterr().err == ""


def test_a_file_others_may_read_is_ignored_with_one_warning(stack: Path, capsys):
    stack.chmod(0o644)
    assert runfile.read(stack) is None and runfile.read(stack) is None
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"streamlearn: ignoring the run file {stack}: group or others may use it "
        "(mode 644; chmod 600 it)"
    ]
    stack.chmod(0o600)
    assert runfile.read(stack) is not None


def test_a_directory_others_may_write_to_is_not_trusted_unless_sticky(stack: Path, capsys):
    stack.parent.chmod(0o777)
    assert runfile.read(stack) is None
    assert "others may write to its directory" in capsys.readouterr().err
    stack.parent.chmod(0o1777)  # as /tmp: others cannot replace or remove the user's file
    assert runfile.read(stack) is not None
    stack.parent.chmod(0o700)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="giving a file to another user needs root (os.chown)",
)
def test_a_file_of_another_user_is_ignored(stack: Path, capsys):
    os.chown(stack, 4321, -1)
    assert runfile.read(stack) is None
    assert "owned by uid 4321, not by you" in capsys.readouterr().err
    runfile.remove(1, stack)  # the stack of pid 1 removes it: the trust check is not for that
    assert not stack.exists()


def test_no_line_shows_a_password(stack: Path):
    record = runfile._load(stack)
    assert record is not None
    for url in (record.mqtt_url, record.redis_url):
        line = runfile.describe(url, None, url, "STREAMLEARN_MQTT_URL")
        assert "s3cret" not in line and ":***@127.0.0.1" in line
    said = runfile.redact_text(f"cannot reach {record.redis_url}?password=s3cret")
    assert "s3cret" not in said
