"""Variants of a model: their config, the promotion rule, and the Redis side of promotion
(pointer compare-and-set, publish-only-if-champion, trim over every group) on a real Redis."""

from __future__ import annotations

import threading
import tomllib

import numpy as np
import pytest

from streamlearn.config import PromotionConfig, parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.errors import ConfigError
from streamlearn.learner.loop import Learner
from streamlearn.learner.variants import Promoter, beats
from streamlearn.online import codec
from streamlearn.online.figures import RecentFigures
from streamlearn.store.standings import current_champion, read_standings
from streamlearn.store.stream import SampleStream, group_of
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually
from tests.deployed import redis_as

TOML = """
[learner]
max_batch = 32

[models.r]
inputs = 3
task = "regression"
hidden = [8]
optimizer = "sgd"
learning_rate = 0.0001

[models.r.learner]
max_wait_ms = 1

[models.r.variants.fast]
hidden = [32]
optimizer = "adam"
learning_rate = 0.01

[models.r.variants.fast.learner]
publish.every_steps = 7

[models.r.promotion]
margin = 0.2
window_samples = 400
min_samples = 200
cooldown_s = 0
"""


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(text))
    return str(info.value)


# -- config ---------------------------------------------------------------------------------


def test_a_variant_overrides_how_it_learns_and_inherits_the_rest():
    model = parse_config(tomllib.loads(TOML)).model("r")
    assert model.variant_names == ["base", "fast"]
    assert model.variant("base") is model
    fast = model.variant("fast")
    assert (fast.hidden, fast.optimizer, fast.learning_rate) == ((32,), "adam", 0.01)
    assert (fast.inputs, fast.task, fast.name) == (3, "regression", "r")
    # The variant's learner table lies over the model's, itself over the top-level one.
    assert (fast.learner.max_batch, fast.learner.max_wait_ms) == (32, 1)
    assert fast.learner.publish.every_steps == 7 and model.learner.publish.every_steps == 50
    assert fast.variants == {} and fast.promotion == model.promotion
    assert model.promotion.on == "metric" and model.promotion.margin == 0.2
    with pytest.raises(ConfigError, match="no variant 'slow'"):
        model.variant("slow")


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("inputs = 4", "models.r.variants.v.inputs: a variant learns from the model's stream"),
        ('task = "binary"', "models.r.variants.v.task: a variant learns from the model's stream"),
        ("window = 8", "models.r.variants.v.window: a variant learns from the model's stream"),
        ("colour = 1", "models.r.variants.v.colour: not something a variant can change"),
        ("hidden = [0]", "variants.v: hidden sizes must be >= 1, got [0]"),
        ('architecture = "lstm"', "variants.v: architecture 'lstm' needs window = W"),
        ("learning_rate = 0", "models.r.variants.v.learning_rate: Input should be greater than 0"),
        ("learner = 3", "models.r.variants.v.learner: must be a table, got 3"),
        ("[models.r.variants.v.learner]\nmax_batch = 0", "v.learner.max_batch: Input should be"),
    ],
)
def test_a_bad_variant_names_the_field(table, expected):
    text = f"[models.r]\ninputs = 3\n[models.r.variants.v]\n{table}\n"
    assert expected in config_error(text)


def test_variant_names_and_promotion_fields_are_checked():
    base = "[models.r]\ninputs = 3\n"
    assert "'base' is the model itself" in config_error(base + "[models.r.variants.base]\n")
    assert "is not a variant name" in config_error(base + '[models.r.variants."a b"]\n')
    assert "models.r.variants: must be a table" in config_error(base + "variants = 1\n")
    assert "promotion.margin: Input should be less than 1, got 2" in config_error(
        base + "[models.r.promotion]\nmargin = 2\n"
    )
    assert "promotion: min_samples must be <= window_samples (5), got 10" in config_error(
        base + "[models.r.promotion]\nwindow_samples = 5\nmin_samples = 10\n"
    )
    assert "promotion.on: Input should be 'loss' or 'metric'" in config_error(
        base + '[models.r.promotion]\non = "mae"\n'
    )


# -- the rule -------------------------------------------------------------------------------


def test_the_window_is_the_mean_over_the_last_samples():
    window = RecentFigures(100)
    for i in range(10):
        window.add(30, loss=float(i), metric=2.0 * i)
    figures = window.figures()
    assert figures["window_samples"] == 120  # whole batches: 100 plus less than one batch
    assert figures["window_loss"] == pytest.approx((6 + 7 + 8 + 9) / 4)
    assert figures["window_metric"] == pytest.approx(2 * (6 + 7 + 8 + 9) / 4)
    assert RecentFigures(10).figures()["window_loss"] is None


