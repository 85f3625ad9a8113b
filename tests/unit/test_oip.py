"""The Open Inference Protocol documents the actor reads and writes (no server).

The HTTP door itself, against a real actor, Redis and Mosquitto and with a client no one
here wrote, is `tests/integration/test_http_door.py`.
"""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from streamlearn.actor import oip
from streamlearn.actor.bodies import BodyBounds
from streamlearn.config import ModelConfig
from streamlearn.contract.payloads import PayloadParser
from streamlearn.errors import PayloadError

NAMED = ModelConfig(
    name="m",
    inputs=["t", "ENERGY.Power", "kind"],
    target="failed",
    task="binary",
    categorical={"kind": ["press", "lathe"]},
)
POSITIONAL = ModelConfig(name="p", inputs=3, task="multiclass", classes=4)


def read(cfg: ModelConfig, doc: dict, tail: bytes = b"") -> np.ndarray:
    head = json.dumps(doc).encode()
    x, _, _ = oip.read_infer(cfg, PayloadParser(cfg), head + tail, len(head) if tail else None)
    return x


def test_named_inputs_are_one_tensor_per_field_and_read_as_the_mqtt_door_reads_them():
    doc = {
        "inputs": [
            {"name": "t", "shape": [2, 1], "datatype": "FP32", "data": [20.5, 21.0]},
            {"name": "ENERGY.Power", "shape": [2], "datatype": "INT32", "data": [3, 4]},
            {"name": "kind", "shape": [2, 1], "datatype": "BYTES", "data": ["lathe", "press"]},
        ]
    }
    x = read(NAMED, doc)
    mqtt = PayloadParser(NAMED).parse_request(
        {
            "samples": [
                {"t": 20.5, "ENERGY": {"Power": 3}, "kind": "lathe"},
                {"t": 21.0, "ENERGY": {"Power": 4}, "kind": "press"},
            ]
        }
    )
    np.testing.assert_array_equal(x, mqtt.x)
    assert x.tolist() == [[20.5, 3.0, 1.0], [21.0, 4.0, 0.0]]
    meta = oip.model_metadata(NAMED, [3, 4])
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [
        ("t", "FP32"),
        ("ENERGY.Power", "FP32"),
        ("kind", "BYTES"),
    ]
    assert meta["versions"] == ["3", "4"]


def test_binary_tensors_read_as_their_json_form():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    doc = {
        "inputs": [
            {
                "name": "x",
                "shape": [2, 3],
                "datatype": "FP64",
                "parameters": {"binary_data_size": x.nbytes},
            }
        ]
    }
    np.testing.assert_array_equal(read(POSITIONAL, doc, x.tobytes()), x.astype(np.float32))
    kinds = b"".join(struct.pack("<I", len(s)) + s for s in (b"press", b"lathe"))
    named = {
        "inputs": [
            {"name": "t", "shape": [2], "datatype": "FP32", "data": [1, 2]},
            {
                "name": "kind",
                "shape": [2],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(kinds)},
            },
        ]
    }
    assert read(NAMED, named, kinds)[:, 2].tolist() == [0.0, 1.0]


def test_the_response_is_y_rows_by_classes_with_the_version():
    reply = {"y": [[0.1, 0.2, 0.3, 0.4]], "version": 7, "variant": "base"}
    doc, tail = oip.response(POSITIONAL, reply, "r1")
    assert doc["model_version"] == "7" and doc["id"] == "r1" and tail == b""
    out = doc["outputs"][0]
    assert (out["name"], out["datatype"], out["shape"]) == ("y", "FP32", [1, 4])
    assert out["data"] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert oip.model_metadata(POSITIONAL, [])["outputs"][0]["shape"] == [-1, 4]


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2]}]},
            "2 values for shape [1, 3]",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, "a"]}]},
            "data must be numbers",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 1e39]}]},
            "out of float32 range",
        ),
        (
            {"inputs": [{"name": "x", "shape": [2000, 3], "datatype": "FP32", "data": [0] * 6000}]},
            "max_request_rows",
        ),
        (
            {"inputs": [{"name": "x", "shape": [-1, 3], "datatype": "FP32", "data": [1, 2, 3]}]},
            "shape must be a list",
        ),
        (
            {"inputs": [{"name": "y", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]},
            "one tensor named 'x'",
        ),
        (
            {
                "inputs": [
                    {
                        "name": "x",
                        "shape": [1, 3],
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": 99},
                    }
                ]
            },
            "past the body's end",
        ),
        (
            {
                "inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}],
                "outputs": [{"name": "z"}],
            },
            "one output, 'y'",
        ),
        ({"inputs": "x"}, "inputs: a list"),
        (
            {
                "inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}],
                "id": 5,
            },
            "id: a string",
        ),
    ],
)
def test_a_bad_request_says_what_is_wrong(doc: dict, reason: str):
    with pytest.raises(PayloadError, match=reason.replace("[", r"\[").replace("(", r"\(")):
        read(POSITIONAL, doc)


