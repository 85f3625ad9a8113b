"""The examples of the generated reference (docs/gen_reference.py) are right: each config
table's TOML example loads with the project's own loader, each command's example line
parses with the real parser, and each metric's healthy note belongs to a catalogued metric."""

from __future__ import annotations

import runpy
import shlex
import tomllib
from pathlib import Path

import pytest

from streamlearn.cli.main import EXAMPLES, ROLES, _parser
from streamlearn.config.app import AppConfig
from streamlearn.config.loading import load_config
from streamlearn.config.tables import EXAMPLE_KEYS, examples, walk
from streamlearn.observe.catalog import HEALTHY, METRICS
from streamlearn.runtime import role_parser

ROOT = Path(__file__).resolve().parents[2]
GEN = runpy.run_path(str(ROOT / "docs" / "gen_reference.py"), run_name="gen_reference")
EXAMPLES_BY_TABLE = examples(AppConfig)


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {
        name: GEN[name]()  # the three pages with examples, not the mkdocstrings ones
        for name in ("configuration", "commands", "metrics")
    }


def test_every_table_has_an_example():
    assert set(EXAMPLES_BY_TABLE) == {path for path, _, _, _ in walk(AppConfig)}


@pytest.mark.parametrize("path", sorted(EXAMPLES_BY_TABLE))
def test_each_table_example_loads_as_shown(path, tmp_path):
    """Written to a file and loaded as `--config` would be: a wrong example fails here."""
    text = EXAMPLES_BY_TABLE[path]
    file = tmp_path / "streamlearn.toml"
    file.write_text(text + "\n", encoding="utf-8")
    cfg = load_config(file)
    assert list(cfg.models) == [EXAMPLE_KEYS["<name>"]]
    table = path
    for key, name in EXAMPLE_KEYS.items():
        table = table.replace(key, name)
    if path:  # the table itself, with each field it sets
        header = f"[[{table[:-2]}]]" if table.endswith("[]") else f"[{table}]"
        assert f"\n{header}\n" in f"\n{text}\n", path
        own = text.split(header, 1)[1].strip()
        assert own, f"{path}: the example sets none of the table's fields"


def test_examples_show_the_defaults():
    """A field at its default in an example is the default the model has."""
    toml = tomllib.loads(EXAMPLES_BY_TABLE["models.<name>.learner.publish"])
    publish = toml["models"]["machines"]["learner"]["publish"]
    defaults = AppConfig.model_validate({"models": {"m": {"name": "m", "inputs": 1}}})
    assert publish == defaults.models["m"].learner.publish.model_dump()


def test_the_configuration_page_shows_each_example(pages):
    page = pages["configuration"]
    for text in EXAMPLES_BY_TABLE.values():
        assert f"```toml\n{text}\n```" in page


def test_every_command_has_an_example_that_parses():
    found = GEN["subcommands"](_parser())
    assert set(EXAMPLES) == set(found)
    for name, line in EXAMPLES.items():
        argv = shlex.split(line)
        assert argv[:2] == ["streamlearn", name], line
        if name in ROLES:  # `streamlearn ROLE ...` goes to the role's own parser
            role_parser(name).parse_args(argv[2:])
        else:
            assert _parser().parse_args(argv[1:]).command == name


def test_the_commands_page_shows_each_example(pages):
    page = pages["commands"]
    for name, line in EXAMPLES.items():
        section = page.split(f"## `streamlearn {name}`\n", 1)[1].split("\n## ", 1)[0]
        assert f"```sh\n{line}\n```" in section, name


def test_healthy_notes_belong_to_catalogued_metrics_and_show(pages):
    assert set(HEALTHY) <= set(METRICS)
    page = pages["metrics"]
    assert "| metric | type | labels | help | healthy |" in page
    for name, note in HEALTHY.items():
        assert METRICS[name].healthy == note
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.endswith(f" | {note} |"), name
    assert METRICS["streamlearn_actor_broker_delay_seconds"].healthy.startswith("under 0.01")
