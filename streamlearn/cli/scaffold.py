"""`streamlearn init FILE.csv`: a `streamlearn.toml` for a CSV file, every setting spelled out.

The shape of the model is read from the data (`streamlearn.cli.columns`): the columns' names
as named inputs (`inputs = ["temperature", ...]`, `target`, text columns of few values as
`categorical`), or `inputs = N` when a name cannot be a field's; the task and classes from
the label column. Every other setting is written with its default and a comment taken from
the pydantic field it sets, so the file never goes out of date with the config and a user
reads what they may change right where they change it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import textwrap
import tomllib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from streamlearn.cli.columns import TARGET, Inferred, infer
from streamlearn.config.app import ModelConfig
from streamlearn.config.defaults import DEFAULT_CONFIG
from streamlearn.config.loading import parse_config
from streamlearn.errors import ConfigError, StreamlearnError

_NESTED = ("ingest", "learner", "learning", "actor", "promotion", "labels")
_NAMED_ONLY = ("target", "strict_fields", "max_missing", "categorical")
_LATER = (*_NESTED, "variants")  # not plain keys of the model's table
# Kinds an annotation does not say plainly.
_KINDS = {
    ModelConfig.model_fields["inputs"]: "int >= 1, or a list of field names",
    ModelConfig.model_fields["target"]: "a field name",
    ModelConfig.model_fields["categorical"]: "{field = [values, ...], ...}",
}
# Examples for settings that are unset by default (TOML has no null): written commented out.
_EXAMPLES = {
    "classes": 3,
    "window": 16,
    "factory": "mypackage.models:build",
    "buckets": [16, 64, 256],
    "dir": "checkpoints",
    "clip_norm": 1.0,
    "tensorboard_dir": "tensorboard",
}


def model_name(path: Path) -> str:
    """The file's stem made a valid model name: `my data.csv` -> `my_data`."""
    name = re.sub(r"[^A-Za-z0-9_\-]+", "_", path.stem).strip("_")[:64]
    return name or "model"


def render(name: str, data: Inferred, source: str) -> str:
    """The TOML text: inferred fields, then every default with its comment."""
    model = data.model(name)
    if data.named:
        about = [
            *_wrap(
                f"inputs named after the columns: a sample is an object of these fields and "
                f"the label {data.target!r}, e.g. {_example(data)}",
                "# ",
            )
        ]
    else:
        about = [
            *_wrap(f"features, in the order x lists them: {', '.join(data.features)}", "# "),
            *_wrap(f"positional inputs (x is a list): {data.positional}", "# "),
        ]
    out = [
        f"# streamlearn.toml written by `streamlearn init {_printable(source)}`.",
        f"# {data.rows} rows; target column {_printable(repr(data.target))}: {data.reason}.",
        *about,
        "# Every setting below is at its default unless marked inferred; change any of them.",
        "# Unset settings are shown commented out with an example value.",
        "",
        f"[models.{name}]",
    ]
    inferred = {"inputs", "task", "classes", "target", "categorical"}
    for key, field in ModelConfig.model_fields.items():
        if key in ("name", "fields", "sources") or key in _LATER:
            continue
        note = "inferred from the data" if key in inferred else None
        if key == "inputs" and data.named:
            out += _setting(key, field, list(data.features), "inferred: the columns' names")
        elif key in _NAMED_ONLY and not data.named:
            lines = _setting(key, field, getattr(model, key), "with named inputs only")
            out += [*lines[:-1], f"# {lines[-1]}"]
        else:
            out += _setting(key, field, getattr(model, key), note)
    for section in _NESTED:
        out += _table(f"models.{name}.{section}", getattr(model, section))
    out += [
        "",
        f"# {ModelConfig.model_fields['variants'].description}; e.g.:",
        f"# [models.{name}.variants.wide]",
        "# hidden = [256, 256]",
        "# learning_rate = 0.003",
        "",
        f"# {ModelConfig.model_fields['sources'].description}; e.g.:",
        f"# [[models.{name}.sources]]",
        '# topic = "tele/+/SENSOR"',
        '# key = "topic:1"',
        "",
    ]
    return "\n".join(out)


def _table(path: str, policy: BaseModel) -> list[str]:
    """`[path]` with every field of `policy`, then a table of its own for each group
    (`[models.NAME.learner.publish]`)."""
    out = ["", f"# {_doc(type(policy))}", f"[{path}]"]
    groups = []
    for key, field in type(policy).model_fields.items():
        value = getattr(policy, key)
        if isinstance(value, BaseModel):
            groups.append((key, value))
        else:
            out += _setting(key, field, value)
    for key, value in groups:
        out += _table(f"{path}.{key}", value)
    return out


def _example(data: Inferred) -> str:
    """A sample as a device would send it, with the first few fields."""
    shown = [
        f'"{n}": "{data.categorical[n][0]}"' if n in data.categorical else f'"{n}": ...'
        for n in data.features[:3]
    ]
    more = ", ..." if len(data.features) > 3 else ""
    return "{" + ", ".join(shown) + more + f', "{data.target}": ...' + "}"


def _setting(key: str, field: FieldInfo, value: Any, note: str | None = None) -> list[str]:
    comment = field.description or key.replace("_", " ")
    comment = f"{comment} [{_kind(field)}]" + (f" ({note})" if note else "")
    lines = _wrap(comment, "# ")
    if value is None:
        example = _EXAMPLES.get(key)
        shown = _toml(example) if example is not None else "..."
        return [*lines, f"# {key} = {shown}  (unset)"]
    if field.annotation is float:
        value = float(value)
    return [*lines, f"{key} = {_toml(value)}"]


