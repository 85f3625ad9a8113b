"""A learner that lost its lease cannot promote its variant (`store/lua/champion_promote.lua`
checks the lease token as it writes, as the publish script does): nothing written, nothing
announced, an error in the log and `promotions_fenced_total` counted; the learner that
holds the lease now promotes. On the session's Redis, and under the deployed learner ACL."""

from __future__ import annotations

import logging

import pytest
import redis as redis_lib

from streamlearn.config import PromotionConfig
from streamlearn.contract.names import Names
from streamlearn.errors import LeaseLost
from streamlearn.learner.variants import Promoter, Promotion
from streamlearn.store.lease import Lease
from streamlearn.store.standings import current_champion
from tests.deployed import redis_as

RULE = PromotionConfig(margin=0.1, window_samples=500, min_samples=200, cooldown_s=0)


def figures(metric: float) -> dict:
    """A learner's status as the promoter reads it: its windowed MAE over 500 samples."""
    return {"window_metric": metric, "window_loss": metric, "window_samples": 500, "metric": "mae"}


def promotion_keys(redis: redis_lib.Redis, names: Names) -> list[bytes | None]:
    return [redis.get(names.champion_key), redis.get(names.promotion_key)]


@pytest.mark.parametrize("lost", ["taken", "lapsed"])
def test_a_learner_that_lost_its_lease_cannot_promote(redis, settings, caplog, lost):
    names = Names("pf", settings.topic_prefix, settings.key_prefix)
    own = names.of_variant("fast")
    first, second = Lease(redis, own, 30), Lease(redis, own, 30)
    assert first.take()
    announced: list[Promotion] = []
    base = Promoter(redis, names, "base", RULE)
    fast = Promoter(redis, names, "fast", RULE, announce=announced.append, lease=first)
    base.tick(figures(1.0))
    redis.delete(own.lease_key)  # lapsed (its learner paused past the TTL)
    if lost == "taken":
        assert second.take()  # and another learner of `fast` took over
    before = promotion_keys(redis, names)
    with caplog.at_level(logging.ERROR), pytest.raises(LeaseLost):
        fast.tick(figures(0.5))  # beats base by 50%: it would promote
    assert promotion_keys(redis, names) == before == [None, None], "nothing written"
    assert current_champion(redis, names) == "base" and not fast.is_champion
    assert announced == [], "nothing announced"
    assert fast.metrics() == {"promotions_fenced_total": 1}
    assert f"variant fast not promoted: its lease {own.lease_key} is no longer" in caplog.text

    if lost == "lapsed":
        assert second.take()
    taken_over = Promoter(redis, names, "fast", RULE, lease=second)
    promoted = taken_over.tick(figures(0.5))
    assert promoted is not None and current_champion(redis, names) == "fast"
    assert taken_over.metrics() == {"promotions_fenced_total": 0}


def test_the_learner_account_promotes_with_its_lease_and_is_fenced_without(acl_redis):
    learner = redis_as(acl_redis, "learner")
    names = Names("aclfence")
    own = names.of_variant("fast")
    lease = Lease(learner, own, 30)
    assert lease.take()
    Promoter(learner, names, "base", RULE).tick(figures(1.0))
    fast = Promoter(learner, names, "fast", RULE, lease=lease)
    assert lease.release()  # its learner stopped: the lease is gone
    with pytest.raises(LeaseLost):
        fast.tick(figures(0.5))
    assert current_champion(learner, names) == "base"
    assert lease.take()
    assert fast.tick(figures(0.5)) is not None and current_champion(learner, names) == "fast"
