"""The variants' standings as the learners report them: the champion pointer, each
variant's reported figures and the last promotion (`Names.champion_key`,
`variants_key`, `promotion_key`), read for the status, the dashboard and the monitor;
the learners' `Promoter` (`streamlearn.learner.variants`) writes them."""

from __future__ import annotations

import json
from typing import Any, cast

import redis

from streamlearn.config.app import BASE_VARIANT
from streamlearn.contract.names import Names


def read_standings(client: redis.Redis, names: Names) -> dict[str, Any]:
    """`Promoter.view` as the learners last reported it, read from Redis (so it shows even
    when the champion's learner is down); {} for a model without variants."""
    pipe = client.pipeline(transaction=False)
    pipe.get(names.champion_key)
    pipe.hgetall(names.variants_key)
    pipe.get(names.promotion_key)
    champion, rows, promotion = pipe.execute()
    if not rows:
        return {}
    name = champion.decode() if champion else BASE_VARIANT
    return standings(name, decode_rows(rows), decode(promotion))


def standings(
    champion: str, figures: dict[str, dict[str, Any]], promotion: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "champion": champion,
        "variants": {
            name: {k: v for k, v in doc.items() if k != "variant"}
            for name, doc in sorted(figures.items())
        },
        "promotion": promotion,
    }


def current_champion(client: redis.Redis, names: Names) -> str:
    value = cast(bytes | None, client.get(names.champion_key))
    return value.decode() if value else BASE_VARIANT


def decode(raw: bytes | None) -> dict[str, Any] | None:
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def decode_rows(rows: dict[bytes, bytes]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, raw in rows.items():
        doc = decode(raw)
        if doc is not None:
            out[name.decode()] = doc
    return out
