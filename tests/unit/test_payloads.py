"""Unit tests for payload parsing: what ingest accepts, what it dead-letters, and why."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamlearn.config import parse_config
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import Samples
from streamlearn.contract.width import unquoted
from streamlearn.errors import PayloadError


def _parser(**model: Any) -> PayloadParser:
    return PayloadParser(parse_config({"models": {"m": model}}).model("m"))


BINARY = _parser(inputs=3, task="binary")
REGRESSION = _parser(inputs=3, task="regression")
MULTICLASS = _parser(inputs=2, task="multiclass", classes=3)
LSTM = _parser(inputs=2, task="regression", architecture="lstm", window=3)
SMALL = _parser(
    inputs=3, task="binary", ingest={"max_payload_bytes": 64, "max_samples_per_message": 2}
)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def accept(parser: PayloadParser, doc: Any) -> Samples:
    """Parse and insist that everything was accepted."""
    samples, _, rejections, _ = parser.parse_message(doc if isinstance(doc, bytes) else dumps(doc))
    assert rejections == [], [r.reason for r in rejections]
    assert samples is not None
    return samples


def reject(parser: PayloadParser, raw: bytes | Any) -> str:
    """Parse and insist that the whole message was rejected; return the reason."""
    raw = raw if isinstance(raw, bytes) else dumps(raw)
    samples, _, rejections, _ = parser.parse_message(raw)
    assert samples is None
    assert len(rejections) == 1
    assert rejections[0].payload == raw
    return rejections[0].reason


# -- accepted payloads ----------------------------------------------------------------------


def test_single_sample_is_one_float32_row():
    samples = accept(BINARY, {"x": [1, 2.5, -3], "y": 1, "id": "dev-1"})
    assert samples.x.dtype == np.float32 and samples.y.dtype == np.float32
    np.testing.assert_array_equal(samples.x, [[1, 2.5, -3]])
    np.testing.assert_array_equal(samples.y, [1])
    assert samples.ids == ("dev-1",)
    assert len(samples) == 1


def test_single_sample_without_id_has_no_ids():
    assert accept(BINARY, {"x": [0, 0, 0], "y": 0}).ids is None


def test_columnar_payload_keeps_rows_in_order_with_ids():
    samples = accept(BINARY, {"x": [[1, 2, 3], [4, 5, 6]], "y": [0, 1], "ids": ["a", "b"]})
    np.testing.assert_array_equal(samples.x, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(samples.y, [0, 1])
    assert samples.ids == ("a", "b")


def test_sample_list_keeps_good_items_and_rejects_bad_ones_in_one_summary():
    items = [
        {"x": [1, 2, 3], "y": 1, "id": "a"},
        {"x": [1, 2], "y": 0},
        5,
        {"x": [4, 5, 6], "y": 0, "id": "b"},
        {"x": [[1, 2, 3]], "y": [1]},
    ]
    raw = dumps({"samples": items})
    samples, _, rejections, _ = BINARY.parse_message(raw)
    assert samples is not None
    np.testing.assert_array_equal(samples.x, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(samples.y, [1, 0])
    assert samples.ids == ("a", "b")
    [summary] = rejections  # one per message, whatever the number of bad items
    assert summary.reason == (
        "samples.1: x must have shape [3], got [2]; "
        "samples.2: must be one sample object {x, y, id?}; "
        "samples.4: must be one sample object {x, y, id?} (3 of 5 samples rejected)"
    )
    assert summary.kind == "wrong_shape", "the kind of the first rejected item"
    assert summary.payload == raw


def test_sample_list_with_only_bad_items_accepts_nothing():
    samples, _, rejections, _ = BINARY.parse_message(dumps({"samples": [{"x": [1], "y": 0}]}))
    assert samples is None
    assert [r.reason for r in rejections] == [
        "samples.0: x must have shape [3], got [1] (1 of 1 samples rejected)"
    ]


def test_a_list_of_ten_thousand_bad_items_is_one_rejection_listing_five():
    raw = dumps({"samples": [{"x": [1, 2], "y": 0}] * 10_000})
    samples, _, rejections, _ = BINARY.parse_message(raw)
    assert samples is None and len(rejections) == 1
    reason = rejections[0].reason
    assert reason.count("samples.") == 5 and reason.startswith("samples.0: ")
    assert reason.endswith("(and 9995 more; 10000 of 10000 samples rejected)")
    assert len(reason) < 400


def test_a_document_of_many_unknown_fields_is_refused_naming_three():
    doc = {f"field{i}": 0 for i in range(90_000)}
    raw = dumps(doc)
    parser = _parser(inputs=3, task="binary", ingest={"max_payload_bytes": 4 * len(raw)})
    reason = reject(parser, raw)
    assert reason == (
        "90000 fields, at most 4 allowed; unknown: 'field0', 'field1', 'field2' (and 89997 more)"
    )
    samples, _, [rejection], _ = parser.parse_message(dumps({"x": [1, 2, 3], "y": 1, **doc}))
    assert samples is None and rejection.kind == "unknown_field"
    assert "unknown: 'field0', 'field1', 'field2' (and 89997 more)" in rejection.reason
    samples, _, [rejection], _ = parser.parse_message(
        dumps({"samples": [{"x": [1, 2, 3], "y": 1}, doc]})
    )
    assert samples is not None and len(samples) == 1
    assert rejection.reason.startswith("samples.1: 90000 fields, at most 4 allowed")


def test_keys_beyond_max_keys_per_message_are_rejected():
    parser = _parser(
        inputs=1,
        task="regression",
        architecture="lstm",
        window=2,
        ingest={"max_keys_per_message": 3, "max_devices": 3},
    )
    items = [{"key": f"d{i % 5}", "seq": i, "x": [i]} for i in range(10)]
    parsed = parser.parse_message(dumps({"samples": items}))
    assert parsed.observations.keys == ("d0", "d1", "d2") * 2, "the first 3 keys, all theirs"
    [summary] = parsed.rejections
    assert summary.kind == "too_many_keys"
    assert summary.reason.startswith(
        "samples.3: key 'd3': more than max_keys_per_message=3 distinct keys; samples.4: "
    )
    assert summary.reason.endswith("(4 of 10 samples rejected)")


def test_float32_extremes_are_accepted():
    big = float(np.finfo(np.float32).max)
    samples = accept(REGRESSION, {"x": [big, -big, 1e-30], "y": -big})
    assert np.isfinite(samples.x).all() and samples.x[0, 0] == np.float32(big)


def test_lstm_sample_is_a_window_of_feature_rows():
    window = [[1, 2], [3, 4], [5, 6]]
    samples = accept(LSTM, {"x": window, "y": 0.5})
    assert samples.x.shape == (1, 3, 2)
    np.testing.assert_array_equal(samples.x[0], window)
    columnar = accept(LSTM, {"x": [window, window], "y": [1, 2]})
    assert columnar.x.shape == (2, 3, 2)


def test_lstm_rejects_flat_x_and_wrong_window():
    assert reject(LSTM, {"x": [1, 2, 3, 4, 5, 6], "y": 0}).startswith(
        "x.0: Input should be a valid list"
    )
    assert reject(LSTM, {"x": [[1, 2]] * 4, "y": 0}) == "x must have shape [3, 2], got [4, 2]"
    assert reject(LSTM, {"x": [[1, 2, 3]] * 3, "y": 0}) == "x must have shape [3, 2], got [3, 3]"


# -- keyed observations (models with a window) ----------------------------------------------


def test_keyed_observations_are_one_step_each_with_an_optional_target():
    raw = dumps(
        {
            "samples": [
                {"key": "dev-1", "seq": 17, "x": [1, 2], "y": 0.5},
                {"x": [[1, 2]] * 3, "y": 1},  # a whole window beside them still works
                {"key": "dev-2", "seq": 1.7e9, "x": [3, 4]},
            ]
        }
    )
    samples, observations, rejections, _ = LSTM.parse_message(raw)
    assert rejections == [] and samples is not None and samples.x.shape == (1, 3, 2)
    assert observations is not None and observations.keys == ("dev-1", "dev-2")
    assert observations.seq.dtype == np.float64 and observations.seq.tolist() == [17, 1.7e9]
    np.testing.assert_array_equal(observations.x, [[1, 2], [3, 4]])
    assert observations.y[0] == 0.5 and np.isnan(observations.y[1])  # no target: NaN
    single = LSTM.parse_message(dumps({"key": "d", "seq": 0, "x": [1, 2]}))
    assert single.samples is None and single.observations.keys == ("d",)


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"seq": 1, "key": "", "x": [1, 2]}, "key: String should have at least 1 character"),
        ({"seq": 1, "key": "a b", "x": [1, 2]}, "key: String should match pattern"),
        ({"seq": 1, "key": "k" * 129, "x": [1, 2]}, "key: String should have at most 128"),
        ({"seq": 1, "key": 7, "x": [1, 2]}, "key: Input should be a valid string"),
        ({"key": "a", "x": [1, 2]}, "seq: Field required"),
        ({"key": "a", "seq": "3", "x": [1, 2]}, "seq: Input should be a valid number"),
        ({"key": "a", "seq": 2.0**60, "x": [1, 2]}, "seq: Input should be less than or equal"),
        ({"key": "a", "seq": 1, "x": [1, 2, 3]}, "x of a keyed observation must have shape [2]"),
        ({"key": "a", "seq": 1, "x": [[1, 2]] * 3}, "x.0: Input should be a valid number"),
        ({"key": "a", "seq": 1, "x": [1, 2], "y": "1"}, "y: Input should be a valid number"),
        ({"key": "a", "seq": 1, "x": [1, 2], "id": "i"}, "id: Extra inputs are not permitted"),
    ],
)
def test_bad_keyed_observations_are_rejected_alone(item, reason):
    good = {"key": "a", "seq": 0, "x": [1, 2], "y": 1}
    samples, observations, rejections, _ = LSTM.parse_message(dumps({"samples": [good, item]}))
    assert observations is not None and observations.keys == ("a",)
    assert len(rejections) == 1 and rejections[0].reason.startswith(f"samples.1: {reason}")
    assert reject(LSTM, item).startswith(reason)


def test_non_finite_seq_is_rejected():
    assert reject(LSTM, b'{"key": "a", "seq": NaN, "x": [1, 2]}').startswith("seq: ")


def test_a_model_without_a_window_rejects_keyed_observations():
    assert reject(REGRESSION, {"key": "a", "seq": 1, "x": [1, 2, 3], "y": 1}) == (
        "key: keyed observations need a model with a window, model 'm' has none"
    )


def test_binary_targets_of_keyed_observations_are_checked():
    binary = _parser(inputs=1, task="binary", architecture="conv1d", window=2)
    assert accept(binary, {"x": [[1], [2]], "y": 1}).x.shape == (1, 2, 1)
    assert reject(binary, {"key": "a", "seq": 1, "x": [1], "y": 2}).startswith("y must be in")


def test_key_only_request_has_the_newest_step_and_optional_seq():
    req = LSTM.parse_request(b'{"key": "dev-1", "x": [1, 2], "seq": 5, "id": "r"}')
    assert (req.key, req.seq, req.id, req.batched) == ("dev-1", 5.0, "r", False)
    np.testing.assert_array_equal(req.x, [[1, 2]])
    assert LSTM.parse_request(b'{"key": "dev-1", "x": [1, 2]}').seq is None
    with pytest.raises(PayloadError, match=r"must have shape \[2\] \(one step\)"):
        LSTM.parse_request(b'{"key": "dev-1", "x": [1, 2, 3]}')
    with pytest.raises(PayloadError, match="key-only requests need a model with a window"):
        REGRESSION.parse_request(b'{"key": "dev-1", "x": [1, 2, 3]}')


# -- rejected payloads ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"x": [1, 2, 3], "y": ', "invalid JSON"),
        (b"\xff\xfe\x00", "invalid JSON"),
        (b"", "invalid JSON"),
        (b"[1, 2, 3]", "payload must be a JSON object, got list"),
        (b'"x"', "payload must be a JSON object, got str"),
        (b"null", "payload must be a JSON object, got NoneType"),
    ],
)
def test_non_json_or_non_object_payload_is_rejected(raw, reason):
    assert reason in reject(BINARY, raw)


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"x": [1, 2], "y": 0}, "x must have shape [3], got [2]"),
        ({"x": [1, 2, 3, 4], "y": 0}, "x must have shape [3], got [4]"),
        ({"x": [], "y": 0}, "x must have shape [3], got [0]"),
        ({"x": [[1, 2, 3]], "y": 0}, "x.0: Input should be a valid number"),
    ],
)
def test_wrong_length_is_rejected(doc, reason):
    assert reject(BINARY, doc).startswith(reason)


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_literals_are_rejected_in_x_and_y(literal):
    in_x = reject(REGRESSION, b'{"x": [1, 2, ' + literal + b'], "y": 0}')
    assert in_x.startswith("x.2: Input should be a finite number")
    in_y = reject(REGRESSION, b'{"x": [1, 2, 3], "y": ' + literal + b"}")
    assert in_y.startswith("y: Input should be a finite number")


def test_values_beyond_float32_are_rejected():
    assert reject(REGRESSION, {"x": [1, 2, 3.5e38], "y": 0}) == "x: value out of float32 range"
    assert reject(REGRESSION, {"x": [1, 2, -1e39], "y": 0}) == "x: value out of float32 range"
    assert reject(REGRESSION, {"x": [1, 2, 3], "y": 1e39}) == "y: value out of float32 range"
    assert reject(REGRESSION, {"x": [[1, 2, 3e39]], "y": [0]}) == "x: value out of float32 range"


@pytest.mark.parametrize(
    ("value", "shown"), [('"3"', "'3'"), ("true", "True"), ("null", "None"), ("{}", "{}")]
)
def test_non_numbers_in_x_are_rejected_and_echoed(value, shown):
    reason = reject(BINARY, b'{"x": [1, 2, ' + value.encode() + b'], "y": 0}')
    assert reason == f"x.2: Input should be a valid number, got {shown}"


def test_boolean_or_string_y_is_rejected():
    assert (
        reject(BINARY, {"x": [1, 2, 3], "y": True}) == "y: Input should be a valid number, got True"
    )
    assert (
        reject(BINARY, {"x": [1, 2, 3], "y": "1"}) == "y: Input should be a valid number, got '1'"
    )


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"x": [1, 2, 3], "y": 0, "label": 1}, "label"),
        ({"x": [1, 2, 3], "y": 0, "ids": ["a"]}, "ids"),
        ({"x": [[1, 2, 3]], "y": [0], "id": "a"}, "id"),
        ({"samples": [{"x": [1, 2, 3], "y": 0}], "meta": {}}, "meta"),
    ],
)
def test_unknown_fields_are_rejected_by_name(doc, field):
    assert reject(BINARY, doc).startswith(f"{field}: Extra inputs are not permitted")


def test_missing_fields_are_named():
    assert reject(BINARY, {"y": 0}).startswith("x: Field required")
    assert reject(BINARY, {"x": [1, 2, 3]}).startswith("y: Field required")


@pytest.mark.parametrize(("sample_id", "why"), [("", "at least 1 character"), (5, "valid string")])
def test_bad_sample_ids_are_rejected(sample_id, why):
    assert why in reject(BINARY, {"x": [1, 2, 3], "y": 0, "id": sample_id})


def test_payload_over_max_payload_bytes_is_rejected_before_parsing():
    fits = b'{"x": [1, 2, 3], "y": 1}'.ljust(64)
    assert len(fits) == 64
    accept(SMALL, fits)
    over = fits + b" "
    assert reject(SMALL, over) == "payload of 65 bytes exceeds max_payload_bytes=64"
    assert reject(SMALL, b"[" * 100) == "payload of 100 bytes exceeds max_payload_bytes=64"


def test_too_many_samples_in_one_message_are_rejected():
    many = _parser(inputs=1, task="binary", ingest={"max_samples_per_message": 2})
    accept(many, {"x": [[0], [1]], "y": [0, 1]})
    accept(many, {"samples": [{"x": [0], "y": 0}, {"x": [1], "y": 1}]})
    expected = "3 samples exceed max_samples_per_message=2"
    assert reject(many, {"x": [[0], [1], [0]], "y": [0, 1, 0]}) == expected
    assert reject(many, {"samples": [{"x": [0], "y": 0}] * 3}) == expected


def test_empty_sample_list_is_rejected():
    assert reject(BINARY, {"samples": []}).startswith("samples: List should have at least 1 item")
    assert reject(BINARY, {"samples": {"x": [1, 2, 3]}}).startswith(
        "samples: Input should be a valid list"
    )


@pytest.mark.parametrize("y", [0, 1, 0.25])
def test_binary_accepts_labels_in_unit_interval(y):
    assert accept(BINARY, {"x": [1, 2, 3], "y": y}).y[0] == np.float32(y)


@pytest.mark.parametrize("y", [-0.5, 1.5, 2])
def test_binary_rejects_labels_outside_unit_interval(y):
    assert (
        reject(BINARY, {"x": [1, 2, 3], "y": y})
        == f"y must be in [0, 1] for a binary model, got [{float(y)}]"
    )
    columnar = reject(BINARY, {"x": [[1, 2, 3], [1, 2, 3]], "y": [0, y]})
    assert columnar.startswith("y must be in [0, 1] for a binary model")


def test_multiclass_accepts_class_indices():
    np.testing.assert_array_equal(
        accept(MULTICLASS, {"x": [[0, 0]] * 3, "y": [0, 1, 2]}).y, [0, 1, 2]
    )


@pytest.mark.parametrize("y", [3, -1, 1.5])
def test_multiclass_rejects_non_indices(y):
    reason = reject(MULTICLASS, {"x": [0, 0], "y": y})
    assert reason == f"y must be a class index in 0..2, got [{float(y)}]"


def test_regression_accepts_any_finite_target():
    np.testing.assert_array_equal(
        accept(REGRESSION, {"x": [[1, 2, 3]] * 2, "y": [-7.5, 1e6]}).y, [-7.5, 1e6]
    )


def test_ragged_columnar_rows_are_rejected():
    assert reject(BINARY, {"x": [[1, 2, 3], [1, 2]], "y": [0, 1]}) == "x: rows of different lengths"
    assert (
        reject(BINARY, {"x": [[1, 2], [1, 2]], "y": [0, 1]})
        == "each row of x must have shape [3], got [2]"
    )
    lstm = reject(LSTM, {"x": [[[1, 2]] * 3, [[1, 2], [3, 4], [5]]], "y": [0, 1]})
    assert lstm == "x: rows of different lengths"


def test_columnar_lengths_must_agree():
    assert reject(BINARY, {"x": [[1, 2, 3]] * 2, "y": [0]}) == "x has 2 rows but y has 1"
    ids = reject(BINARY, {"x": [[1, 2, 3]] * 2, "y": [0, 1], "ids": ["a"]})
    assert ids == "ids has 1 entries but y has 2"
    assert (
        reject(BINARY, {"x": [[1, 2, 3]], "y": [0], "ids": ["a", "b"]})
        == "ids has 2 entries but y has 1"
    )


def test_long_bad_values_are_truncated_in_the_reason():
    reason = reject(BINARY, {"x": [1, 2, "z" * 500], "y": 0})
    assert reason.startswith("x.2: Input should be a valid number, got 'zzz")
    assert len(reason) < 120


# -- prediction requests ----------------------------------------------------------------


def test_single_request_is_not_batched():
    req = BINARY.parse_request(b'{"x": [1, 2, 3], "id": "r1"}')
    assert req.batched is False
    assert req.x.dtype == np.float32
    np.testing.assert_array_equal(req.x, [[1, 2, 3]])
    assert req.id == "r1" and req.reply_to is None


def test_batched_request_keeps_rows_and_reply_to():
    req = BINARY.parse_request(b'{"x": [[1, 2, 3], [4, 5, 6]], "id": 7, "reply_to": "app/replies"}')
    assert req.batched is True
    np.testing.assert_array_equal(req.x, [[1, 2, 3], [4, 5, 6]])
    assert req.id == 7 and req.reply_to == "app/replies"


def test_batch_of_one_is_still_batched():
    req = BINARY.parse_request(b'{"x": [[1, 2, 3]]}')
    assert req.batched is True and req.x.shape == (1, 3)


def test_lstm_requests_single_and_batched():
    window = [[1, 2], [3, 4], [5, 6]]
    single = LSTM.parse_request(dumps({"x": window}))
    assert single.batched is False and single.x.shape == (1, 3, 2)
    batch = LSTM.parse_request(dumps({"x": [window, window]}))
    assert batch.batched is True and batch.x.shape == (2, 3, 2)
    np.testing.assert_array_equal(batch.x[1], window)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"x": [1, 2', "invalid JSON"),
        (b"[1, 2, 3]", "payload must be a JSON object, got list"),
        (b'{"x": [1, 2]}', "x must have shape [3], got [2]"),
        (b'{"x": [[1, 2, 3], [4, 5]]}', "x: rows of different lengths"),
        (b'{"x": [[1, 2], [4, 5]]}', "each row of x must have shape [3], got [2]"),
        (b'{"x": []}', "x: List should have at least 1 item"),
        (b'{"x": [1, 2, NaN]}', "x.2: Input should be a finite number"),
        (b'{"x": [1, 2, 1e39]}', "x: value out of float32 range"),
        (b'{"x": [1, 2, "3"]}', "x.2: Input should be a valid number"),
        (b'{"x": [1, 2, 3], "y": 1}', "y: Extra inputs are not permitted"),
        (b'{"x": [1, 2, 3], "reply_to": "a/#"}', "reply_to: String should match pattern"),
        (b'{"x": [1, 2, 3], "reply_to": ""}', "reply_to: String should have at least 1 character"),
        (b'{"x": [1, 2, 3], "id": 1.5}', "id"),
        (b'{"x": [1, 2, 3], "id": true}', "id"),
    ],
)
def test_bad_requests_raise_payload_error_with_reason(raw, reason):
    with pytest.raises(PayloadError) as info:
        BINARY.parse_request(raw)
    assert str(info.value).startswith(reason)


def test_oversize_request_is_refused():
    with pytest.raises(PayloadError, match=r"payload of 70 bytes exceeds max_payload_bytes=64"):
        SMALL.parse_request(b'{"x": [1, 2, 3]}'.ljust(70))


# -- known bugs ---------------------------------------------------------------------------

_DEEP = b"[" * 100_000 + b"]" * 100_000  # 200 kB: well under the 1 MiB default limit
_HUGE_INT = b'{"x": [1, 2, ' + b"1" * 5000 + b'], "y": 0}'  # 5 kB


def test_deeply_nested_json_is_rejected_not_raised():
    assert BINARY.parse_message(_DEEP).rejections[0].reason


def test_huge_integer_literal_is_rejected_not_raised():
    samples, _, rejections, _ = BINARY.parse_message(_HUGE_INT)
    assert samples is None and rejections[0].reason


@pytest.mark.parametrize(
    "raw", [_DEEP, b'{"x": [1, 2, ' + b"1" * 5000 + b"]}"], ids=["deep", "int"]
)
def test_unparseable_request_raises_payload_error(raw):
    with pytest.raises(PayloadError):
        BINARY.parse_request(raw)


# -- properties ---------------------------------------------------------------------------

PARSERS = [BINARY, REGRESSION, MULTICLASS, LSTM, SMALL]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=4), kids, max_size=4)
    ),
    max_leaves=20,
)
# JSON numbers that float32 holds exactly, so an accepted x must equal the input bit for bit.
f32_values = st.floats(width=32, allow_nan=False, allow_infinity=False) | st.integers(
    -(2**24), 2**24
)


def _x(shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    if len(shape) == 1:
        return st.lists(f32_values, min_size=shape[0], max_size=shape[0])
    return st.lists(_x(shape[1:]), min_size=shape[0], max_size=shape[0])


def _y(parser: PayloadParser) -> st.SearchStrategy[float]:
    if parser.model.task == "binary":
        return st.floats(0, 1, width=32)
    if parser.model.task == "multiclass":
        return st.integers(0, (parser.model.classes or 1) - 1)
    return f32_values


@st.composite
def valid_samples(draw, parser: PayloadParser) -> tuple[list[Any], list[Any], list[str] | None]:
    n = draw(st.integers(1, 4))
    xs = draw(st.lists(_x(parser.shape), min_size=n, max_size=n))
    ys = draw(st.lists(_y(parser), min_size=n, max_size=n))
    printable = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=8)
    ids = draw(st.none() | st.lists(printable, min_size=n, max_size=n))  # no Cc, no Cs
    return xs, ys, ids


def as_doc(form: str, xs: list[Any], ys: list[Any], ids: list[str] | None) -> dict[str, Any]:
    if form == "single":
        doc = {"x": xs[0], "y": ys[0]}
        return doc if ids is None else {**doc, "id": ids[0]}
    if form == "columnar":
        return {"x": xs, "y": ys} if ids is None else {"x": xs, "y": ys, "ids": ids}
    items = [{"x": x, "y": y} for x, y in zip(xs, ys, strict=True)]
    if ids is not None:
        items = [{**item, "id": i} for item, i in zip(items, ids, strict=True)]
    return {"samples": items}


# Numbers that sit on the edges a parser must judge: float32 range, bools, huge ints.
edge_numbers = st.sampled_from(
    [1e39, -1e39, 3.5e38, 3.4028234e38, 1e-46, 1e308, 2**64, -(2**63), 0.5, -1, 2, 3, True]
)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a document, the root included."""
    found = [path]
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        found += _paths(child, (*path, key))
    return found


