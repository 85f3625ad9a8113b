"""Unit tests for the weights blob codec: round trips, refusals, safetensors compatibility."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streamlearn.errors import WeightsError
from streamlearn.online.codec import check_fits, decode, encode

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_]


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "dense/kernel": rng.standard_normal((9, 64)).astype(np.float32),
        "dense/bias": np.zeros(64, np.float32),
        "step": np.array([12345], np.int64),
        "half": np.linspace(-1, 1, 6).astype(np.float16).reshape(2, 3),
        "f64": np.array([np.pi, -0.0, 1e300]),
        "i32": np.arange(-3, 3, dtype=np.int32),
        "i8": np.array([-128, 127], np.int8),
        "u8": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "mask": np.array([[True, False], [False, True]]),
        "empty": np.zeros((0, 4), np.float32),
    }


def blob_with(header: Any, data: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        assert got[name].tobytes() == np.ascontiguousarray(array).tobytes(), name


# -- round trips --------------------------------------------------------------------------


def test_round_trip_keeps_every_dtype_shape_value_and_metadata():
    arrays = weights()
    meta = {"version": "42", "model": "demo", "note": "ünïcode ✓"}
    got, got_meta = decode(encode(arrays, meta))
    assert_same(got, arrays)
    assert got_meta == meta


def test_round_trip_without_metadata_gives_empty_metadata():
    got, meta = decode(encode({"w": np.ones(3, np.float32)}))
    assert meta == {}
    np.testing.assert_array_equal(got["w"], [1, 1, 1])


def test_non_contiguous_arrays_are_written_in_logical_order():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    got, _ = decode(encode({"t": base.T, "s": base[:, ::2]}))
    np.testing.assert_array_equal(got["t"], base.T)
    np.testing.assert_array_equal(got["s"], base[:, ::2])


def test_decoded_arrays_are_writable_copies():
    blob = encode({"w": np.zeros(2, np.float32)})
    got, _ = decode(blob)
    got["w"][0] = 5  # an actor may update in place; the blob itself must not change
    assert decode(blob)[0]["w"][0] == 0


def test_non_finite_values_round_trip_so_check_fits_can_see_them():
    arrays = {"w": np.array([np.nan, np.inf, -np.inf], np.float32)}
    got, _ = decode(encode(arrays))
    assert_same(got, arrays)


@pytest.mark.parametrize("dtype", [np.complex64, np.dtype(">f4"), np.uint16, np.object_])
def test_unsupported_dtypes_are_refused_on_encode(dtype):
    with pytest.raises(WeightsError, match=r"^w: dtype .* is not supported$"):
        encode({"w": np.zeros(2, dtype)})


names = st.text(min_size=1, max_size=12).filter(lambda s: s != "__metadata__")


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        names,
        st.sampled_from(DTYPES).flatmap(
            lambda dt: hnp.arrays(
                dt, hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5)
            )
        ),
        max_size=5,
    ),
    st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3),
)
def test_round_trip_property(arrays, meta):
    got, got_meta = decode(encode(arrays, meta))
    assert_same(got, arrays)
    assert got_meta == meta


def test_scalar_weight_round_trips_and_still_fits():
    arrays = {"normalization/count": np.array(7, np.int64), "w": np.ones(2, np.float32)}
    got, _ = decode(encode(arrays))
    check_fits(
        got, {"normalization/count": ((), np.dtype(np.int64)), "w": ((2,), np.dtype(np.float32))}
    )
    assert got["normalization/count"] == 7


# -- malformed blobs ------------------------------------------------------------------------

GOOD = encode({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.int8)})


@pytest.mark.parametrize("cut", [0, 5, 8, 20, len(GOOD) - 1])
def test_truncated_blob_is_refused(cut):
    with pytest.raises(WeightsError):
        decode(GOOD[:cut])


def test_too_short_blob_names_its_length():
    with pytest.raises(WeightsError, match=r"blob of 5 bytes is too short"):
        decode(GOOD[:5])


def test_truncated_data_names_the_tensor():
    with pytest.raises(WeightsError, match=r"^b: data offsets 24\.\.28 do not match its shape$"):
        decode(GOOD[:-1])


@pytest.mark.parametrize("size", [10**6, 2**64 - 1, 101 * 1024 * 1024])
def test_header_length_beyond_the_blob_is_refused(size):
    blob = struct.pack("<Q", size) + GOOD[8:]
    with pytest.raises(
        WeightsError, match=rf"header length {size} does not fit a blob of {len(blob)} bytes"
    ):
        decode(blob)


@pytest.mark.parametrize(
    "header",
    [b"{bad", b"\xff\xfe  ", b"", b"[1, 2]", b'{"__metadata__": [1]}', b'{"w": "x"}', b"null"],
)
def test_bad_header_json_is_refused(header):
    with pytest.raises(WeightsError, match=r"^malformed header"):
        decode(struct.pack("<Q", len(header)) + header)


@pytest.mark.parametrize(
    "offsets",
    [[0, 12], [4, 12], [8, 0], [0, 4], [-4, 4], [0, 9]],
)
def test_wrong_offsets_are_refused(offsets):
    blob = blob_with({"w": {"dtype": "F32", "shape": [2], "data_offsets": offsets}}, bytes(8))
    with pytest.raises(WeightsError, match=r"^w: data offsets"):
        decode(blob)


@pytest.mark.parametrize(
    "info", [{"dtype": "F32", "shape": [2]}, {"dtype": "F32", "shape": [2], "data_offsets": [0]}]
)
def test_missing_or_short_offsets_are_refused(info):
    with pytest.raises(WeightsError, match=r"^malformed header"):
        decode(blob_with({"w": info}, bytes(8)))


@pytest.mark.parametrize("dtype", ["X9", "F8_E4M3", "c64", "float32", None])
def test_unknown_dtype_is_refused(dtype):
    blob = blob_with({"w": {"dtype": dtype, "shape": [2], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(WeightsError, match=r"^malformed header"):
        decode(blob)


def test_impossible_shape_is_refused():
    blob = blob_with({"w": {"dtype": "F32", "shape": [-1, -2], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(WeightsError, match=r"^malformed header"):
        decode(blob)


def test_deeply_nested_header_is_refused():
    header = b"[" * 100_000
    with pytest.raises(WeightsError):
        decode(struct.pack("<Q", len(header)) + header)


# -- check_fits ---------------------------------------------------------------------------

EXPECTED = {"kernel": ((3, 2), np.dtype(np.float32)), "bias": ((2,), np.dtype(np.float32))}


def fitting() -> dict[str, np.ndarray]:
    return {"kernel": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)}


def test_check_fits_accepts_matching_finite_weights():
    check_fits(fitting(), EXPECTED)  # refusal would raise
    check_fits(decode(encode(fitting()))[0], EXPECTED)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.pop("bias"), r"weight names differ: missing \['bias'\], unexpected \[\]"),
        (
            lambda a: a.update(extra=np.zeros(1, np.float32)),
            r"missing \[\], unexpected \['extra'\]",
        ),
        (lambda a: a.update(b=a.pop("bias")), r"missing \['bias'\], unexpected \['b'\]"),
        (
            lambda a: a.update(kernel=np.ones((2, 3), np.float32)),
            r"kernel: expected float32\[3, 2\], got float32\[2, 3\]",
        ),
        (
            lambda a: a.update(bias=np.zeros((1, 2), np.float32)),
            r"bias: expected float32\[2\], got float32\[1, 2\]",
        ),
        (
            lambda a: a.update(kernel=np.ones((3, 2), np.float64)),
            r"kernel: expected float32\[3, 2\], got float64\[3, 2\]",
        ),
        (
            lambda a: a.update(bias=np.zeros(2, np.float16)),
            r"bias: expected float32\[2\], got float16\[2\]",
        ),
    ],
)
def test_check_fits_refuses_wrong_names_shapes_and_dtypes(change, message):
    arrays = fitting()
    change(arrays)
    with pytest.raises(WeightsError, match=message):
        check_fits(arrays, EXPECTED)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_fits_refuses_non_finite_values(bad):
    arrays = fitting()
    arrays["kernel"][2, 1] = bad
    with pytest.raises(WeightsError, match=r"^kernel: contains non-finite values$"):
        check_fits(arrays, EXPECTED)


def test_check_fits_after_a_round_trip_refuses_smuggled_nan():
    arrays = fitting()
    arrays["bias"][0] = np.nan
    decoded, _ = decode(encode(arrays))  # the codec carries it; check_fits must stop it
    with pytest.raises(WeightsError, match="bias: contains non-finite values"):
        check_fits(decoded, EXPECTED)


# -- interoperability -----------------------------------------------------------------------


def test_blob_is_readable_by_safetensors(tmp_path):
    stnp = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")
    safetensors = pytest.importorskip("safetensors")
    arrays = weights()
    blob = encode(arrays, {"version": "7"})
    assert_same(stnp.load(blob), arrays)
    path = tmp_path / "w.safetensors"
    path.write_bytes(blob)
    with safetensors.safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"version": "7"}
        assert sorted(f.keys()) == sorted(arrays)
    # and the other way: a blob written by safetensors decodes with our reader
    arrays["scalar"] = np.array(3.5, np.float32)
    theirs = stnp.save(arrays, metadata={"version": "8"})
    got, meta = decode(theirs)
    assert_same(got, arrays)
    assert meta == {"version": "8"}