def _kind(field: FieldInfo) -> str:
    """The field's type and bounds, read from its annotation: `int, >= 1`."""
    if field in _KINDS:
        return _KINDS[field]
    args = typing.get_args(field.annotation)
    literals = [a for a in args if isinstance(a, str)]
    if typing.get_origin(field.annotation) is typing.Literal:
        kind = "one of " + ", ".join(literals)
    else:
        kind = re.sub(r"\b(typing\.|NoneType)", "", str(field.annotation).replace("<class '", ""))
        kind = kind.replace("'>", "").replace(" | None", "") or "value"
        kind = re.sub(r"tuple\[(\w+), \.\.\.\]", r"list of \1", kind)
    ops = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    for meta in field.metadata:
        for attr, op in ops.items():
            if getattr(meta, attr, None) is not None:
                kind += f", {op} {getattr(meta, attr)}"
    return kind


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_key(k)} = {_toml(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def _key(name: str) -> str:
    """A TOML key: bare when it may be, else quoted (a dotted field name is one key).

    >>> _key("machine_type"), _key("ENERGY.Power")
    ('machine_type', '"ENERGY.Power"')
    """
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _string(name)


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (JSON's
    escapes are not TOML's: JSON writes a character beyond U+FFFF as two surrogates).

    >>> print(_string('a "b"\\n\\x1b'))
    "a \\"b\\"\\n\\u001b"
    """
    body = re.sub(r'["\\\x00-\x1f\x7f]', lambda m: _ESCAPES.get(m[0], f"\\u{ord(m[0]):04x}"), text)
    return f'"{body}"'


def _printable(text: str) -> str:
    """Text fit for a TOML comment, one line: control characters (a newline would end the
    comment and start TOML) and lone surrogates (an undecodable file name) escaped.

    >>> _printable('x.csv\\n[models.evil]')
    'x.csv\\\\n[models.evil]'
    """
    return re.sub(
        r"[\x00-\x1f\x7f\ud800-\udfff]", lambda m: m[0].encode("unicode_escape").decode(), text
    )


def _wrap(text: str, prefix: str) -> list[str]:
    lines = textwrap.wrap(_printable(text), 96, initial_indent=prefix, subsequent_indent=prefix)
    return lines or [prefix]


def _doc(cls: type[BaseModel]) -> str:
    return (cls.__doc__ or cls.__name__).strip().splitlines()[0]


def write(args: argparse.Namespace) -> int:
    """The `init` command."""
    path = Path(args.file)
    output = Path(args.output or DEFAULT_CONFIG)
    if output.exists() and not args.force:
        raise ConfigError(f"{output} exists; pass --force to overwrite it, or --output PATH")
    name = args.name or model_name(path)
    if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", name):
        raise ConfigError(f"--name must be 1-64 of A-Z a-z 0-9 _ -, got {name!r}")
    data = infer(path, args.target, args.task)
    try:
        expected = data.model(name)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path}: its columns make no valid model: {problems}") from None
    text = render(name, data, path.name)
    _check(text, name, expected, output)
    output.write_text(text, encoding="utf-8")
    kinds = f", {len(data.categorical)} categorical" if data.categorical else ""
    print(
        f"wrote {output}: model {name!r}, {len(data.features)} inputs{kinds}, task {data.task}"
        + (f" with {data.classes} classes" if data.classes else "")
        + f" ({data.reason}; target column {data.target!r}, {data.rows} rows)"
    )
    if data.named:
        print(f"inputs named after the columns: {', '.join(data.features)}")
    else:
        print(f"note: positional inputs (inputs = {len(data.features)}): {data.positional}")
    if not data.named and data.target != TARGET:
        print(
            f"note: `streamlearn publish {path.name}` reads the label from a column named "
            f"{TARGET!r}: rename column {data.target!r} to {TARGET!r} in the file"
        )
    config = (
        "" if output.name == DEFAULT_CONFIG and output.parent == Path() else f" --config {output}"
    )
    print(
        f"next: streamlearn up{config}   then: streamlearn publish {shlex.quote(str(path))}{config}"
    )
    return 0


def _check(text: str, name: str, expected: ModelConfig, output: Path) -> None:
    """The text must mean exactly one model, the defaults plus what was inferred: checked
    before anything is written (a file name or a cell is never TOML of its own)."""
    try:
        doc = tomllib.loads(text)
        same = parse_config(doc, str(output)).model(name) == expected
    except (tomllib.TOMLDecodeError, ConfigError) as exc:
        same, doc = False, {"error": str(exc)}
    if not same or list(doc) != ["models"] or list(doc["models"]) != [name]:
        raise StreamlearnError(
            f"init: not writing {output}: the text would not mean exactly model {name!r} "
            f"({doc.get('error', 'other tables')}); please report this"
        )


def add_command(sub: Any) -> None:
    """Register `init` on the `streamlearn` command's subparsers."""
    p = sub.add_parser(
        "init",
        help="write a streamlearn.toml for a CSV file",
        description="Write a streamlearn.toml for FILE.csv: named inputs from the header, "
        "categorical columns, task and classes from the data, every other setting at its "
        "default with a comment.",
    )
    p.add_argument(
        "file", help="CSV with a header row: numeric columns, or text of few values (categorical)"
    )
    p.add_argument("--target", help=f"the label column (default: {TARGET!r}, else the last)")
    p.add_argument("--task", choices=["regression", "binary", "multiclass"], help="override")
    p.add_argument("--name", help="the model's name (default: from the file name)")
    p.add_argument("--output", help=f"where to write (default: ./{DEFAULT_CONFIG})")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=write)