def entry(metric: float, samples: int = 500, at: float = 1000.0, name: str = "mae") -> dict:
    return {
        "window_metric": metric,
        "window_loss": metric,
        "window_samples": samples,
        "metric": name,
        "updated_at": at,
    }


def test_a_variant_must_beat_the_champion_by_the_margin_on_enough_fresh_samples():
    rule = PromotionConfig(margin=0.1, window_samples=500, min_samples=200)
    champion = entry(1.0)
    assert beats(rule, entry(0.8), champion, now=1001)
    assert not beats(rule, entry(0.95), champion, now=1001), "within the margin"
    assert not beats(rule, entry(1.2), champion, now=1001), "worse"
    assert not beats(rule, entry(0.5, samples=100), champion, now=1001), "too few samples"
    assert not beats(rule, entry(0.5), entry(1.0, samples=100), now=1001), "champion: too few"
    assert not beats(rule, entry(0.5), champion, now=1100), "the champion's report is old"
    assert not beats(rule, entry(float("nan")), champion, now=1001)
    # Accuracy grows as a model improves.
    acc = {"metric": "binary_accuracy"}
    assert beats(rule, {**entry(0.9), **acc}, {**entry(0.8), **acc}, now=1001)
    assert not beats(rule, {**entry(0.8), **acc}, {**entry(0.9), **acc}, now=1001)


# -- Redis: the pointer, the publish, the trim -----------------------------------------------


def test_the_pointer_moves_only_from_the_champion_it_was_compared_with(redis, settings):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    rule = PromotionConfig(margin=0.1, window_samples=500, min_samples=200, cooldown_s=0)
    clock = [1000.0]
    announced = []
    promoters = {
        v: Promoter(redis, names, v, rule, announce=announced.append, clock=lambda: clock[0])
        for v in ("base", "fast", "slow")
    }
    assert current_champion(redis, names) == "base" and promoters["base"].is_champion

    promoters["base"].tick({**entry(1.0), "version": 3})
    assert promoters["slow"].tick(entry(0.95)) is None, "within the margin: not promoted"
    assert promoters["fast"].tick(entry(0.95)) is None
    assert current_champion(redis, names) == "base" and announced == []

    promoters["slow"].tick(entry(0.5))  # slow saw base as champion, reads it again, wins
    assert current_champion(redis, names) == "slow"
    assert [(p.champion, p.previous, p.on) for p in announced] == [("slow", "base", "mae")]
    assert announced[0].figures["base"]["version"] == 3

    # fast compared itself with base, but the pointer moved meanwhile: nothing happens.
    promoters["fast"].champion = "base"
    assert promoters["fast"].promote() is None
    assert current_champion(redis, names) == "slow" and len(announced) == 1
    view = promoters["fast"].view()
    assert view["champion"] == "base"  # what it last read; a tick reads again
    promoters["fast"].tick(entry(0.45))  # fresh read; within the margin of slow's 0.5
    assert promoters["fast"].view()["champion"] == "slow"
    assert set(promoters["fast"].view()["variants"]) == {"base", "fast", "slow"}
    assert promoters["fast"].view()["promotion"]["champion"] == "slow"


def test_no_promotion_within_the_cooldown(redis, settings):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    rule = PromotionConfig(margin=0.1, window_samples=500, min_samples=200, cooldown_s=60)
    clock = [1000.0]
    base, fast = (Promoter(redis, names, v, rule, clock=lambda: clock[0]) for v in ("base", "fast"))
    base.tick(entry(1.0))
    assert fast.tick(entry(0.5)) is not None
    clock[0] += 30
    fast.tick(entry(0.5))
    assert base.tick(entry(0.1)) is None, "30 s after a promotion"
    clock[0] += 31
    fast.tick(entry(0.5))
    assert base.tick(entry(0.1)) is not None
    assert current_champion(redis, names) == "base"


def blob(variant: str, version: int) -> bytes:
    return codec.encode({"w": np.full(2, version, np.float32)}, {"variant": variant})


def variant_of(found: tuple[int, bytes] | None) -> str | None:
    return None if found is None else codec.decode(found[1])[1]["variant"]


