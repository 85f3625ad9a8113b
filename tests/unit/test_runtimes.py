"""Which runtime serves a model (`streamlearn.actor.runtimes`): numpy for a built-in
architecture, TensorFlow for a factory's model, and a config that asks for the impossible
fails at start naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from streamlearn.actor import runtimes
from streamlearn.config.app import ModelConfig

FACTORY = "tests.factories:tiny_regressor"


def test_a_built_in_model_is_served_by_numpy_and_answers_its_prior():
    cfg = ModelConfig(name="m", inputs=3, task="multiclass", classes=4)
    runtime, why = runtimes.choose(cfg)
    assert runtime == "numpy" and "built-in" in why
    assert runtimes.starts_answered(cfg)
    model = runtimes.builder(runtime, (1,))(cfg)
    np.testing.assert_allclose(model(np.ones((2, 3), np.float32)), np.full((2, 4), 0.25), 1e-6)


def test_a_factory_model_or_a_factory_variant_is_served_by_tensorflow():
    cfg = ModelConfig(name="m", inputs=3, factory=FACTORY)
    assert runtimes.choose(cfg)[0] == "tensorflow" and not runtimes.starts_answered(cfg)
    mixed = ModelConfig(name="m", inputs=3, variants={"own": {"factory": FACTORY}})
    runtime, why = runtimes.choose(mixed)
    assert runtime == "tensorflow" and "'own'" in why
    asked = ModelConfig(name="m", inputs=3, actor={"runtime": "tensorflow"})
    assert runtimes.choose(asked) == ("tensorflow", "actor.runtime = 'tensorflow'")


def test_numpy_for_a_factory_model_fails_naming_the_field():
    with pytest.raises(ValidationError, match="actor.runtime: 'numpy' serves built-in"):
        ModelConfig(name="m", inputs=3, factory=FACTORY, actor={"runtime": "numpy"})
    with pytest.raises(ValidationError, match="variants.own: actor.runtime: 'numpy'"):
        ModelConfig(
            name="m", inputs=3, actor={"runtime": "numpy"}, variants={"own": {"factory": FACTORY}}
        )
