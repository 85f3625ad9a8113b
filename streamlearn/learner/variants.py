"""Variants and promotion: variants of one model that learn from the same stream.

Each variant (`[models.NAME.variants.VNAME]`, plus `base`, the model's own config) has its
own learner, reading the stream in its own consumer group (`stream.group_of`). Every
learner keeps the mean of its test-then-train loss and metric over its last
`window_samples` samples (`streamlearn.online.figures.RecentFigures`) and reports them,
at each status tick, in the hash `sl:{model}:variants`.

The champion pointer `sl:{model}:champion` (absent: `base`) names the variant the actors
serve: only the champion's learner also publishes to the model's weights keys
(`weights.WeightsStore` with its `variant`, checked in the same atomic step as the
publish). A variant whose window figure beats the champion's by the configured margin,
both windows holding `min_samples` and the champion's report fresh, swaps the pointer
with a compare-and-set (`Promoter.tick`); the promotion is stored in
`sl:{model}:promotion`, logged, and announced. The promoted learner then publishes its
weights at once, and actors switch to it. The script that promotes checks the learner's
lease as the publish script does (`store/lua/champion_promote.lua`): a learner that lost
its lease cannot promote.

Words, one each: a *variant* is one config that learns (the model's own is `base`); the
*champion* is the variant the actors serve (the contract's key and status field); a
*promotion* makes another variant the champion, and the `Promoter` is a learner's part in it.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis
from redis.typing import EncodableT

from streamlearn.config.app import BASE_VARIANT
from streamlearn.config.policies import PromotionConfig
from streamlearn.contract.names import Names
from streamlearn.errors import LeaseLost
from streamlearn.store import lua
from streamlearn.store.lease import Lease
from streamlearn.store.standings import current_champion, decode, decode_rows, standings

log = logging.getLogger(__name__)

FRESH_S = 10.0  # a champion whose learner reported longer ago than this is not compared
_HIGHER_IS_BETTER = ("accuracy", "auc", "precision", "recall")


def higher_is_better(metric: str | None) -> bool:
    """Accuracy-like metrics grow as a model improves; errors (MAE) and losses shrink.

    >>> higher_is_better("binary_accuracy"), higher_is_better("mae")
    (True, False)
    """
    return metric is not None and any(word in metric for word in _HIGHER_IS_BETTER)


@dataclass(frozen=True)
class Promotion:
    """What a promotion announces: who, instead of whom, when, and on which figures."""

    champion: str
    previous: str
    at: float  # unix seconds
    on: str  # "loss" or the metric's name
    figures: dict[str, dict[str, Any]]  # variant -> its reported figures at the time

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def better_by(mine: float, theirs: float, higher: bool) -> float:
    """How much better `mine` is than `theirs`, relative to `theirs` (negative: worse).

    >>> better_by(0.9, 1.0, higher=False), better_by(0.5, 0.4, higher=True)
    (0.1, 0.25)
    """
    gain = mine - theirs if higher else theirs - mine
    return round(gain / abs(theirs), 12) if theirs else (math.inf if gain > 0 else 0.0)


def beats(rule: PromotionConfig, mine: dict, champion: dict, now: float) -> bool:
    """Whether a variant's reported figures beat the champion's under `rule`."""
    key = f"window_{rule.on}"
    if champion.get("metric") != mine.get("metric") and rule.on == "metric":
        return False  # not the same figure: nothing to compare
    if now - float(champion.get("updated_at") or 0) > FRESH_S:
        return False  # the champion's learner is not reporting: its figures are old
    if min(mine.get("window_samples") or 0, champion.get("window_samples") or 0) < rule.min_samples:
        return False
    a, b = mine.get(key), champion.get(key)
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return False
    higher = rule.on == "metric" and higher_is_better(mine.get("metric"))
    return better_by(a, b, higher) > rule.margin


class Promoter:
    """One variant's place among its model's variants.

    `tick` reports the variant's figures, reads the others' and the champion pointer in
    the same round trip, and promotes this variant when its figures beat the champion's.
    `lease` is its learner's (None: not fenced): the promotion script writes nothing unless
    the lease still holds its token, as the publish script does.
    """

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        variant: str,
        rule: PromotionConfig,
        *,
        announce: Callable[[Promotion], None] | None = None,
        clock: Callable[[], float] = time.time,
        lease: Lease | None = None,
    ) -> None:
        self.redis = client
        self.names = names
        self.variant = variant
        self.rule = rule
        self.announce = announce
        self.clock = clock
        self.champion = current_champion(client, names)
        self.figures: dict[str, dict[str, Any]] = {}
        self.last_promotion: dict[str, Any] | None = None
        self.lease = lease
        self.fenced = 0  # promotions refused: the lease no longer this learner's
        self._promote = lua.load(client, "champion_promote")

    @property
    def is_champion(self) -> bool:
        return self.champion == self.variant

    def tick(self, status: dict[str, Any]) -> Promotion | None:
        """Report `status` (the learner's, with its window figures); maybe take over."""
        now = self.clock()
        entry = {k: status.get(k) for k in _REPORTED}
        entry.update(variant=self.variant, updated_at=now)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.names.variants_key, self.variant, json.dumps(entry))
        pipe.get(self.names.champion_key)
        pipe.hgetall(self.names.variants_key)
        pipe.get(self.names.promotion_key)
        _, champion, rows, last = pipe.execute()
        self.champion = champion.decode() if champion else BASE_VARIANT
        self.figures = decode_rows(rows)
        self.last_promotion = decode(last)
        theirs = self.figures.get(self.champion)
        if self.is_champion or theirs is None or not beats(self.rule, entry, theirs, now):
            return None
        return self.promote(now)

    def promote(self, now: float | None = None) -> Promotion | None:
        """Make this variant the champion if the pointer still names the one it beat.

        Raises `LeaseLost` when the lease is no longer this learner's: nothing written."""
        now = self.clock() if now is None else now
        previous = self.champion
        on = "loss" if self.rule.on == "loss" else str(self.figures[self.variant].get("metric"))
        promotion = Promotion(self.variant, previous, now, on, dict(self.figures))
        lease = self.lease
        token = "" if lease is None else lease.token
        lease_key = self.names.of_variant(self.variant).lease_key if lease is None else lease.key
        keys = [self.names.champion_key, self.names.promotion_key, lease_key]
        args: list[EncodableT] = [previous, self.variant, promotion.to_json(), BASE_VARIANT]
        args += [now, self.rule.cooldown_s, token]
        moved = int(self._promote(keys=keys, args=args))
        if moved < 0:  # with a token only: the lease is another learner's, or it lapsed
            self.fenced += 1
            log.error(
                "model %s: variant %s not promoted: its lease %s is no longer %s's",
                self.names.model,
                self.variant,
                lease_key,
                token,
            )
            raise LeaseLost(f"promotion refused: lease {lease_key} is not {token}'s")
        if not moved:
            return None
        self.champion, self.last_promotion = self.variant, json.loads(promotion.to_json())
        key = f"window_{self.rule.on}"
        log.info(
            "model %s: variant %s promoted to champion over %s (windowed %s: %s vs %s)",
            self.names.model,
            self.variant,
            previous,
            on,
            _fmt(self.figures[self.variant].get(key)),
            _fmt(self.figures.get(previous, {}).get(key)),
        )
        if self.announce is not None:
            self.announce(promotion)
        return promotion

    def metrics(self) -> dict[str, int]:
        return {"promotions_fenced_total": self.fenced}

    def view(self) -> dict[str, Any]:
        """For the model's status: the champion and every variant's figures side by side."""
        return standings(self.champion, self.figures, self.last_promotion)


_REPORTED = (
    "version",
    "step",
    "samples_seen",
    "online_loss",
    "online_metric",
    "metric",
    "window_samples",
    "window_loss",
    "window_metric",
)


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "-"