def _replace_at(node: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: _replace_at(node[head], rest, new)}
    return [*node[:head], _replace_at(node[head], rest, new), *node[head + 1 :]]


@st.composite
def _mutate(draw, doc: Any) -> Any:
    """Change one place, picked uniformly, somewhere inside a valid document."""
    path = draw(st.sampled_from(_paths(doc)))
    node = doc
    for key in path:
        node = node[key]
    action = draw(st.integers(0, 2))
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        if action == 0:
            new = {k: v for k, v in node.items() if k != key}
        elif action == 1:
            new = {**node, draw(st.sampled_from(["x", "y", "id", "ids", "samples", "z"])): 1}
        else:
            new = {**node, key: draw(json_values)}
    elif isinstance(node, list) and node:
        i = draw(st.integers(0, len(node) - 1))
        if action == 0:
            new = node[:i] + node[i + 1 :]
        elif action == 1:
            new = [*node, node[i]]
        else:
            new = [*node, draw(json_values)] if draw(st.booleans()) else []
    elif isinstance(node, int | float) and not isinstance(node, bool):
        new = draw(st.one_of(edge_numbers, edge_numbers, st.floats(), st.integers(), json_values))
    else:
        new = draw(json_values)
    return _replace_at(doc, path, new)


@st.composite
def mutated_payloads(draw, parser: PayloadParser, requests: bool = False) -> bytes:
    if requests:
        xs, _, ids = draw(valid_samples(parser))
        doc: dict[str, Any] = {"x": xs if draw(st.booleans()) else xs[0]}
        doc = doc if ids is None else {**doc, "id": ids[0]}
    else:
        doc = as_doc(
            draw(st.sampled_from(["single", "columnar", "list"])), *draw(valid_samples(parser))
        )
    for _ in range(draw(st.integers(0, 2))):
        doc = draw(_mutate(doc))
    raw = dumps(doc)
    if draw(st.integers(0, 5)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


@st.composite
def parser_and_payload(draw, requests: bool = False) -> tuple[PayloadParser, bytes]:
    parser = draw(st.sampled_from(PARSERS))
    raw = draw(
        st.one_of(
            json_values.map(dumps),
            st.dictionaries(
                st.sampled_from(["x", "y", "id", "ids", "samples", "extra"]),
                json_values,
                max_size=4,
            ).map(dumps),
            mutated_payloads(parser, requests),
            mutated_payloads(parser, requests),
            st.binary(max_size=40),
        )
    )
    return parser, raw


def check_outcome(parser: PayloadParser, samples: Samples | None, rejections: list) -> None:
    """What every parse result must look like, whatever the payload."""
    assert samples is not None or rejections, "a payload was neither accepted nor rejected"
    for rejection in rejections:
        assert isinstance(rejection.reason, str) and rejection.reason.strip()
        assert isinstance(rejection.payload, bytes)
    if samples is None:
        return
    n = len(samples.y)
    assert 1 <= n <= parser.model.ingest.max_samples_per_message
    assert samples.x.dtype == np.float32 and samples.y.dtype == np.float32
    assert samples.x.shape == (n, *parser.shape) and samples.y.shape == (n,)
    assert np.isfinite(samples.x).all() and np.isfinite(samples.y).all()
    assert samples.ids is None or len(samples.ids) == n
    if parser.model.task == "binary":
        assert ((samples.y >= 0) & (samples.y <= 1)).all()
    if parser.model.task == "multiclass":
        assert np.isin(samples.y, np.arange(parser.model.classes or 0)).all()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parser_and_payload())