def test_only_the_champion_publishes_the_models_weights(redis, settings):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    base, fast = (WeightsStore(redis, names, v, keep=3, history=0) for v in ("base", "fast"))
    main = WeightsStore(redis, names)
    assert base.publish(blob("base", 1)) == (1, True)
    assert fast.publish(blob("fast", 2)) == (2, False)
    assert (main.latest_version(), variant_of(main.fetch())) == (1, "base")
    assert variant_of(fast.fetch()) == "fast" and fast.latest_version() == 2

    redis.set(names.champion_key, "fast")
    assert base.publish(blob("base", 2)) == (2, False), "demoted: its own keys only"
    assert main.latest_version() == 1
    assert fast.latest_version() == 2  # the highest of its own and the model's
    assert fast.publish(blob("fast", 3)) == (3, True), "numbered above both"
    assert (main.latest_version(), variant_of(main.fetch())) == (3, "fast")
    for v in range(4, 11):
        assert fast.publish(blob("fast", v))[0] == v
    kept = main.versions()
    assert kept == [8, 9, 10], "the model keeps its last 3 versions, skipped numbers or not"
    own = Names("r", settings.topic_prefix, settings.key_prefix, variant="fast")
    assert redis.llen(own.versions_key) == 3 and redis.llen(names.versions_key) == 3


def test_a_demoted_champion_never_publishes_the_models_weights_again(redis, settings):
    """Publishing as fast as it can while the pointer moves: the model's versions show one
    switch, base then fast, and keep increasing."""
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    base, fast = (WeightsStore(redis, names, v, keep=10_000) for v in ("base", "fast"))
    main = WeightsStore(redis, names)
    stop = threading.Event()

    def publish_forever(store: WeightsStore) -> None:
        while not stop.is_set():
            store.publish(blob(store.variant, 0))

    threads = [threading.Thread(target=publish_forever, args=(s,)) for s in (base, fast)]
    for t in threads:
        t.start()
    try:
        eventually(lambda: main.latest_version() >= 50, 30, "50 versions published")
        pipe = redis.pipeline(transaction=True)  # the model's latest at the very switch
        pipe.set(names.champion_key, "fast").get(names.latest_key)
        at_switch = int(pipe.execute()[1])
        eventually(lambda: main.latest_version() >= at_switch + 50, 30, "50 more after the switch")
    finally:
        stop.set()
        for t in threads:
            t.join()
    published = [(v, variant_of(main.fetch(v))) for v in range(1, main.latest_version() + 1)]
    published = [(v, who) for v, who in published if who is not None]
    who = [w for _, w in published]
    switch = who.index("fast")
    assert set(who[:switch]) == {"base"} and set(who[switch:]) == {"fast"}
    assert published[switch - 1][0] <= at_switch < published[switch][0]


def test_a_stopped_or_far_behind_variant_no_longer_holds_back_the_trim(redis, settings):
    """learner.stale_group_s and max_stream_length: the stream keeps what the base group
    needs, and a live variant's backlog up to the cap; a stopped variant's, nothing."""
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    queues = {v: SampleStream(redis, names, (3,), group=group_of(v)) for v in ("base", "fast")}
    for q in queues.values():
        q.ensure_group()
    base, fast = queues["base"], queues["fast"]
    x, y = np.zeros((1, 3), np.float32), np.zeros(1, np.float32)
    base.write([Samples(x, y)] * 300, entry_each=True)
    fast.ack([e.id for e in fast.read("f", 50, None)])  # then the variant stops
    base.ack([e.id for e in base.read("b", 300, None)])

    assert base.trim(stale_group_s=60, max_unread=1000) == {}
    assert base.length() >= 250, "a live variant 250 entries behind is waited for"
    passed = base.trim(stale_group_s=60, max_unread=200)
    assert "250 entries unread > max_stream_length=200" in passed["learners:fast"]
    assert base.length() < 100, "beyond the cap it is not"

    base.write([Samples(x, y)] * 300, entry_each=True)
    base.ack([e.id for e in base.read("b", 300, None)])
    eventually(lambda: "learners:fast" in base.trim(stale_group_s=0.2), 10, "fast found stale")
    assert "stale_group_s=0.2" in base.trim(stale_group_s=0.2)["learners:fast"]
    assert base.length() < 100, "a stopped variant holds back nothing"
    fast.read("f", 1, None)  # the variant is back: waited for again
    assert base.trim(stale_group_s=60) == {}


# -- learners --------------------------------------------------------------------------------


