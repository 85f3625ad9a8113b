"""Named samples and requests: the objects devices publish, judged as the positional forms are.

No server: the parser alone (`streamlearn.contract.named`), and the model's `Encode` layer
(missing inputs imputed with the running mean, categorical inputs one-hot).
"""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest

from streamlearn.config import ModelConfig
from streamlearn.contract.payloads import PayloadParser
from streamlearn.errors import PayloadError

MACHINES = ModelConfig(
    name="machines",
    inputs=["temperature", "vibration", "ENERGY.Power", "machine_type"],
    target="failed",
    task="binary",
    categorical={"machine_type": ["press", "lathe", "mill"]},
)
PARSER = PayloadParser(MACHINES)
GOOD = {"temperature": 88.0, "vibration": 6.1, "ENERGY": {"Power": 3}, "machine_type": "lathe"}


def parse(doc: object, parser: PayloadParser = PARSER, **kw: object):
    return parser.parse_message(json.dumps(doc).encode(), **kw)


def test_a_named_sample_is_its_inputs_in_order_and_extra_fields_are_counted():
    samples, _, rejections, counts = parse({**GOOD, "failed": 1, "id": "s1", "rssi": -60})
    assert rejections == []
    np.testing.assert_allclose(samples.x, [[88.0, 6.1, 3.0, 1.0]], rtol=1e-6)
    assert samples.y.tolist() == [1.0] and samples.ids == ("s1",)
    assert counts.extra == 1


def test_strict_fields_makes_an_extra_field_a_dead_letter():
    strict = PayloadParser(MACHINES.model_copy(update={"strict_fields": True}))
    _, _, [rejection], _ = parse({**GOOD, "failed": 1, "rssi": -60}, strict)
    assert rejection.kind == "unknown_field" and "'rssi'" in rejection.reason


def test_missing_inputs_are_nan_counted_per_field_and_too_many_are_a_dead_letter():
    doc = {"temperature": 80, "vibration": None, "machine_type": "press", "failed": 0}
    samples, _, [], counts = parse(doc)
    assert math.isnan(samples.x[0, 1]) and math.isnan(samples.x[0, 2])
    assert dict(counts.missing) == {"vibration": 1, "ENERGY.Power": 1}
    # 3 of 4 missing: more than max_missing (half)
    _, _, [rejection], _ = parse({"temperature": 80, "failed": 0})
    assert rejection.kind == "missing_field" and "max_missing" in rejection.reason
    lenient = PayloadParser(MACHINES.model_copy(update={"max_missing": 0.75}))
    assert len(parse({"temperature": 80, "failed": 0}, lenient).samples) == 1


def test_a_categorical_value_is_its_index_and_an_unseen_one_is_counted():
    samples, _, [], counts = parse({**GOOD, "machine_type": "drill", "failed": 0})
    assert samples.x[0, 3] == -1.0 and dict(counts.unseen) == {"machine_type": 1}
    _, _, [rejection], _ = parse({**GOOD, "machine_type": "x" * 300, "failed": 0})
    assert rejection.kind == "bad_string" and "machine_type" in rejection.reason


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"temperature": "hot"}, "wrong_type"),
        ({"temperature": [88.0]}, "wrong_type"),
        ({"temperature": 1e39}, "non_finite"),
        ({"machine_type": 3}, "wrong_type"),
        ({"failed": 2}, "bad_target"),
        ({"failed": "yes"}, "wrong_type"),
        ({"id": 7}, "bad_string"),
    ],
)
def test_a_bad_field_is_a_dead_letter_naming_it(change, kind):
    _, _, [rejection], _ = parse({**GOOD, "failed": 1, **change})
    assert rejection.kind == kind
    assert next(iter(change)) in rejection.reason or kind == "bad_target"


def test_an_object_of_100000_fields_is_refused_before_its_fields_are_read():
    doc = {f"f{i}": 1 for i in range(100_000)}
    _, _, [rejection], _ = parse(
        doc,
        PayloadParser(
            MACHINES.model_copy(
                update={"ingest": MACHINES.ingest.model_copy(update={"max_payload_bytes": 4 << 20})}
            )
        ),
    )
    assert rejection.kind == "unknown_field" and "100000 fields" in rejection.reason


