"""What a model's samples look like on the wire: named fields, the devices' own topics, labels
that come later.

`inputs = ["temperature", "vibration"]` names the fields of x, in order (`inputs = 4` stays
the positional form); `ModelConfig` keeps the width in `inputs` and the names in `fields`.
A sample is then a flat JSON object of those fields (dotted names reach into nested
objects: `"ENERGY.Power"`) and the label field `target`. `categorical` fields carry strings,
one-hot encoded inside the model. `[[models.NAME.sources]]` are MQTT filters of the devices'
own topics that ingest subscribes to; `[models.NAME.labels]` bounds the predictions kept for
a label that comes later (`streamlearn.store.pending`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from streamlearn.config.policies import Frozen
from streamlearn.errors import PayloadError

MAX_FIELDS = 1024  # named inputs of one model, at most
MAX_CATEGORY_CHARS = 256  # a categorical value longer than this is a dead letter
MAX_CATEGORIES = 1024  # values of one categorical field
MAX_DEPTH = 8  # levels of a dotted name

# A field's name: dotted segments of printable characters, single spaces inside a segment
# (Sparkplug metrics, `Line 1/Motor Speed`) but no other whitespace.
_SEGMENT = r"[^.\s\x00-\x1f\x7f]+( [^.\s\x00-\x1f\x7f]+)*"
FieldName = Annotated[
    str,
    Field(min_length=1, max_length=256, pattern=rf"^{_SEGMENT}(\.{_SEGMENT})*$"),
]
Category = Annotated[str, Field(min_length=1, max_length=MAX_CATEGORY_CHARS)]
KEY_PATTERN = r"^topic:(\d{1,2})$"
SPARKPLUG = "spBv1.0"  # the Sparkplug B namespace, a sparkplug source's first level
# A payload's own fields, which no input or target may be named
OWN_FIELDS = frozenset(("x", "id", "ids", "key", "seq", "reply_to", "samples"))


def check_fields(names: list[str], target: str, categorical: dict[str, tuple[str, ...]]) -> None:
    """Named inputs are distinct, not the target, at most `MAX_DEPTH` levels deep; every
    categorical field is an input, its values distinct.

    >>> check_fields(["a", "b.c"], "y", {"a": ("x", "z")})
    >>> check_fields(["a", "a"], "y", {})
    Traceback (most recent call last):
    ...
    ValueError: inputs: 'a' is named twice
    """
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"inputs: {name!r} is named twice")
        seen.add(name)
        if name.count(".") >= MAX_DEPTH:
            raise ValueError(f"inputs: {name!r} is nested more than {MAX_DEPTH} levels deep")
    if target in seen:
        raise ValueError(f"target: {target!r} is also an input")
    clash = OWN_FIELDS & {*names, target}
    if clash:
        raise ValueError(f"inputs: {sorted(clash)} name(s) the payload's own fields")
    for name, values in categorical.items():
        if name not in seen:
            raise ValueError(f"categorical.{name}: not one of the inputs {names}")
        if not 1 <= len(values) <= MAX_CATEGORIES:
            raise ValueError(f"categorical.{name}: 1 to {MAX_CATEGORIES} values, got {len(values)}")
        if len(set(values)) != len(values):
            raise ValueError(f"categorical.{name}: a value is listed twice, got {list(values)}")


def check_named(
    target: str,
    seq_field: str,
    window: int | None,
    sources: Sequence[SourceConfig],
    names: list[str] | None,
) -> None:
    """A window's order field and the sources' plain fields fit the model's inputs (`names`;
    None: positional, which takes neither)."""
    if names is None:
        if any(source.field is not None for source in sources):
            raise ValueError("sources.field: only for named inputs (inputs = [names])")
        return
    if seq_field in {*names, target}:
        raise ValueError(f"seq_field: {seq_field!r} is also an input or the target")
    if seq_field != "seq" and window is None:
        raise ValueError("seq_field: only for a model with a window (it orders steps)")
    for source in sources:
        named = source.field
        literal = named is not None and not named.startswith("topic:")
        if literal and named not in {*names, target}:
            raise ValueError(f"sources.field: {named!r} is not one of the inputs or the target")


class SourceConfig(Frozen):
    """`[[models.NAME.sources]]`: a topic filter the devices publish samples on.

    Ingest subscribes to it through a shared subscription of the model's own (each model
    reading a filter gets every message), and judges its messages exactly like the model's
    samples topic. `key = "topic:N"` takes a device key from level N of the
    message's topic (0 is the first): the window a keyed model's observation extends. Under
    a per-device topic ACL that level is the sender's identity, so a step may not name
    another key unless `key_from_payload` (a gateway publishing for many devices).
    `format = "sparkplug_b"` reads Sparkplug B edge nodes instead (`streamlearn.ingest.sparkplug`).
    """

    topic: str = Field(
        min_length=1, max_length=512, examples=["tele/+/SENSOR"], description="an MQTT topic filter"
    )
    key: str | None = Field(None, pattern=KEY_PATTERN, description='"topic:N": level N as key')
    key_from_payload: bool = Field(
        False,
        description='with `key`: a step\'s own "key" field names its window (the topic level '
        "only when it has none); off, the topic level is the key and a step naming another "
        "is a dead letter (wrong_key)",
    )
    field: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description='plain values, one field per topic: "topic:N" (the input\'s name is level '
        "N of the topic, as Home Assistant's statestream names its entity) or an input's "
        "name; the body is a bare value (`21.4`, `on`, `unavailable`), read as `{name: "
        "value}`",
    )
    format: Literal["json", "sparkplug_b"] = Field(
        "json",
        description='"sparkplug_b": Sparkplug B edge nodes (Tahu protobuf) under `spBv1.0/`; '
        "metrics are readings of the device key `{group}/{node}[/{device}]`, by name (needs "
        "[models.NAME.assembly]; no key or field)",
    )

    @field_validator("topic")
    @classmethod
    def _filter(cls, topic: str) -> str:
        """A valid MQTT filter, not a shared or `$` system one.

        >>> SourceConfig(topic="tele/+/SENSOR").topic
        'tele/+/SENSOR'
        >>> SourceConfig(topic="a/#/b")
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for SourceConfig
        topic
          Value error, '#' must be the last level of a filter ...
        """
        if topic.startswith("$"):
            raise ValueError("a source is a device topic, not a $share or $SYS one")
        levels = topic.split("/")
        for i, level in enumerate(levels):
            if "#" in level and (level != "#" or i != len(levels) - 1):
                raise ValueError("'#' must be the last level of a filter")
            if "+" in level and level != "+":
                raise ValueError("'+' must be a whole level")
        if re.search(r"[\x00-\x1f\x7f]", topic):
            raise ValueError("a control character in the topic")
        return topic

    def matches(self, topic: str) -> bool:
        """Whether `topic` is one of this filter's (`+` one level, `#` the rest, its parent
        too); paho's `topic_matches_sub` builds a matcher each call, 20 times slower.

        >>> s = SourceConfig(topic="spBv1.0/+/#")
        >>> s.matches("spBv1.0/g/DDATA/n/d"), s.matches("spBv1.0/g"), s.matches("spBv1.0")
        (True, True, False)
        """
        levels, wanted = topic.split("/"), self.topic.split("/")
        for i, want in enumerate(wanted):
            if want == "#":
                return True
            if i >= len(levels) or (want != "+" and want != levels[i]):
                return False
        return len(levels) == len(wanted)

    @property
    def key_level(self) -> int | None:
        match = re.match(KEY_PATTERN, self.key or "")
        return int(match.group(1)) if match else None

    @field_validator("field")
    @classmethod
    def _field(cls, field: str | None) -> str | None:
        """`"topic:N"`, or a field's name."""
        if field is not None and field.startswith("topic:") and not re.match(KEY_PATTERN, field):
            raise ValueError(f'"topic:N" with N a topic level (0 to 99), got {field!r}')
        if field is not None and re.search(r"[\s\x00-\x1f\x7f]", field):
            raise ValueError(f"a field's name has no whitespace, got {field!r}")
        return field

    def field_of(self, topic: str) -> str | None:
        """The field a plain value on `topic` is (None: the body is an object).

        >>> SourceConfig(topic="homeassistant/sensor/+/state", field="topic:2").field_of(
        ...     "homeassistant/sensor/kitchen_temp/state")
        'kitchen_temp'
        """
        return self.levels_of(topic)[1]

    def levels_of(self, topic: str) -> tuple[str | None, str | None]:
        """A message's device key and field, read from its topic's levels where this
        source says (None: not from the topic); PayloadError naming the level a topic lacks.

        >>> SourceConfig(topic="z/+/+", key="topic:1", field="topic:2").levels_of("z/d1/temp")
        ('d1', 'temp')
        """
        levels = topic.split("/")
        read: list[str | None] = []
        for what, spec in (("key", self.key), ("field", self.field)):
            match = re.match(KEY_PATTERN, spec or "")
            if match is None:
                read.append(spec if what == "field" else None)
                continue
            level = int(match.group(1))
            if level >= len(levels) or not levels[level]:
                raise PayloadError(
                    f"topic {topic!r} has no level {level} to take the {what} from "
                    f'(source {self.topic!r}, {what} = "{spec}")',
                    "other",
                )
            read.append(levels[level])
        return read[0], read[1]

    @model_validator(mode="after")
    def _payload_key(self) -> SourceConfig:
        """`key_from_payload` says which of two keys wins: without `key` it means nothing.

        >>> SourceConfig(topic="a/+", key_from_payload=True)
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for SourceConfig
          Value error, key_from_payload: only with key = "topic:N" ...
        """
        if self.key_from_payload and self.key is None:
            raise ValueError('key_from_payload: only with key = "topic:N" (a topic level)')
        return self

    @model_validator(mode="after")
    def _sparkplug(self) -> SourceConfig:
        """A Sparkplug source reads `spBv1.0/` topics, its key and fields theirs.

        >>> SourceConfig(topic="spBv1.0/Plant 1/#", format="sparkplug_b").format
        'sparkplug_b'
        >>> SourceConfig(topic="tele/#", format="sparkplug_b")
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for SourceConfig
          Value error, format "sparkplug_b": a filter under spBv1.0/, got 'tele/#' ...
        """
        if self.format != "sparkplug_b":
            return self
        if not self.topic.startswith(f"{SPARKPLUG}/"):
            raise ValueError(
                f'format "sparkplug_b": a filter under {SPARKPLUG}/, got {self.topic!r}'
            )
        if self.key is not None or self.field is not None:
            raise ValueError(
                'format "sparkplug_b": no key or field (the key is {group}/{node}[/{device}], '
                "a metric's name its field)"
            )
        return self