def test_a_variant_that_starts_first_trims_nothing_the_base_has_not_learned(redis, settings):
    """The variant's learner makes its group, learns, acknowledges and trims before the
    base's learner has made the base group: the base still learns every sample."""
    model = parse_config(tomllib.loads(TOML)).model("r")
    names = Names("r", settings.topic_prefix, settings.key_prefix)

    def learner(variant: str) -> Learner:
        stream = SampleStream(redis, names, model.sample_shape, group=group_of(variant))
        return Learner(
            model.variant(variant), stream, WeightsStore(redis, names, variant), variant=variant
        )

    fast = learner("fast")
    fast.start()
    x = np.ones((1000, 3), np.float32)
    fast.queue.write([Samples(x[i : i + 10], x[i : i + 10, 0]) for i in range(0, 1000, 10)])
    fast.run(burst=True)
    fast.report()
    assert fast.state.samples_seen == 1000
    policy = model.variant("fast").learner
    eventually(lambda: not redis.xpending(fast.queue.key, group_of("fast"))["pending"], 10, "acked")
    fast.queue.trim(policy.stale_group_s, policy.max_stream_length)  # as its next tick does

    base = learner("base")
    base.start()  # the base group, from the start of the stream
    base.run(burst=True)
    assert base.state.samples_seen == 1000, "every sample the variant learned, the base too"


def test_a_better_learner_takes_over_and_publishes_the_models_weights(redis, settings):
    """Two learners of one model in one process, on the same stream (no MQTT)."""
    model = parse_config(tomllib.loads(TOML)).model("r")
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    learners = {
        v: Learner(
            model.variant(v),
            SampleStream(redis, names, model.sample_shape, group=group_of(v)),
            WeightsStore(redis, names, v),
            variant=v,
            promoter=Promoter(redis, names, v, model.promotion),
            clock=lambda: 0.0,  # no status tick or timed publish: the test calls them
        )
        for v in model.variant_names
    }
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1500, 3)).astype(np.float32)
    y = (2 * x[:, 0] - x[:, 1] + 0.5 * x[:, 2]).astype(np.float32)
    queue = learners["base"].queue
    queue.write([Samples(x[i : i + 10], y[i : i + 10]) for i in range(0, 1500, 10)])
    for learner in learners.values():
        learner.start()  # each creates its group, at the start of the stream
    for learner in learners.values():
        learner.run(burst=True)
    main = WeightsStore(redis, names)
    before = main.latest_version()
    assert variant_of(main.fetch()) == "base"
    learners["base"].report()
    learners["fast"].report()
    fast = learners["fast"]
    assert fast.promoter.is_champion and learners["base"].promoter.champion == "base"
    assert main.latest_version() > before and variant_of(main.fetch()) == "fast"
    figures = fast.promoter.view()["variants"]
    assert figures["fast"]["window_metric"] < 0.8 * figures["base"]["window_metric"]
    assert figures["fast"]["window_samples"] >= 400
    learners["base"].report()  # it reads the pointer: demoted, it stays quiet
    assert not learners["base"].promoter.is_champion


# -- under the deploy ACLs -------------------------------------------------------------------


def test_variant_learners_work_under_the_learner_acl(acl_redis):
    """deploy/redis: a variant's learner publishes, reports, promotes and trims with the
    learner user's rights; the actor user reads the weights and their variant."""
    learner, actor = redis_as(acl_redis, "learner"), redis_as(acl_redis, "actor")
    names = Names("acl")
    rule = PromotionConfig(margin=0.1, window_samples=500, min_samples=200, cooldown_s=0)
    base, fast = (Promoter(learner, names, v, rule) for v in ("base", "fast"))
    base.tick(entry(1.0))
    assert fast.tick(entry(0.5)) is not None and current_champion(learner, names) == "fast"
    WeightsStore(learner, names, "base").publish(blob("base", 1))
    WeightsStore(learner, names, "fast").publish(blob("fast", 2))
    assert variant_of(WeightsStore(actor, names).fetch()) == "fast"
    queue = SampleStream(learner, names, (3,), group=group_of("fast"))
    queue.ensure_group()
    queue.trim()
    status_rows = read_standings(learner, names)
    assert status_rows["champion"] == "fast" and set(status_rows["variants"]) == {"base", "fast"}


def test_doctests():
    import doctest

    import streamlearn.config.app
    import streamlearn.learner.variants

    for module in (streamlearn.learner.variants, streamlearn.config.app):
        failed, attempted = doctest.testmod(module)
        assert attempted > 0 and failed == 0, module.__name__
