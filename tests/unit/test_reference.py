"""The generated reference (docs/gen_reference.py) covers the code it is written from: every
config field, command, flag, metric and environment variable appears, every config field is
described; and docs/contract.md's tables agree with the names the code builds."""

from __future__ import annotations

import argparse
import re
import runpy
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from streamlearn.cli.main import _parser
from streamlearn.config import environment, tfconfig
from streamlearn.config.app import AppConfig, ModelConfig
from streamlearn.config.settings import Settings
from streamlearn.contract.names import Names
from streamlearn.observe.catalog import METRICS

ROOT = Path(__file__).resolve().parents[2]
GEN = runpy.run_path(str(ROOT / "docs" / "gen_reference.py"), run_name="gen_reference")
CONTRACT = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return GEN["pages"]()


def models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """Every model reachable from `root` through its fields' annotations."""
    found: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.add(model)
        for info in model.model_fields.values():
            stack = [info.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
                stack.extend(typing.get_args(t))
    return found


CONFIG_MODELS = models(AppConfig) | {Settings}


def test_the_generator_writes_the_pages_the_site_lists(pages):
    assert set(pages) == {
        f"reference/{name}.md"
        for name in ("configuration", "environment", "commands", "metrics", "client", "library")
    }
    assert all(text.strip() for text in pages.values())


@pytest.mark.parametrize("model", sorted(CONFIG_MODELS, key=lambda m: m.__name__))
def test_every_config_field_is_described(model):
    missing = [name for name, info in model.model_fields.items() if not info.description]
    assert not missing, f"{model.__name__}: fields without a description= {missing}"


def test_every_config_field_is_in_the_configuration_page(pages):
    page = pages["reference/configuration.md"]
    assert len(CONFIG_MODELS) >= 9
    for model in CONFIG_MODELS - {Settings}:
        for name, info in model.model_fields.items():
            if model is ModelConfig and name == "name":
                continue  # a model's table name, never a key (below)
            rows = re.findall(rf"^\| `(?:[\w.<>\[\]]*\.)?{name}` \|.*$", page, re.M)
            assert any(str(info.description) in row.replace("\\|", "|") for row in rows), (
                f"{model.__name__}.{name} is not in the configuration page with its description"
            )
    for var in Settings.variables():
        assert f"| `{var.name}` |" in page


def test_paths_name_the_toml_tables(pages):
    page = pages["reference/configuration.md"]
    for path in (
        "models.<name>.learner.max_batch",
        "models.<name>.sources[].topic",
        "models.<name>.variants.<variant>.hidden",
        "models.<name>.labels.ttl_s",
    ):
        assert f"| `{path}` |" in page
    assert "| `models.<name>.ingest.partitions` | integer | `1` | >= 1, <= 64 |" in page
    # the TOML, not the model that validates it: no `name` key, `inputs` a count or names
    assert "| `models.<name>.name` |" not in page
    assert "| `models.<name>.inputs` | integer, or array of string (the inputs' names) |" in page
    assert 'one of `"regression"`, `"binary"`, `"multiclass"`' in page


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_and_flag_is_in_the_commands_page(pages):
    page = pages["reference/commands.md"]
    found = GEN["subcommands"](_parser())
    assert set(found) == set(commands(_parser())) >= {"up", "ingest", "learner", "publish"}
    for name, (_, parser) in found.items():
        section = page.split(f"## `streamlearn {name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings or [action.dest]:
                assert re.search(rf"`[^`]*{re.escape(flag)}\b", section), f"{name} {flag}"
    assert "`--variant VARIANT`" in page.split("## `streamlearn learner`")[1]


def test_every_catalogued_metric_is_in_the_metrics_page(pages):
    page = pages["reference/metrics.md"]
    for name, metric in METRICS.items():
        assert f"| `{name}` | {metric.kind} |" in page
        assert metric.help and metric.help.replace("|", "\\|") in page
    assert len(METRICS) > 60


def test_every_environment_variable_is_in_the_environment_page(pages):
    page = pages["reference/environment.md"]
    for var in [*environment.VARIABLES.values(), *Settings.variables()]:
        assert f"| `{var.name}` |" in page
        assert var.meaning, var.name


def test_every_variable_the_code_names_is_in_the_registry():
    """A `STREAMLEARN_*` name in the package (code or docstring) is declared once, in the
    registry or as a `Settings` field: none is read that the reference leaves out."""
    known = set(environment.VARIABLES) | {v.name for v in Settings.variables()}
    assert set(environment.SETTINGS) <= known
    for path in (ROOT / "streamlearn").rglob("*.py"):
        for name in re.findall(r"STREAMLEARN_[A-Z0-9_]+", path.read_text(encoding="utf-8")):
            assert name in known, f"{path.relative_to(ROOT)} names {name}, not in the registry"


def test_registry_defaults_agree_with_their_readers():
    timeout = environment.VARIABLES[environment.COLLECTIVE_TIMEOUT_S]
    assert timeout.default == f"`{tfconfig.DEFAULT_TIMEOUT_S:g}`"
    assert Settings.model_config["env_prefix"] == environment.PREFIX


def test_the_client_page_documents_the_public_names(pages):
    import streamlearn

    page = pages["reference/client.md"]
    for name in streamlearn.__all__:
        assert re.search(rf"^::: streamlearn\.[\w.]+\.{name}$", page, re.M), name


def test_the_library_page_documents_the_front_door_and_the_checks(pages):
    """Each path the page names is the library's export of that name (the generator names
    them by path, so that the docs build imports no Keras)."""
    import importlib

    from streamlearn import online

    page = pages["reference/library.md"]
    for name in ("OnlineModel", "ModelSpec", "LearningSpec", "NumpyModel"):
        path = next(p for p in GEN["LIBRARY"] if p.endswith(f".{name}"))
        module, _, attr = path.rpartition(".")
        assert getattr(importlib.import_module(module), attr) is getattr(online, name), path
        assert f"::: {path}\n" in page, name
    assert "::: streamlearn.online.checks\n" in page


# -- docs/contract.md against the code ----------------------------------------------------


def section(title: str) -> str:
    return CONTRACT.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def first_column(text: str) -> list[str]:
    """Each table row's first cell's backticked names, `:leaf` shorthands expanded on the
    first (`variant:{V}:weights:blobs`, `:latest` -> `variant:{V}:weights:latest`)."""
    names = []
    for line in text.splitlines():
        if line.startswith("| `"):
            tokens = re.findall(r"`([^`]+)`", line.split(" | ")[0])
            stem = tokens[0].rsplit(":", 1)[0]
            names += [stem + t if t.startswith(":") else t for t in tokens]
    return names


def test_the_contract_lists_every_redis_key_names_builds():
    n = Names("{model}", key_prefix="{kp}")
    assert "`{kp}:{{model}}:...`" in section("3. Redis keys")
    assert n.of_partition(2).samples_key in section("3. Redis keys")
    leaves = set(first_column(section("3. Redis keys")))
    built = {
        getattr(names, attr)
        for names in (n, n.of_variant("{V}"))
        for attr, value in vars(Names).items()
        if isinstance(value, property)
    }
    built.remove(n.of_variant("{V}").weights_channel)  # a variant announces on the model's
    built.add(n.pending_key("{ns}:{t}:{id}"))
    keys = {k.removeprefix("{kp}:{{model}}:") for k in built if k.startswith("{kp}:")}
    assert keys - leaves == set(), "keys Names builds that docs/contract.md §3 lacks"


def test_the_contract_lists_every_topic_names_builds():
    n = Names("{model}", topic_prefix="{prefix}")
    listed = set(first_column(section("1. MQTT topics")))
    built = {
        getattr(n, attr)
        for attr, value in vars(Names).items()
        if isinstance(value, property) and attr.endswith("_topic")
    }
    assert built and built - listed == set(), "topics Names builds that §1 lacks"


def test_the_contracts_environment_table_is_the_registry():
    listed = set(first_column(section("8. Environment")))
    every = set(environment.VARIABLES) | {v.name for v in Settings.variables()}
    assert listed == every


def test_the_contracts_commands_table_has_every_command_and_flag():
    rows: list[tuple[set[str], set[str]]] = []
    for line in section("7. Commands").splitlines():
        if line.startswith("| `"):
            cell = line.split(" | ")[0]
            names = {m.split()[0] for m in re.findall(r"`([^`]+)`", cell)}
            rows.append((names, set(re.findall(r"(?<![\w-])--?\w[\w-]*", cell))))
    for name, (_, parser) in GEN["subcommands"](_parser()).items():
        row = [found for names, found in rows if name in names]
        assert row, f"§7 has no row for {name}"
        for action in parser._actions:
            flags = set(action.option_strings) - {"-h", "--help"}
            assert not flags or flags & row[0], f"§7's {name} row lacks {sorted(flags)}"


def test_a_scrape_takes_help_and_label_from_the_catalog_and_warns_once_of_the_rest(caplog):
    from streamlearn.observe import metrics

    figures = {"deadletters_total": {"invalid_json": 2}, "not_catalogued_total": 1}
    collector = metrics.SnapshotCollector("ingest", "m", lambda: figures)
    for _ in range(2):
        dead, other = list(collector.collect())
    assert dead.documentation == METRICS["streamlearn_ingest_deadletters_total"].help
    assert dead.samples[0].labels == {"model": "m", "reason": "invalid_json"}
    assert other.documentation == "not catalogued total"
    warned = [r for r in caplog.records if "not_catalogued" in r.getMessage()]
    assert len(warned) == 1


def test_the_alerts_and_the_dashboard_query_only_catalogued_metrics():
    """A renamed metric would leave an alert that never fires: each name deploy/ queries is
    in the catalog (a histogram's by its `_bucket`, `_sum`, `_count`)."""
    for path in ("prometheus/alerts.yml", "grafana/dashboards/streamlearn.json"):
        text = (ROOT / "deploy" / path).read_text(encoding="utf-8")
        for name in set(re.findall(r"\bstreamlearn_[a-z0-9_]*[a-z0-9]", text)):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            histogram = base in METRICS and METRICS[base].kind == "histogram"
            assert name in METRICS or histogram, f"{path} queries {name}, not in the catalog"


# -- the hand-written docs against the code ------------------------------------------------

HAND_WRITTEN = [
    p
    for p in sorted((ROOT / "docs").rglob("*.md"))
    if p.name not in ("modules.md", "learning-log.md", "changelog.md")  # history, by design
] + [ROOT / "README.md"]
TABLES = ("learner", "learning", "actor", "ingest", "labels", "promotion")


def _config_keys() -> set[str]:
    """Every config key as the docs write it: from a table on (`learner.publish.min_ms`)."""
    from streamlearn.config.tables import walk

    keys = set()
    for path, _, name, _ in walk(AppConfig):
        parts = f"{path}.{name}".split(".")
        keys |= {".".join(parts[i:]) for i, part in enumerate(parts) if part in TABLES}
    return keys


def test_every_config_key_and_variable_the_guides_name_exists():
    """A key the hand-written docs name (`learner.publish.min_ms`, `actor.max_batch`) is a
    field of the config, and a `STREAMLEARN_*` variable is in the registry: a renamed or
    removed one fails here, not in a reader's config (`actor.inbox` and the like name
    modules of `streamlearn/`)."""
    keys = _config_keys()
    variables = set(environment.VARIABLES) | {v.name for v in Settings.variables()}
    wrong = []
    for path in HAND_WRITTEN:
        text = path.read_text(encoding="utf-8")
        for token in re.findall(rf"`((?:{'|'.join(TABLES)})\.[a-z_][a-z_.]*[a-z_])", text):
            module = ROOT / "streamlearn" / (token.replace(".", "/") + ".py")
            if token not in keys and not module.exists() and not token.endswith(".py"):
                wrong.append(f"{path.relative_to(ROOT)}: {token}")
        for name in re.findall(r"STREAMLEARN_[A-Z0-9_]*[A-Z0-9]", text):
            if name not in variables:
                wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert wrong == [], "names in the docs that the code does not have"


def test_the_configuration_guide_points_to_the_generated_reference():
    """It keeps no copy of the fields, their defaults or the variables (copies drifted):
    it links to the pages written from the code."""
    guide = (ROOT / "docs" / "guides" / "configuration.md").read_text(encoding="utf-8")
    assert "../reference/configuration.md" in guide and "../reference/environment.md" in guide
    assert "| learner |" not in guide and "| variable |" not in guide


def test_the_site_search_finds_identifiers_by_their_parts():
    """The search plugin's separator (mkdocs.yml) splits a dotted TOML path and a metric's
    full name into words, so `kept_versions`, `http_port` and `request_latency_seconds`
    find their reference rows (lunr splits the query by the same separator)."""
    site = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")  # (python tags: no safe_load)
    split = re.compile(re.search(r"\n  - search:\n      separator: '(.+)'\n", site)[1])

    def words(text: str) -> list[str]:
        return [w for w in split.split(text) if w]

    for query, row in (
        ("kept_versions", "models.&lt;name&gt;.actor.kept_versions"),
        ("http_port", "models.&lt;name&gt;.actor.http_port"),
        ("request_latency_seconds", "streamlearn_actor_request_latency_seconds"),
    ):
        assert set(words(query)) <= set(words(row)), (query, words(row))
    assert words("publish.min_ms = 0.5") == ["publish", "min", "ms", "0.5"]


def _named_flags(text: str) -> list[tuple[str, str]]:
    """(command, flag) for each `--flag` written after `streamlearn COMMAND` on its line,
    up to the line's end, its code span's end, a comment or the next command (` | `)."""
    found = []
    named = r"\bstreamlearn ([a-z][a-z-]*(?:\|[a-z][a-z-]*)*)([^`\n]*)"
    for commands, rest in re.findall(named, text):
        rest = re.split(r" \| | #|  +[a-z]", rest, maxsplit=1)[0]
        found += [(c, f) for c in commands.split("|") for f in re.findall(r"--[a-z][a-z-]*", rest)]
    return found


def test_every_flag_and_metric_the_docs_name_exists():
    """A flag the hand-written docs give a command (`streamlearn status --watch`) is one of
    its flags, and a metric they name is in the catalog: a renamed or removed one fails
    here. The docs list no command's flags in full: they link to the generated page."""
    parsers = {name: parser for name, (_, parser) in GEN["subcommands"](_parser()).items()}
    metrics = {m.full_name for m in METRICS.values()}
    wrong = []
    for path in HAND_WRITTEN:
        text, where = path.read_text(encoding="utf-8"), path.relative_to(ROOT)
        for command, flag in _named_flags(text):
            parser = parsers.get(command)  # "streamlearn learns ...": prose
            if parser and flag not in {f for a in parser._actions for f in a.option_strings}:
                wrong.append(f"{where}: streamlearn {command} {flag}")
        for name in re.findall(r"\bstreamlearn_(?:ingest|learner|actor)_[a-z0-9_]+", text):
            if re.sub(r"_(bucket|sum|count)$", "", name) not in metrics:
                wrong.append(f"{where}: {name}")
    assert wrong == [], "flags and metrics in the docs that the code does not have"
    operating = (ROOT / "docs" / "guides" / "operating.md").read_text(encoding="utf-8")
    assert "../reference/commands.md" in operating and "../reference/metrics.md" in operating


def test_identifiers_in_table_cells_break_between_their_words_only():
    """docs/hooks.py puts a break opportunity after each dot and underscore of a code span
    in a table cell (the stylesheet breaks nowhere else), and leaves other code alone."""
    hooks = runpy.run_path(str(ROOT / "docs" / "hooks.py"))
    html = (
        "<p><code>actor.kept_versions</code></p><table><tr>"
        "<td><code>models.&lt;name&gt;.actor.kept_versions</code></td>"
        "<td>a <code>request_latency_seconds</code> histogram</td></tr></table>"
    )
    out = hooks["on_page_content"](html, page=None, config=None, files=None)
    assert "<p><code>actor.kept_versions</code></p>" in out
    assert "<code>models.<wbr>&lt;name&gt;.<wbr>actor.<wbr>kept_<wbr>versions</code>" in out
    assert "<code>request_<wbr>latency_<wbr>seconds</code>" in out
    assert out.replace("<wbr>", "") == html
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "word-break: normal" in css
