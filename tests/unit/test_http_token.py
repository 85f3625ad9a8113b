"""The HTTP door's bearer token from the environment: read at start, or the start fails.

The token itself, on a real actor, is `tests/integration/test_http_door.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamlearn.config.settings import load_settings
from streamlearn.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STREAMLEARN_HTTP_TOKEN", "STREAMLEARN_HTTP_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_a_token_file_is_read_at_start_and_handed_to_children(monkeypatch, tmp_path: Path):
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")  # as a Kubernetes Secret's file often ends
    monkeypatch.setenv("STREAMLEARN_HTTP_TOKEN_FILE", str(secret))
    settings = load_settings()
    assert settings.bearer_token == "s3cret"
    assert settings.as_env()["STREAMLEARN_HTTP_TOKEN_FILE"] == str(secret)
    monkeypatch.delenv("STREAMLEARN_HTTP_TOKEN_FILE")
    monkeypatch.setenv("STREAMLEARN_HTTP_TOKEN", "s3cret")
    settings = load_settings()
    assert settings.bearer_token == "s3cret"
    assert settings.as_env()["STREAMLEARN_HTTP_TOKEN"] == "s3cret"  # not '**********'
    assert "s3cret" not in repr(settings)
    monkeypatch.delenv("STREAMLEARN_HTTP_TOKEN")
    assert load_settings().bearer_token is None


@pytest.mark.parametrize("content", [None, "", " \n"])
def test_a_missing_or_empty_token_file_fails_the_start_naming_it(
    monkeypatch, tmp_path: Path, content: str | None
):
    secret = tmp_path / "token"
    if content is not None:
        secret.write_text(content)
    monkeypatch.setenv("STREAMLEARN_HTTP_TOKEN_FILE", str(secret))
    with pytest.raises(ConfigError, match="STREAMLEARN_HTTP_TOKEN_FILE: "):
        load_settings()


def test_a_token_and_a_token_file_are_not_both_taken(monkeypatch, tmp_path: Path):
    secret = tmp_path / "token"
    secret.write_text("one")
    monkeypatch.setenv("STREAMLEARN_HTTP_TOKEN_FILE", str(secret))
    monkeypatch.setenv("STREAMLEARN_HTTP_TOKEN", "other")
    with pytest.raises(ConfigError, match="not both"):
        load_settings()
