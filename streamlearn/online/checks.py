"""What every built-in model keeps, as checks any spec can be run through (in the manner
of `river.checks`): `tests/learning/test_conformance.py` runs them over the built-in
specs, and a new layer or head is held to them by adding its spec there.

    for check in CHECKS:
        check(spec)  # an AssertionError says what broke

Each check builds its own models, seeded, with a one-bucket `LearningSpec` so that a
check traces one step, and learns a small stream of the spec's shape (`stream`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from streamlearn.online.model import OnlineModel
from streamlearn.online.spec import LearningSpec, ModelSpec

Check = Callable[[ModelSpec], None]
LEARNING = LearningSpec(buckets=(16,))  # one trace a model: the checks stay cheap
NO_REPLAY = LearningSpec(buckets=(16,), replay_ratio=0)  # (nor the replay's stacked steps)
SEED = 7


def stream(spec: ModelSpec, n: int = 48, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` samples of `spec`'s shape and a target that depends on the first input (named
    inputs as rows: category indices, a missing number as NaN)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.5, 2.0, (n, *spec.sample_shape)).astype(np.float32)
    for i, k in enumerate(spec.categories or ()):
        if k:
            x[..., i] = rng.integers(0, k, x.shape[:-1])
    signal = x.reshape(n, -1)[:, 0]
    if spec.task == "regression":
        y = 2.0 * signal + 1.0
    elif spec.task == "binary":
        y = (signal > 0.5).astype(np.float32)
    else:
        edges = np.quantile(signal, np.linspace(0, 1, spec.outputs + 1)[1:-1])
        y = np.digitize(signal, edges).astype(np.float32)
    return x, y.astype(np.float32)


def _model(spec: ModelSpec, learning: LearningSpec = LEARNING) -> OnlineModel:
    return OnlineModel(spec, learning, seed=SEED)


def _outputs(model: OnlineModel, x: np.ndarray) -> np.ndarray:
    if model.spec.task == "regression":
        return model.predict_many(x)
    return model.predict_proba_many(x)


def check_seeded_saved_and_standalone(spec: ModelSpec) -> None:
    """Before any sample every prediction is the prior (0.5, each class alike, or 0). Two
    models of one seed given the same samples predict the same, also when the arrays one
    of them was given are overwritten after each call (the model copies what it keeps),
    and predicting changes neither the model nor its input. Saved and loaded, the model
    predicts what it did; so does its standalone numpy model (what a TensorFlow-free
    actor and a device compute), within 1e-5."""
    x, y = stream(spec)
    a, b = _model(spec), _model(spec)
    prior = {"binary": 0.5, "multiclass": 1.0 / spec.outputs}.get(spec.task, 0.0)
    np.testing.assert_allclose(_outputs(a, x), prior, atol=1e-6, err_msg="not the prior")
    for lo in range(0, len(x), 16):
        given_x, given_y = x[lo : lo + 16].copy(), y[lo : lo + 16].copy()
        a.learn_many(given_x, given_y)
        given_x[:], given_y[:] = 1e3, 0  # garbage where a's samples were
        b.learn_many(x[lo : lo + 16], y[lo : lo + 16])
    probe = x.copy()
    before = _outputs(a, probe)
    np.testing.assert_array_equal(probe, x, err_msg="predicting changed its input")
    np.testing.assert_allclose(before, _outputs(b, x), atol=1e-6, err_msg="seeded runs differ")
    np.testing.assert_array_equal(before, _outputs(a, x), err_msg="predicting moved the model")
    assert a.figures()["samples_seen"] == len(x), a.figures()
    loaded = OnlineModel.from_bytes(a.to_bytes(), learning=LEARNING)
    assert loaded.spec == spec, loaded.spec
    np.testing.assert_allclose(_outputs(loaded, x), before, atol=1e-6, err_msg="loaded differs")
    standalone = a.to_numpy()(a.rows(x)).reshape(len(x), -1)
    raw = before.reshape(len(x), -1)
    raw = raw[:, 1:] if spec.task == "binary" else raw  # (the probability of 1)
    np.testing.assert_allclose(standalone, raw, atol=1e-5, err_msg="numpy model differs")


def check_padding_changes_nothing(spec: ModelSpec) -> None:
    """A batch learned padded to a bucket of 16 or of 64 rows is the same step: the padding
    rows weigh nothing and the real ones their mean (no replay, to compare steps alone)."""
    x, y = stream(spec, 12)
    small = _model(spec, NO_REPLAY)
    large = _model(spec, replace(NO_REPLAY, buckets=(64,)))
    for model in (small, large):
        model.learn_many(x[:5], y[:5])
        model.learn_many(x[5:], y[5:])
    np.testing.assert_allclose(
        _outputs(small, x), _outputs(large, x), atol=1e-5, err_msg="padding changed the step"
    )


def check_bad_input_is_refused(spec: ModelSpec) -> None:
    """A wrong width, a non-finite positional input or target, or a class the model does
    not have is a ValueError naming it, and nothing is learned; a named input may be
    missing (imputed)."""
    x, y = stream(spec, 4)
    model = _model(spec, NO_REPLAY)
    wrong = np.zeros((2, *spec.sample_shape[:-1], spec.sample_shape[-1] + 1), np.float32)
    bad: list[tuple[str, Callable[[], None]]] = [
        ("x", lambda: model.learn_many(wrong, y[:2])),
        ("y", lambda: model.learn_many(x, y[:3])),
        ("y", lambda: model.learn_many(x, np.full(4, np.nan, np.float32))),
    ]
    if spec.fields is None:
        holed = x.copy()
        holed[0, ...] = np.nan
        bad.append(("x", lambda: model.learn_many(holed, y)))
    if spec.task != "regression":
        bad.append(("y", lambda: model.learn_many(x, np.full(4, spec.outputs + 1.0))))
    for field, call in bad:
        try:
            call()
        except ValueError as exc:
            assert str(exc).startswith(f"{field}:"), f"the error names {field}: {exc}"
        else:
            raise AssertionError(f"accepted a bad {field}")
    assert model.figures()["samples_seen"] == 0, "a refused call learned"
    if spec.fields is not None:
        first, *rest = spec.fields
        sample = {name: 1.0 for name in rest if not spec.categorical.get(name)}
        model.learn_one(sample, y[0])  # `first` missing: imputed
        assert np.isfinite(_outputs(model, model.rows([sample]))).all()
        try:
            model.learn_one({**sample, first: "hot"}, y[0])
        except ValueError as exc:
            assert first in str(exc), exc
        else:
            if not spec.categorical.get(first):
                raise AssertionError(f"a string for the number {first!r} was learned")


CHECKS: tuple[Check, ...] = (
    check_seeded_saved_and_standalone,
    check_padding_changes_nothing,
    check_bad_input_is_refused,
)