# A window key as a step names it (`streamlearn.contract.named`): 1 to 128 characters, no
# whitespace or control characters; "*" in a gateway's list grants every key.
WindowKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\s\x00-\x1f\x7f]+$")]
# `[models.NAME.gateways]`: a client id -> the window keys it may name besides its own
Gateways = dict[
    Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^/+#\x00-\x1f\x7f]+$")],
    tuple[WindowKey, ...],
]


class LabelsConfig(Frozen):
    """`[models.NAME.labels]`: predictions kept for their labels (`streamlearn.store.pending`).

    A prediction request with an `id` keeps its features, the version that served it and its
    prediction for `ttl_s`; a label `{"id", "y"}` on `{prefix}/{model}/labels` joins it into
    a sample. At most `max_pending` are kept, of at most `max_pending_bytes` of Redis memory
    together (each counted as `streamlearn.store.pending` says, ~380 B with 4 inputs and
    12-character ids): beyond either, the soonest to expire go first. The default byte
    bound fits the deployed 2 GB Redis beside the streams and weights. One client keeps at
    most its `sender_share` of them, so that no device's flood evicts another's.
    """

    ttl_s: int = Field(3600, ge=1, le=30 * 86_400, description="how long a prediction waits")
    max_pending: int = Field(1_000_000, ge=1, le=100_000_000, description="predictions kept")
    max_pending_bytes: int = Field(
        256 * 2**20,
        ge=2**16,
        le=2**40,
        description="Redis memory the kept predictions may take together, in bytes",
    )
    sender_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="the part of max_pending and of max_pending_bytes one client "
        "(predict/{client}, or an HTTP caller: its token's or its address's) may keep: past "
        "either, its own soonest to expire go, never another's. Bare predict (no device "
        "reaches it under the deploy ACL) shares the whole pool",
    )
