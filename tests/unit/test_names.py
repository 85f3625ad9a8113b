"""The namespaces that bind ids to their sender's topic level (`contract/names.py`): no
sender or id, whatever its characters, takes another's key or de-duplication id."""

from __future__ import annotations

import itertools

import pytest

from streamlearn.config import ModelConfig
from streamlearn.contract.names import (
    SCOPED,
    Names,
    http_owner,
    id_sender,
    label_id,
    owned,
    sample_id,
    sender_problem,
)
from streamlearn.contract.payloads import PayloadParser

SENDERS = [None, "", "a", "a:1", "1:a", "-", "a:s:1", "s", "l"]
IDS: list[str | int] = ["1", 1, "-1", -1, "s:1", ":", "a:s:1", "1:a:s:1", "i:1"]


def test_kept_predictions_of_two_senders_or_two_id_types_never_share_a_key():
    keys = [owned(s, i) for s, i in itertools.product(SENDERS, IDS)]
    assert len(set(keys)) == len(keys)
    assert owned("dev", 42) != owned("dev", "42")


def test_an_http_callers_namespace_is_no_topic_levels_and_never_shows_its_token():
    """Issue 65: an HTTP caller's owner holds a `/`, which no `predict/{client}` level
    holds, so its kept predictions and their labels' ids are nobody else's; the token's
    namespace is a digest of it, one per token."""
    owners = [http_owner(b"token-a", ""), http_owner(b"token-b", ""), http_owner(None, "::1")]
    owners.append(http_owner(None, "127.0.0.1"))
    assert all("/" in o and sender_problem(o) is None for o in owners)
    keys = [owned(s, i) for s, i in itertools.product([*SENDERS, *owners], IDS)]
    assert len(set(keys)) == len(keys)
    assert all("token-a" not in o for o in owners) and len(set(owners)) == 4
    assert http_owner(b"token-a", "10.0.0.1") == http_owner(b"token-a", "10.0.0.2")
    assert {id_sender(label_id(owned(o, "r"))) for o in owners} == set(owners)  # own shares
    assert all(Names("m").sender_of(f"streamlearn/m/labels/{o}") is None for o in owners)


def test_sample_and_label_ids_live_in_spaces_no_device_sample_id_can_take():
    bare = [i for i in IDS if isinstance(i, str)]
    scoped = [sample_id(s, i) for s, i in itertools.product(SENDERS[1:], bare)]
    labels = [label_id(owned(s, i)) for s, i in itertools.product(SENDERS, IDS)]
    every = [*bare, *scoped, *labels]
    assert len(set(every)) == len(every)
    assert all(i.startswith(SCOPED) for i in scoped + labels)
    assert [sample_id(None, i) for i in bare] == bare  # bare samples keep their ids


@pytest.mark.parametrize(
    "doc",
    [
        b'{"x": [1, 2], "y": 1, "id": "\\u001fl3:dev:s:1"}',
        b'{"x": [[1, 2]], "y": [1], "ids": ["a\\u0000"]}',
        b'{"samples": [{"x": [1, 2], "y": 1, "id": "\\u007f"}]}',
    ],
)
def test_a_sample_id_with_a_control_character_is_a_dead_letter(doc):
    parsed = PayloadParser(ModelConfig(name="m", inputs=2, task="binary")).parse_message(doc)
    assert parsed.samples is None
    assert [r.kind for r in parsed.rejections] == ["bad_string"]


def test_named_sample_ids_refuse_control_characters_too():
    cfg = ModelConfig(name="m", inputs=["a", "b"], task="binary", target="y")
    parsed = PayloadParser(cfg).parse_message(b'{"a": 1, "b": 2, "y": 1, "id": "\\u001fs"}')
    assert parsed.samples is None and parsed.rejections[0].kind == "bad_string"


def test_only_one_level_under_samples_or_labels_names_a_sender():
    n = Names("m", "p")
    assert n.sender_of("p/m/samples") == ("samples", None)
    assert n.sender_of("p/m/labels/a:b") == ("labels", "a:b")
    assert n.sender_of("p/m/labels/") == ("labels", "")
    for other in ("p/m/labels/a/b", "p/m/predict/a", "p/mm/labels", "q/m/samples", "p/m/samplesx"):
        assert n.sender_of(other) is None, other
    assert sender_problem("") and sender_problem("x" * 129) and not sender_problem("x" * 128)
