"""The Troubleshooting page (docs/gen_troubleshooting.py) cannot drift from the code: each
catalogued message is still what the modules that emit it say, every dead-letter kind has
its meaning and remedy, and the page shows them all."""

from __future__ import annotations

import ast
import re
import runpy
import typing
from functools import cache
from pathlib import Path

import pytest

from streamlearn.contract.records import DEAD_LETTERS, Kind
from streamlearn.observe.catalog import METRICS
from streamlearn.observe.troubles import TOPICS, TROUBLES, Trouble

ROOT = Path(__file__).resolve().parents[2]
GEN = runpy.run_path(str(ROOT / "docs" / "gen_troubleshooting.py"), run_name="gen_troubleshooting")


@cache
def literals(module: str) -> tuple[str, ...]:
    """Every string literal of a module of the package: plain strings, and the fixed parts of
    f-strings (adjacent literals joined, as Python joins them)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return tuple(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def fixed_parts(message: str) -> list[str]:
    """What a message says between its `<...>` placeholders, quotes around them trimmed
    (`'<model>'` is `{name!r}` in the code); parts of a character or two say nothing."""
    parts = (p.strip().strip("'\"").strip() for p in re.split(r"<[^<>]*>", message))
    return [p for p in parts if len(p) > 2]


def test_every_dead_letter_kind_has_its_meaning_and_remedy():
    assert list(DEAD_LETTERS) == list(typing.get_args(Kind))
    for kind, (means, do) in DEAD_LETTERS.items():
        assert means.strip() and do.strip(), kind


@pytest.mark.parametrize("trouble", TROUBLES, ids=lambda t: t.message[:40])
def test_each_message_is_what_its_code_emits(trouble: Trouble):
    """Reword a message in the code and this fails until the catalog says the same."""
    assert trouble.emitted_by and fixed_parts(trouble.message), trouble.message
    for module in trouble.emitted_by:
        found = literals(module)
        for part in fixed_parts(trouble.message):
            assert any(part in text for text in found), f"{module} never says {part!r}"


def test_each_trouble_is_filed_and_counted_by_a_catalogued_metric():
    for t in TROUBLES:
        assert t.topic in TOPICS, t.message
        assert t.shows and t.means and t.do, t.message
        assert not t.metric or t.metric in METRICS, t.metric
    assert len({t.message for t in TROUBLES}) == len(TROUBLES)
    assert {t.topic for t in TROUBLES} == set(TOPICS)


def test_the_issues_troubles_are_catalogued():
    """The ones a user meets first: no weights, a refused version, an ACL refusal, a full
    Redis, a slow broker, a bad config."""
    messages = " ".join(t.message for t in TROUBLES)
    for words in ("no weights published yet", "refused weights", "Not authorized",
                  "OOM command not allowed", "Nagle", "configuration error"):  # fmt: skip
        assert words in messages, words
    assert "streamlearn_actor_refused_versions_total" in {t.metric for t in TROUBLES}


def test_the_page_shows_every_trouble_and_every_kind():
    page = GEN["page"]()
    for t in TROUBLES:
        assert f"### `{t.message}`" in page
    for kind, (means, _) in DEAD_LETTERS.items():
        assert re.search(rf"^\| `{kind}` \| {re.escape(GEN['cell'](GEN['sentence'](means)))}",
                         page, re.M), kind  # fmt: skip
    assert "sl:{MODEL}:deadletter" in page


def test_the_site_builds_and_links_the_page():
    site = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "        - docs/gen_troubleshooting.py\n" in site
    assert "\n  gen_troubleshooting.py\n" in site
    assert "\n  - Troubleshooting: troubleshooting.md\n  - Recipes:\n" in site
    operating = (ROOT / "docs" / "guides" / "operating.md").read_text(encoding="utf-8")
    assert "(../troubleshooting.md)" in operating.strip().splitlines()[-1]