def test_a_list_keeps_its_good_objects_and_a_columnar_message_is_judged_whole():
    items = [
        {**GOOD, "failed": 1},
        {**GOOD, "temperature": "x", "failed": 0},
        {**GOOD, "failed": 0},
    ]
    samples, _, [rejection], _ = parse({"samples": items})
    assert samples.y.tolist() == [1.0, 0.0] and "samples.1: temperature" in rejection.reason
    columnar = {
        "temperature": [1, 2],
        "vibration": [3, 4],
        "ENERGY": {"Power": [5, 6]},
        "machine_type": ["press", "mill"],
        "failed": [1, 0],
        "ids": ["a", "b"],
    }
    samples, _, [], _ = parse(columnar)
    assert samples.x.tolist() == [[1, 3, 5, 0], [2, 4, 6, 2]] and samples.ids == ("a", "b")
    _, _, [rejection], _ = parse({**columnar, "vibration": [3]})
    assert rejection.kind == "wrong_shape"


def test_a_columnar_message_of_too_many_rows_is_refused_before_its_rows_are_built():
    """1 MiB of `[1,1,...]` is 524,280 rows: refused on its count, not after a dict per row
    (which peaked at 100 MiB for one message)."""
    body = json.dumps({"failed": [1] * 524_280}, separators=(",", ":")).encode()
    tracemalloc.start()
    try:
        _, _, [rejection], _ = PARSER.parse_message(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rejection.kind == "too_many_samples" and "524280 samples" in rejection.reason
    assert peak < 4 * len(body) + (8 << 20)  # the decoded JSON, not a row apiece


def test_a_sample_without_its_label_is_counted_not_learned_and_positional_forms_still_work():
    samples, _, rejections, counts = parse(GOOD)
    assert samples is None and rejections == [] and counts.unlabeled == 1
    samples, _, [], _ = parse({"x": [1, 2, 3, 0], "y": 1})
    assert samples.x.tolist() == [[1, 2, 3, 0]]


def test_named_requests_single_and_batched():
    request = PARSER.parse_request({**GOOD, "id": "r1", "reply_to": "me/replies"})
    assert request.x.shape == (1, 4) and not request.batched
    assert (request.id, request.reply_to) == ("r1", "me/replies")
    batch = PARSER.parse_request({"samples": [GOOD, {**GOOD, "vibration": None}]})
    assert batch.batched and batch.x.shape == (2, 4) and math.isnan(batch.x[1, 1])
    with pytest.raises(PayloadError, match="temperature: a number expected"):
        PARSER.parse_request({**GOOD, "temperature": "hot"})
    with pytest.raises(PayloadError, match="samples.1: .*max_missing"):
        PARSER.parse_request({"samples": [GOOD, {"temperature": 1}]})


def test_a_window_models_named_step_takes_its_key_from_the_topic_and_seq_from_arrival():
    model = ModelConfig(name="w", inputs=["a", "b"], window=3, architecture="lstm")
    parser = PayloadParser(model)
    _, observations, [], _ = parse({"a": 1, "b": 2, "y": 0.5}, parser, key="dev-1", at=1000.0)
    assert observations.keys == ("dev-1",) and observations.seq.tolist() == [1000.0]
    _, observations, [], _ = parse({"a": 1, "b": 2, "key": "t", "seq": 5}, parser, key="t")
    assert observations.keys == ("t",) and math.isnan(observations.y[0])
    _, _, [rejection], _ = parse({"a": 1, "b": 2}, parser, at=1.0)
    assert rejection.kind == "missing_field" and "key" in rejection.reason


def test_a_step_names_another_key_than_its_topics_only_where_the_source_allows():
    model = ModelConfig(name="w", inputs=["a"], window=3, architecture="lstm")
    named, positional = PayloadParser(model), PayloadParser(model.model_copy(update={"inputs": 1}))
    step = {"a": 1, "key": "victim", "seq": 5}
    _, observations, [rejection], _ = parse(step, named, key="dev-1")
    assert observations is None and rejection.kind == "wrong_key"
    assert "'victim'" in rejection.reason and "'dev-1'" in rejection.reason
    _, observations, [], _ = parse(step, named, key="dev-1", key_from_payload=True)
    assert observations.keys == ("victim",)
    # positional steps, alone or in a list (judged item by item)
    items = [{"key": k, "seq": 1, "x": [1.0]} for k in ("dev-1", "victim")]
    _, observations, [rejection], _ = parse({"samples": items}, positional, key="dev-1")
    assert observations.keys == ("dev-1",) and rejection.kind == "wrong_key"
    assert rejection.reason.startswith("samples.1: key: 'victim' is not")
    _, observations, [], _ = parse(items[1], positional, key="dev-1", key_from_payload=True)
    assert observations.keys == ("victim",)
    _, observations, [], _ = parse(items[1], positional, key="gw", granted=("victim",))
    assert observations.keys == ("victim",)


def test_the_model_imputes_a_missing_input_with_its_running_mean_and_one_hot_encodes():
    from streamlearn.nn.networks import build_model
    from streamlearn.online import standardize

    model = build_model(MACHINES)
    rng = np.random.default_rng(0)
    x = np.c_[
        rng.normal(80, 5, 512),
        rng.normal(5, 1, 512),
        rng.normal(3, 1, 512),
        rng.integers(0, 3, 512),
    ].astype("float32")
    x[::5, 0] = np.nan  # a fifth of the temperatures missing
    for stats, _ in standardize.statistics(model, 10_000):
        stats.update(x)
        stats.flush()
        mean = stats.mean
    assert abs(mean[0] - 80) < 1.5, "the running mean leaves missing values out of the sum"
    row = np.array([[np.nan, 5.0, 3.0, 1.0], [mean[0], 5.0, 3.0, 1.0]], "float32")
    served = model.predict(row, verbose=0)
    assert served[0] == pytest.approx(served[1], abs=1e-6), "missing = the running mean"
    kinds = np.array([[80, 5, 3, k] for k in (0, 1, 2, -1)], "float32")
    encoded = model.get_layer("encode")(model.get_layer("standardize")(kinds))
    one_hot = np.asarray(encoded)[:, 3:]
    assert one_hot.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]