def test_a_named_request_with_an_unknown_or_short_field_is_refused():
    bad = {"inputs": [{"name": "rpm", "shape": [1], "datatype": "FP32", "data": [1]}]}
    with pytest.raises(PayloadError, match="'rpm'"):
        read(NAMED, bad)
    uneven = {
        "inputs": [
            {"name": "t", "shape": [2], "datatype": "FP32", "data": [1, 2]},
            {"name": "kind", "shape": [1], "datatype": "BYTES", "data": ["press"]},
        ]
    }
    with pytest.raises(PayloadError, match="1 rows, the others have 2"):
        read(NAMED, uneven)


def one_binary_string(raw: bytes) -> dict:
    """A named request whose categorical `kind` is one binary BYTES tensor of `raw`."""
    kind = {"name": "kind", "shape": [1], "datatype": "BYTES"}
    kind["parameters"] = {"binary_data_size": len(raw)}
    return {"inputs": [{"name": "t", "shape": [1], "datatype": "FP32", "data": [1]}, kind]}


def test_a_bytes_length_past_the_body_is_refused_without_wrapping():
    # 0xFFFFFFFC + 4 wraps to 0 in uint32 arithmetic (NumPy 2): the length must not.
    wrapped = struct.pack("<I", 0xFFFFFFFC) + b"press"
    with pytest.raises(PayloadError, match="malformed BYTES"):
        read(NAMED, one_binary_string(wrapped), wrapped)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (struct.pack("<I", 0) * 1_000_000, "1 strings expected for shape [1], and 3999996 bytes"),
        (b"\x00\x00", "2 bytes cannot hold the 1 strings"),
    ],
)
def test_a_bytes_tensor_is_read_as_far_as_its_shape_and_leftovers_refused(raw, error):
    """A million empty strings for a shape of one: the read stops at the one (the rest is
    an error, not walked value by value on the door's only thread)."""
    with pytest.raises(PayloadError, match=re.escape(error)):
        read(NAMED, one_binary_string(raw), raw)


def test_padding_outside_strings_gets_no_categorical_allowance():
    """Issue 62, finding 5: 520 KB of parameters on a categorical model passed both counts
    (each category's 256 characters were an allowance for `:`/`,` anywhere) and was decoded
    on the door's thread; now counted outside strings, it is a 400 unread."""
    doc = one_binary_string(b"")
    doc["parameters"] = {f"p{i}": 0 for i in range(40_000)}
    head = json.dumps(doc).encode()
    assert len(head) < BodyBounds(NAMED).json_bytes
    with pytest.raises(PayloadError, match="request too wide") as err:
        read(NAMED, doc)
    assert err.value.kind == "oversize"


def test_a_shape_larger_than_any_request_is_refused_before_its_data_is_read():
    for shape in ([0, 10**30], [10**9, 3], [2, 2**62, 0]):
        doc = {"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": []}]}
        with pytest.raises(PayloadError, match=r"shape \[.*\] .*at most"):
            read(POSITIONAL, doc)