def test_any_payload_is_accepted_well_formed_or_rejected_with_reason(case):
    parser, raw = case
    samples, _, rejections, _ = parser.parse_message(raw)
    event("accepted some" if samples is not None else "rejected all")
    check_outcome(parser, samples, rejections)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parser_and_payload(requests=True))
def test_any_request_is_parsed_or_refused_with_payload_error(case):
    parser, raw = case
    try:
        req = parser.parse_request(raw)
    except PayloadError as exc:
        event("refused")
        assert str(exc).strip()
        return
    event("parsed")
    assert req.x.dtype == np.float32 and req.x.shape[1:] == parser.shape
    assert np.isfinite(req.x).all()
    assert req.batched or req.x.shape[0] == 1


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    st.sampled_from([BINARY, REGRESSION, MULTICLASS, LSTM]),
    st.sampled_from(["single", "columnar", "list"]),
)
def test_valid_samples_round_trip(data, parser, form):
    xs, ys, ids = data.draw(valid_samples(parser))
    if form == "single":
        xs, ys, ids = xs[:1], ys[:1], None if ids is None else ids[:1]
    samples = accept(parser, as_doc(form, xs, ys, ids))
    np.testing.assert_array_equal(samples.x, np.asarray(xs, dtype=np.float32))
    np.testing.assert_array_equal(samples.y, np.asarray(ys, dtype=np.float32))
    assert samples.ids == (None if ids is None else tuple(ids))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"x": [1, 2, 3], ' + b",".join(b'"k%d": 0' % i for i in range(5000)) + b"}", "too wide"),
        (b'{"x": [' + b"0," * 100_000 + b"0]}", "too wide: 100001 fields and values"),
        (b'{"x": ' + b"[" * 9000 + b"]" * 9000 + b"}", "too deep or too wide: 9001 lists"),
    ],
)
def test_a_request_wider_than_any_valid_one_is_refused_before_it_is_decoded(payload, reason):
    with pytest.raises(PayloadError, match=reason) as err:
        BINARY.parse_request(payload)
    assert err.value.kind == "oversize" and "refused unread" in str(err.value)


