"""Plain values: one field per topic, its body the bare value.

Home Assistant's statestream publishes `homeassistant/sensor/kitchen_temp/state` with the
body `21.4`, or `on`, `off`, `unavailable` (not JSON); Zigbee2MQTT's attribute output
mode publishes one attribute per topic. A source with `field` (`"topic:N"` or a name,
`streamlearn.config.inputs.SourceConfig`) reads such a body as the one-field object
`{name: value}`, judged as any named sample (`streamlearn.contract.named`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from streamlearn.errors import PayloadError

MISSING = frozenset(("unavailable", "unknown", "none", "null", ""))  # Home Assistant's words
TRUE, FALSE = (
    frozenset(("on", "true", "open", "detected")),
    frozenset(("off", "false", "closed", "clear")),
)
MAX_TEXT = 256  # a bare body longer than this is not a device's value


def plain_object(raw: bytes, name: str, limit: int, categorical: bool = False) -> dict[str, Any]:
    """The body as `{name: value}`: a JSON number, boolean, string or null, or bare text.

    Bare or quoted, `unavailable` and `unknown` are missing (None); for a numeric input
    `on`/`off` (and `true`/`false`, `open`/`closed`) are 1 and 0 and numeric text is its
    number; for a categorical input text stays a string. A JSON object is taken whole.

    >>> plain_object(b"21.4", "t", 100), plain_object(b"on", "door", 100)
    ({'t': 21.4}, {'door': True})
    >>> plain_object(b"unavailable", "t", 100), plain_object(b'"idle"', "mode", 100, True)
    ({'t': None}, {'mode': 'idle'})
    """
    if len(raw) > limit:
        raise PayloadError(
            f"payload of {len(raw)} bytes exceeds max_payload_bytes={limit}", "oversize"
        )
    try:
        value: Any = json.loads(raw)
    except (ValueError, RecursionError):
        try:
            value = raw.decode().strip()
        except UnicodeDecodeError:
            raise PayloadError("a plain value: UTF-8 text expected", "invalid_json") from None
    if type(value) is dict:
        return value
    if type(value) is float and not math.isfinite(value):
        raise PayloadError(f"{name}: value {value!r} out of float32 range", "non_finite")
    if type(value) is str:
        if len(value) > MAX_TEXT:
            raise PayloadError(
                f"{name}: a plain value of {len(value)} characters, at most {MAX_TEXT}",
                "bad_string",
            )
        word = value.strip().lower()
        if word in MISSING:
            value = None
        elif not categorical:
            value = True if word in TRUE else False if word in FALSE else _number(value)
    elif type(value) is list:
        raise PayloadError(f"{name}: a plain value expected, got an array", "wrong_type")
    return {name: value}


def _number(text: str) -> Any:
    """Numeric text as its number (`"21.4"` quoted); anything else stays text."""
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text
