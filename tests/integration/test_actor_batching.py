"""The actor's adaptive batching, in process against a real Redis: a request that finds the
actor idle is computed at once, those that queued while a pass ran share the next one, and
a batch waits (up to `max_wait_ms`) only while requests keep arriving as it is read."""

from __future__ import annotations

import json
import threading
import time

import paho.mqtt.client as paho

from streamlearn.actor.inbox import Arrival, Pending
from streamlearn.actor.loop import Actor
from streamlearn.config import ActorConfig, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.store.weights import WeightsStore
from tests.integration.test_guarantees import Replies


def serving_actor(redis, settings, **policy: object) -> tuple[Actor, Replies]:
    """A linear actor serving version 1, with the actor policy given."""
    cfg = ModelConfig(
        name="b",
        inputs=2,
        task="regression",
        architecture="linear",
        actor=ActorConfig(max_batch=16, **policy),
    )
    names = Names(cfg.name, settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names)
    store.publish(codec.encode(tensors.get_arrays(networks.build_model(cfg))))
    replies = Replies()
    actor = Actor(cfg, store, names, replies)
    actor.reloader.poll(block=True)
    actor.reload()
    assert actor.version == 1
    return actor, replies


def request(actor: Actor, rid: int) -> None:
    """A request as paho's network thread hands it over."""
    msg = paho.MQTTMessage(topic=actor.names.predict_topic.encode())
    msg.payload = json.dumps({"x": [0.5, 0.5], "id": rid}).encode()
    actor.on_message(None, None, msg)


def test_a_request_that_finds_the_actor_idle_waits_for_no_other(redis, settings):
    actor, replies = serving_actor(redis, settings, max_wait_ms=2000)
    request(actor, 1)
    started = time.monotonic()
    actor.serve(actor._gather(idle_s=1.0))
    assert time.monotonic() - started < 1.0, "a lone request waited for company"
    assert replies.ids() == [1]


def test_requests_that_queued_during_a_pass_share_the_next_up_to_max_batch(redis, settings):
    actor, replies = serving_actor(redis, settings, max_wait_ms=0)
    for rid in range(20):  # as if they came while the previous pass ran
        request(actor, rid)
    sizes = []
    while len(replies.sent) < 20:
        batch = actor._gather(idle_s=1.0)
        assert batch is not None
        sizes.append(len(batch))
        actor.serve(batch)
    assert sizes == [16, 4] and actor.batches == 2
    assert replies.ids() == list(range(20))


def arriving_while_read(actor: Actor, count: int, first_id: int) -> None:
    """From now on, the reading of each of the next `count` requests brings a new one: the
    queue grows while a batch is read."""
    admit, arrivals = actor.admission.admit, iter(range(first_id, first_id + count))

    def reading(arrival: Arrival) -> Pending | None:
        rid = next(arrivals, None)
        if rid is not None:
            request(actor, rid)
        return admit(arrival)

    actor.admission.admit = reading  # type: ignore[method-assign]


def test_while_requests_keep_arriving_a_batch_waits_for_them_until_max_wait_ms(redis, settings):
    actor, replies = serving_actor(redis, settings, max_wait_ms=300)
    request(actor, 0)
    arriving_while_read(actor, 3, first_id=1)
    late = threading.Timer(0.05, request, (actor, 9))  # within max_wait_ms of the first
    late.start()
    started = time.monotonic()
    batch = actor._gather(idle_s=1.0)
    waited = time.monotonic() - started
    late.join()
    assert batch is not None
    actor.serve(batch)
    assert replies.ids() == [0, 1, 2, 3, 9] and actor.batches == 1
    assert 0.2 < waited < 1.0, f"waited {waited:.3f} s, not about max_wait_ms"


def test_without_max_wait_ms_a_growing_queue_is_taken_as_it_stands(redis, settings):
    actor, replies = serving_actor(redis, settings, max_wait_ms=0)
    request(actor, 0)
    arriving_while_read(actor, 3, first_id=1)
    late = threading.Timer(0.05, request, (actor, 9))
    late.start()
    actor.serve(actor._gather(idle_s=1.0))
    late.join()
    assert replies.ids() == [0, 1, 2, 3]
    actor.serve(actor._gather(idle_s=1.0))
    assert replies.ids()[-1] == 9 and actor.batches == 2