def test_separators_in_strings_are_no_allowance_for_padding_outside_them():
    """Issue 62, finding 5: a categorical model's request may hold `:`/`,` in its strings,
    and padding outside them does not get that allowance: 20,000 made-up fields are refused
    undecoded; the same characters inside the strings of a valid request are read."""
    named = _parser(inputs=["t", "kind"], task="regression", categorical={"kind": ["a", "b"]})
    padded = b'{"t": 1, "kind": "a", ' + b",".join(b'"k%d": 0' % i for i in range(20_000)) + b"}"
    with pytest.raises(PayloadError, match="too wide") as err:
        named.parse_request(padded)
    assert err.value.kind == "oversize"
    rows = [{"t": 1.0, "kind": ":," * 128, "id": ":," * 128} for _ in range(64)]
    assert named.parse_request(dumps({"samples": rows})).x.shape == (64, 2)


def _outside_strings(raw: bytes) -> bytes:
    """What a JSON reader finds outside strings, read one byte at a time (the reference)."""
    out, at, inside = bytearray(), 0, False
    while at < len(raw):
        byte = raw[at]
        if inside and byte == ord("\\"):
            at += 2  # an escape: the next byte is the string's, whatever it is
            continue
        if byte == ord('"'):
            inside = not inside
        elif not inside:
            out.append(byte)
        at += 1
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.text(alphabet='"\\,:[{a\u00e9\n', max_size=12) | st.integers(),
        lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=40,
    ),
    st.booleans(),
    st.floats(0, 1),
)
def test_what_lies_outside_strings_is_found_as_a_json_reader_finds_it(doc, ascii_only, cut):
    """`unquoted` (vectorised, or sliced between few strings) against a byte-by-byte
    reader, on documents full of quotes, backslashes and separators in their strings,
    whole and cut short (an unterminated string runs to the end)."""
    raw = json.dumps(doc, ensure_ascii=ascii_only).encode()
    for text in (raw, raw[: int(cut * len(raw))]):
        assert bytes(unquoted(text)) == _outside_strings(text)
    many = raw + b"," + b'"\\\\\\"",' * 4100 + raw  # past the strings that are sliced
    assert bytes(unquoted(many)) == _outside_strings(many)