@pytest.mark.parametrize("indent", [None, 2])
def test_the_largest_valid_request_fits_the_body_bounds(indent: int | None):
    """The bounds refuse no valid request: the widest numbers, nested, pretty-printed; the
    longest categorical values, every character escaped; binary tensors of FP64."""
    rows = 64
    windowed = ModelConfig(name="w", inputs=3, window=4, task="binary")
    windowed = windowed.model_copy(
        update={"actor": windowed.actor.model_copy(update={"max_request_rows": rows})}
    )
    x = np.full((rows, 4, 3), -1.1754943508222875e-38)
    doc = {
        "id": "\u2603" * 256,
        "inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP64", "data": x.tolist()}],
        "outputs": [{"name": "y", "parameters": {"binary_data": False}}],
    }
    body = json.dumps(doc, indent=indent).encode()
    bounds = BodyBounds(windowed)
    assert len(body) <= bounds.json_bytes
    bounds.check(body)
    assert read(windowed, doc).shape == (rows, 4, 3)
    binary = {**doc, "inputs": [{**doc["inputs"][0], "parameters": {"binary_data_size": x.nbytes}}]}
    del binary["inputs"][0]["data"]
    head = json.dumps(binary, indent=indent).encode()
    assert len(head) + x.nbytes <= bounds.limit(len(head))

    named = NAMED.model_copy(
        update={"actor": NAMED.actor.model_copy(update={"max_request_rows": rows})}
    )
    value = '"\\,:[{' * 42 + "\u0001" * 4  # 256 characters, each escaped or a separator
    doc = {
        "inputs": [
            {"name": "t", "shape": [rows, 1], "datatype": "FP64", "data": [[-1e-300]] * rows},
            {
                "name": "ENERGY.Power",
                "shape": [rows],
                "datatype": "INT64",
                "data": [-(2**63)] * rows,
            },
            {"name": "kind", "shape": [rows, 1], "datatype": "BYTES", "data": [[value]] * rows},
        ]
    }
    body = json.dumps(doc, indent=indent).encode()
    bounds = BodyBounds(named)
    assert len(body) <= bounds.json_bytes
    bounds.check(body)


X = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}]}


def wanted(cfg: ModelConfig, **doc: object) -> oip.Wanted:
    body = json.dumps({**X, **doc}).encode()
    return oip.read_infer(cfg, PayloadParser(cfg), body, None).wanted


def test_a_response_in_binary_as_tritonclient_asks_by_default():
    """`binary_data_output` (tritonclient's default without outputs) or an output's
    `binary_data`: the JSON says the size, the little-endian float32 rows follow it."""
    assert wanted(POSITIONAL) == oip.Wanted()
    asked = wanted(POSITIONAL, parameters={"binary_data_output": True})
    assert asked == wanted(POSITIONAL, outputs=[{"name": "y", "parameters": {"binary_data": True}}])
    y = [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]
    doc, tail = oip.response(POSITIONAL, {"y": y, "version": 3}, None, asked)
    out = doc["outputs"][0]
    assert "data" not in out and out["parameters"] == {"binary_data_size": 32} == {
        "binary_data_size": len(tail)
    }
    np.testing.assert_array_equal(np.frombuffer(tail, "<f4").reshape(2, 4), np.float32(y))


def test_classification_gives_each_rows_top_classes_as_triton_does():
    top2 = wanted(POSITIONAL, outputs=[{"name": "y", "parameters": {"classification": 2}}])
    y = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.3, 0.1, 0.1]]
    doc, _ = oip.response(POSITIONAL, {"y": y, "version": 3}, None, top2)
    out = doc["outputs"][0]
    assert (out["datatype"], out["shape"]) == ("BYTES", [2, 2])
    assert out["data"] == ["0.400000:3", "0.300000:2", "0.500000:0", "0.300000:1"]
    binary = ModelConfig(name="b", inputs=3, task="binary")
    both = oip.Wanted(binary=True, classification=5)  # at most the model's classes
    doc, tail = oip.response(binary, {"y": [[0.8]], "version": 1}, None, both)
    assert doc["outputs"][0]["shape"] == [1, 2]
    assert tail == b"".join(
        len(v).to_bytes(4, "little") + v for v in (b"0.800000:1", b"0.200000:0")
    )
    regression = ModelConfig(name="r", inputs=3, task="regression")
    with pytest.raises(PayloadError, match="is a regression, it has no classes"):
        wanted(regression, outputs=[{"name": "y", "parameters": {"classification": 1}}])


def test_a_requests_timeout_in_microseconds_and_bad_parameters():
    assert wanted(POSITIONAL, parameters={"timeout": 2500}).timeout_s == pytest.approx(0.0025)
    for parameters, reason in (
        ({"timeout": -1}, "parameters.timeout: microseconds"),
        ({"timeout": 1.5}, "parameters.timeout: microseconds"),
        ({"binary_data_output": "yes"}, "binary_data_output: true or false"),
        ([], "parameters: an object expected"),
    ):
        with pytest.raises(PayloadError, match=reason):
            wanted(POSITIONAL, parameters=parameters)


def test_the_model_config_is_what_perf_analyzer_reads():
    config = oip.model_config(NAMED)
    assert config["max_batch_size"] == NAMED.actor.max_request_rows
    assert config["input"][2] == {"name": "kind", "data_type": "TYPE_STRING", "dims": [1]}
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]
    assert oip.model_config(POSITIONAL)["input"] == [
        {"name": "x", "data_type": "TYPE_FP32", "dims": [3]}
    ]
