"""The conformance suite (`streamlearn.online.checks`) over every built-in kind of model:
each architecture, the hedge heads with the steps and memory heads and the single head,
binary, multiclass and regression, positional and named (categorical) inputs. Small
layers: the checks are about what a model keeps, not how well it learns."""

from __future__ import annotations

import pytest

from streamlearn.online import checks
from streamlearn.online.spec import ModelSpec

SPECS = {
    "linear binary": ModelSpec("binary", 3, architecture="linear"),
    "mlp binary, hedge with steps and memory": ModelSpec("binary", 4, hidden=(8,), memory=32),
    "mlp regression, one head": ModelSpec("regression", 3, hidden=(8, 4), heads="last"),
    "mlp multiclass with memory": ModelSpec("multiclass", 3, classes=3, hidden=(8,), memory=16),
    "lstm regression": ModelSpec("regression", 2, window=3, architecture="lstm", hidden=(4,)),
    "named, categorical": ModelSpec(
        "binary", ("t", "c", "v"), categorical={"c": ("x", "y")}, hidden=(8,), memory=16
    ),
}


@pytest.mark.parametrize("check", checks.CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("spec", list(SPECS))
def test_every_built_in_model_keeps_what_the_library_promises(spec, check):
    check(SPECS[spec])