def test_an_unterminated_string_of_escaped_quotes_is_refused_at_once():
    """A regular expression over it took seconds for 40 KB, quadratic (the MQTT door's
    only thread): the scan is linear, and the request an error reply."""
    raw = b'{"x": ' + b"[" * 20 + b'"' + b'\\"' * 400_000
    with pytest.raises(PayloadError, match="invalid JSON"):
        BINARY.parse_request(raw)


def test_the_widest_valid_positional_request_is_read():
    """A full batch of max_request_rows rows with the longest id, reply_to and key full of
    separators: the width check counts what a valid request can hold, never less."""
    rows = BINARY.model.actor.max_request_rows
    doc = {"x": [[0.5, 1.5, 2.5]] * rows, "id": ":," * 128, "reply_to": "a/" + ":," * 255}
    request = BINARY.parse_request(dumps(doc))
    assert request.x.shape == (rows, 3) and request.batched
    keyed = {"key": ":," * 64, "seq": 1, "x": [0.5, 1.5], "id": ":," * 128}
    assert LSTM.parse_request(dumps(keyed)).key == ":," * 64


# -- request ids: typed and bounded alike on every form and both doors ---------------------

NAMED = _parser(inputs=["t", "rpm"], task="regression")
HUGE = 10**4299  # 4,300 digits: the longest integer Python's json reads
GOOD_IDS = ["r", "é" * 256, 0, -(2**53 - 1), 2**53 - 1]
BAD_IDS = [
    ("", "a string of 1 to 256 characters"),
    ("r" * 257, "a string of 1 to 256 characters"),
    (2**53, "got 9007199254740992"),
    (-(2**53), "got -9007199254740992"),
    (HUGE, "got an integer of 14281 bits"),
    (True, "got True"),
    (1.5, "got 1.5"),
    (["r"], "got ['r']"),
]
REQUESTS = [
    (BINARY, {"x": [1, 2, 3]}),
    (BINARY, {"x": [[1, 2, 3], [4, 5, 6]]}),
    (LSTM, {"key": "dev-1", "x": [1, 2]}),
    (NAMED, {"t": 1, "rpm": 2}),
    (NAMED, {"samples": [{"t": 1, "rpm": 2}]}),
]