def test_a_wide_named_request_is_refused_unread_and_the_largest_valid_one_is_not():
    wide = b'{"temperature": 1, ' + b",".join(b'"f%d": 0' % i for i in range(80_000)) + b"}"
    with pytest.raises(PayloadError, match="request too wide: 160001 fields") as err:
        PARSER.parse_request(wide)
    assert err.value.kind == "oversize"
    # a full batch of rows, each with its nested group and extra fields, is read
    row = {**GOOD, "rssi": -60, "note": "a:b,c", "meta": {"fw": [1, 2]}}
    rows = MACHINES.actor.max_request_rows
    assert PARSER.parse_request(json.dumps({"samples": [row] * rows}).encode()).x.shape == (
        rows,
        4,
    )
    deep = b'{"temperature": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(PayloadError, match="request too deep or too wide: 100001 lists"):
        PARSER.parse_request(deep)


def test_a_key_only_request_on_predict_client_names_only_keys_its_requester_owns():
    """Its own key, or one its gateways entry grants; whatever the model's sources are
    (none: keys from bare `samples`), a device cannot read another's history."""
    source = {"topic": "tele/+/SENSOR", "key": "topic:1"}
    model = ModelConfig(name="w", inputs=["a"], window=3, architecture="lstm", sources=[source])
    for m in (model, model.model_copy(update={"sources": ()})):
        parser = PayloadParser(m)
        assert parser.parse_request({"key": "dev-1", "a": 1}, "dev-1").key == "dev-1"
        with pytest.raises(PayloadError, match="'dev-2' is not the sender's own, 'dev-1'"):
            parser.parse_request({"key": "dev-2", "a": 1}, "dev-1")
        positional = PayloadParser(m.model_copy(update={"inputs": 1}))
        with pytest.raises(PayloadError, match="is not the sender's own"):
            positional.parse_request({"key": "dev-2", "x": [1.0]}, "dev-1")
        # bare predict and the HTTP door (no client level): any key
        assert parser.parse_request({"key": "dev-2", "a": 1}).key == "dev-2"
    gateways = {"gw": ("dev-2",), "ops": ("*",)}
    parser = PayloadParser(model.model_copy(update={"gateways": gateways}))
    assert parser.parse_request({"key": "dev-2", "a": 1}, "gw").key == "dev-2"
    with pytest.raises(PayloadError, match="'dev-3' is not the sender's own, 'gw'"):
        parser.parse_request({"key": "dev-3", "a": 1}, "gw")
    assert parser.parse_request({"key": "dev-3", "a": 1}, "ops").key == "dev-3"
