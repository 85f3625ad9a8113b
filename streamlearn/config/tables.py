"""The fields of `streamlearn.toml`, walked from its models, each with its TOML path: what
the configuration reference (docs/gen_reference.py) lists, so that no field is left out.

>>> from streamlearn.config.app import AppConfig
>>> paths = [f"{path}.{name}" for path, _, name, _ in walk(AppConfig)]
>>> "models.<name>.learner.max_batch" in paths, "models.<name>.sources[].topic" in paths
(True, True)
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

# The keys of a table of tables, as a path shows them: `models.<name>`, `variants.<variant>`.
KEYS = {"models": "<name>", "variants": "<variant>"}


def walk(
    model: type[BaseModel], path: str = ""
) -> Iterator[tuple[str, type[BaseModel], str, FieldInfo]]:
    """(table path, model, field name, field info) of every field, depth first; `[]` in a
    path marks an array of tables (`[[models.<name>.sources]]`)."""
    for name, info in model.model_fields.items():
        yield path, model, name, info
        for step, inner in _models_in(info.annotation):
            step = step.replace("<key>", KEYS.get(name, "<key>"))
            yield from walk(inner, f"{path}.{name}{step}".lstrip("."))


def _models_in(annotation: Any) -> Iterator[tuple[str, type[BaseModel]]]:
    """The models a field holds, with the path step to each: "" (a table), "[]" (an array
    of tables), ".<key>" (a table of tables)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield "", annotation
    elif origin is dict and len(args) == 2:
        for step, model in _models_in(args[1]):
            yield ".<key>" + step, model
    elif origin is tuple:
        for step, model in _models_in(args[0]):
            yield "[]" + step, model
    else:
        for arg in args:
            yield from _models_in(arg)


def overlaid(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid on `base` field by field, a table within (`[learner.publish]`) too.

    >>> overlaid({"a": 1, "p": {"x": 1, "y": 2}}, {"p": {"y": 3}})
    {'a': 1, 'p': {'x': 1, 'y': 3}}
    """
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = overlaid(out[key], value) if both else value
    return out