@pytest.mark.parametrize("rid", GOOD_IDS, ids=lambda v: repr(v)[:12])
@pytest.mark.parametrize(("parser", "doc"), REQUESTS, ids=repr)
def test_a_request_id_within_its_bounds_is_kept_as_sent(parser, doc, rid):
    assert parser.parse_request(dumps({**doc, "id": rid})).id == rid


@pytest.mark.parametrize(("rid", "shown"), BAD_IDS, ids=lambda v: repr(v)[:12])
@pytest.mark.parametrize(("parser", "doc"), REQUESTS, ids=repr)
def test_a_request_id_out_of_its_bounds_is_refused_naming_the_rule(parser, doc, rid, shown):
    """A 4,300-digit integer would be kept under a 4,300-character key: refused, as
    everything but a string of 1-256 characters or an integer JSON parsers read exactly."""
    with pytest.raises(PayloadError) as err:
        parser.parse_request(dumps({**doc, "id": rid}))
    rule = "id: a string of 1 to 256 characters or an integer within ±(2**53 - 1)"
    assert str(err.value).startswith(rule) and shown in str(err.value)


@pytest.mark.parametrize("rid", ["", "r" * 257, 5, None], ids=lambda v: repr(v)[:12])
def test_the_http_door_takes_the_same_string_ids_and_no_integers(rid):
    """The Open Inference Protocol's `id` is a string: the same 1-256 characters."""
    from streamlearn.actor import oip

    tensor = {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}
    body = dumps({"inputs": [tensor], **({} if rid is None else {"id": rid})})
    if rid is None:
        assert oip.read_infer(BINARY.model, BINARY, body, None)[1] is None
        return
    with pytest.raises(PayloadError, match=r"^id: a string of 1 to 256 characters, got "):
        oip.read_infer(BINARY.model, BINARY, body, None)
