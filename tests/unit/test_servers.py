"""Who the local HTTP servers answer: the metrics port's address setting and the
dashboard's accepted Host headers."""

from __future__ import annotations

import pytest

from streamlearn.config.settings import load_settings
from streamlearn.errors import ConfigError
from streamlearn.stack.dashboard import allowed_hosts


def test_metrics_host_defaults_to_loopback(monkeypatch):
    monkeypatch.delenv("STREAMLEARN_METRICS_HOST", raising=False)
    assert load_settings().metrics_host == "127.0.0.1"


@pytest.mark.parametrize("value", ["0.0.0.0", "10.1.2.3", "::", "[::1]"])
def test_metrics_host_takes_an_address(monkeypatch, value):
    monkeypatch.setenv("STREAMLEARN_METRICS_HOST", value)
    assert load_settings().metrics_host == value.strip("[]")


@pytest.mark.parametrize("value", ["example.com", "localhost", "0.0.0.0:9100", ""])
def test_a_bad_metrics_host_is_named_with_its_value(monkeypatch, value):
    monkeypatch.setenv("STREAMLEARN_METRICS_HOST", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "STREAMLEARN_METRICS_HOST: must be an IP address" in message
    assert f"got {value!r}" in message


def test_a_dashboard_on_another_address_answers_only_that_address():
    assert allowed_hosts("10.1.2.3", 8050) == {"10.1.2.3:8050"}
    assert "localhost:8050" in allowed_hosts("127.0.0.1", 8050)
    assert allowed_hosts("::1", 80) >= {"[::1]", "localhost", "localhost:80"}
