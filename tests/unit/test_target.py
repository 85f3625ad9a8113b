"""Which model `publish` and `predict` talk to without a local config: the one whose
learner's status the broker holds (`streamlearn.cli.target`; the broker's part:
tests/integration/test_base_install.py)."""

from __future__ import annotations

import json
import tomllib

import pytest

from streamlearn.cli import target
from streamlearn.config import parse_config
from streamlearn.errors import ConfigError

TOML = """
[models.press]
inputs = ["temperature", "ENERGY.Power", "kind"]
target = "failed"
task = "binary"
categorical = {kind = ["lathe", "press"]}
"""


def test_a_learners_status_tells_a_client_what_its_config_would():
    """`inputs` in the status (contract §2.4), read back, is the model the TOML gives."""
    cfg = parse_config(tomllib.loads(TOML)).model("press")
    status = json.loads(json.dumps(cfg.inputs_status))  # as it crosses the broker
    from_status = target.from_table("press", status)
    assert from_status == target.from_table("press", tomllib.loads(TOML)["models"]["press"])
    assert from_status.fields == ("temperature", "ENERGY.Power", "kind")
    assert from_status.categorical == {"kind": ("lathe", "press")}
    assert target.from_table("w", {"inputs": 3, "window": 8}).inputs == 3


def test_the_broker_decides_only_where_no_local_config_names_the_model():
    on_broker = {"b": {"inputs": 2}, "press": {"inputs": ["t"]}}
    assert target.choose("b", ["demo"], on_broker, demo=True).name == "b"
    assert target.choose(None, ["demo"], {"b": {"inputs": 2}}, demo=True).name == "b"
    assert target.choose(None, ["demo"], {}, demo=True) is None  # the demo model
    assert target.choose("demo", ["demo"], on_broker, demo=True) is None
    # `up --demo`'s feed (no config file): the demo as configured, whole, not the broker's
    assert target.choose("demo", ["demo"], {"demo": {"inputs": 9}}, demo=True) is None
    assert target.choose(None, ["demo"], {"demo": {"inputs": 9}}, demo=True) is None
    with pytest.raises(ConfigError, match=r"no model 'x': the config has \['m'\]; the broker"):
        target.choose("x", ["m"], on_broker, demo=False)
    with pytest.raises(ConfigError, match="several models, pick one with --model"):
        target.choose(None, ["demo"], on_broker, demo=True)
    with pytest.raises(ConfigError, match="models.b: a table expected"):
        target.choose("b", [], {"b": [2]}, demo=False)
