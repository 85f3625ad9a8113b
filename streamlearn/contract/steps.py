"""A keyed step's key and order: whose window it extends, and where in it.

A window model's step (a keyed observation, `streamlearn.contract.payloads`; a named
object, `streamlearn.contract.named`) names its device key, bound to its sender where the
topic names one (`StepKey`), and its order: a `seq` number, or a device's ISO 8601 time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamlearn.errors import PayloadError


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class StepKey:
    """Whose window a keyed step extends, or a key-only request reads. `topic`: the key
    the message's topic level names (None: none), the sender's own under a per-device
    topic ACL (a source's level, or `{client}` of `samples/{client}` and
    `predict/{client}`). A step's or request's own `"key"` may name another only with
    `from_payload`, or one of `granted` (a gateway's keys, `[models.NAME.gateways]`; "*":
    any): else a step naming another device's key would train in that device's window, a
    request read its history."""

    topic: str | None = None
    from_payload: bool = False
    granted: frozenset[str] = frozenset()

    def of(self, given: Any) -> str:
        """The step's key, given its own `"key"` field (None when it has none).

        >>> StepKey("dev-1").of(None), StepKey("dev-1", from_payload=True).of("dev-2")
        ('dev-1', 'dev-2')
        >>> StepKey("gw", granted=frozenset({"dev-2"})).of("dev-2")
        'dev-2'
        >>> StepKey("dev-1").of("dev-2")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        streamlearn.errors.PayloadError: key: 'dev-2' is not the sender's own, 'dev-1' ...
        """
        if self.topic is None or given is None or self.from_payload or "*" in self.granted:
            return _key(self.topic if given is None else given)
        if given != self.topic and given not in self.granted:
            raise PayloadError(
                f"key: {_shown(given)} is not the sender's own, {self.topic!r} (a window's "
                "key is its sender's topic level; a source's key_from_payload = true, or a "
                "client's [models.NAME.gateways] entry, lets a payload name others)",
                "wrong_key",
            )
        return _key(given)


def _key(value: Any) -> str:
    if value is None:
        raise PayloadError(
            "key: a window model's step needs a key (a field or a source's topic level)",
            "missing_field",
        )
    if (
        type(value) is not str
        or not 1 <= len(value) <= 128
        or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value)
    ):
        raise PayloadError(
            f"key: 1 to 128 characters, no whitespace, got {_shown(value)}", "bad_string"
        )
    return value


def seq_of(value: Any, at: float | None) -> float:
    """A step's order: a number, or an ISO 8601 time as unix seconds (UTC unless it
    names its offset), as devices stamp their readings.

    >>> seq_of(7, None), seq_of("2026-11-25T04:00:00", None), seq_of("1970-01-01T01:00:00+01:00", 0)
    (7.0, 1795579200.0, 0.0)
    """
    if value is None:
        if at is None:
            raise PayloadError("seq: a keyed request or step needs a seq", "missing_field")
        return at
    if (type(value) is int or type(value) is float) and abs(value) <= 2**53:
        return float(value)
    if type(value) is str and 10 <= len(value) <= 40:
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            stamp = stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)
            return stamp.timestamp()
    raise PayloadError(
        f"seq: a number up to 2**53 or an ISO 8601 time, got {_shown(value)}", "wrong_type"
    )
