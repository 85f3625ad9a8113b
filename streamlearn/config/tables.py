"""The fields of `streamlearn.toml`, walked from its models, each with its TOML path: what
the configuration reference (docs/gen_reference.py) lists, so that no field is left out.

>>> from streamlearn.config.app import AppConfig
>>> paths = [f"{path}.{name}" for path, _, name, _ in walk(AppConfig)]
>>> "models.<name>.learner.max_batch" in paths, "models.<name>.sources[].topic" in paths
(True, True)
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

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


# The keys an example names its tables by: `[models.machines]`, `[models.machines.variants.wide]`.
EXAMPLE_KEYS = {"<name>": "machines", "<variant>": "wide"}


def examples(root: type[BaseModel]) -> dict[str, str]:
    """A TOML example of each table `walk` finds, by its path: the table's fields at their
    defaults (a field without one at its declared `examples`, else left out), under the
    smallest config that holds it, so that it loads as shown (a unit test loads each).

    >>> from streamlearn.config.app import AppConfig
    >>> print(examples(AppConfig)["models.<name>.learner.publish"])
    [models.machines]
    inputs = 4
    <BLANKLINE>
    [models.machines.learner.publish]
    every_steps = 50
    every_ms = 250
    min_ms = 10
    """
    tables: dict[str, type[BaseModel]] = {}
    for path, model, _, _ in walk(root):
        tables.setdefault(path, model)
    found = {}
    for path in tables:
        holders = [p for p in tables if p and path.startswith((p + ".", p + "["))]
        holders = [p for p in dict.fromkeys(["models.<name>", *holders]) if p != path]
        needs = getattr(tables[path], "EXAMPLE_MODEL", {})  # what the table needs of its model
        blocks = [
            _block(p, tables[p], True, needs if p == "models.<name>" else {}) for p in holders
        ]
        if path:
            blocks.append(_block(path, tables[path], required=False))
        found[path] = "\n\n".join(b for b in blocks if b)
    return found


def _block(
    path: str, model: type[BaseModel], required: bool, given: dict[str, Any] | None = None
) -> str:
    """A table's header and its fields (`required`: only those without a default, and
    those `given`, at the value given)."""
    lines = []
    given = given or {}
    for name, info in model.model_fields.items():
        if required and info.default is not PydanticUndefined and name not in given:
            continue
        value = given.get(name, info.default)
        if value is PydanticUndefined or value is None:
            value = info.examples[0] if info.examples else None
        shown = _toml(value)
        if shown is not None:
            lines.append(f"{name} = {shown}")
    if required and not lines:
        return ""
    for key, example in EXAMPLE_KEYS.items():
        path = path.replace(key, example)
    header = f"[[{path[:-2]}]]" if path.endswith("[]") else f"[{path}]"
    return "\n".join([header, *lines])


def _toml(value: Any) -> str | None:
    """A scalar or an array of scalars as TOML; None for what an example leaves out (unset,
    a table, an empty array)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float | str):
        return json.dumps(value)
    if isinstance(value, tuple | list) and value:
        items = [_toml(v) for v in value]
        return None if None in items else "[" + ", ".join(typing.cast(list[str], items)) + "]"
    return None


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
