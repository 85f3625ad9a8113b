"""`streamlearn actor`: prediction requests over MQTT (and, with `actor.http_port`, the Open
Inference Protocol over HTTP; with `actor.grpc_port`, over gRPC), answered with the latest
weights."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from streamlearn.config import cpus

# numpy's BLAS sizes its threads once, as numpy loads (below): to the usable CPUs, not the
# host's cores (docs/scaling.md#cpu-limits-and-threads)
os.environ.update(cpus.blas_environment())

from paho.mqtt.properties import Properties

from streamlearn import mqtt, runtime
from streamlearn.actor import shutdown
from streamlearn.actor.http import HttpDoor
from streamlearn.actor.loop import Actor
from streamlearn.actor.states import States, states_group
from streamlearn.observe import metrics
from streamlearn.observe.broker_delay import BrokerProbe
from streamlearn.store.state_index import StateIndex
from streamlearn.store.weights import WeightsStore

log = logging.getLogger("streamlearn.actor")


def main(argv: list[str] | None = None, actor_class: type[Actor] = Actor) -> int:
    """Run one actor; `actor_class` lets the benchmark serve its baselines the same way."""
    args = runtime.parse_args("actor", argv)
    model, settings, names, client_id = runtime.load("actor", args)
    client_id = f"{client_id}-{os.getpid()}"  # actors keep no session: ids only need be unique
    store = WeightsStore(runtime.redis_client(settings), names)
    client: mqtt.BufferedClient | None = None

    def publish(
        topic: str, payload: bytes, qos: int, retain: bool, properties: Properties | None
    ) -> object:
        assert client is not None
        return client.publish(topic, payload, qos, retain, properties)

    def publish_many(packets: Sequence[bytes]) -> bool:
        assert client is not None
        return client.publish_many(packets)

    actor = actor_class(model, store, names, publish, client_id, publish_many=publish_many)
    stop = runtime.stop_on_signals()
    # Requests on `predict` and on `predict/{client}` (the ACL lets a device publish only on
    # its own client id's), both shared by the actors (`streamlearn.actor.replies`).
    shares = [names.shared(leaf, settings.share_group) for leaf in ("predict", "predict/+")]
    subscriptions = [(topic, 0) for topic in shares]
    probe = None
    if model.actor.broker_probe_every_s > 0:  # its pings come on the actor's own connection
        every_s = model.actor.broker_probe_every_s
        probe = BrokerProbe(settings.mqtt, names, client_id, every_s, ca_file=settings.mqtt_ca_file)
        subscriptions.append((probe.ping_topic, 0))
    on_message = actor.on_message
    if model.state is not None:  # devices' readings, predicted into retained states
        index = StateIndex(store.redis, names, model.state.max_devices)
        actor.states = states = States(model, names, publish, index)
        group = states_group(settings.share_group, model.name)
        readings = [f"$share/{group}/{topic}" for topic in states.subscriptions]
        subscriptions += [(topic, 0) for topic in readings]
        shares += readings  # what a stopping actor leaves to the others (`shutdown`)
        subscriptions.append((states.retained_filter, 0))  # an earlier life's, bounded
        on_message = states.handler(actor.on_message)
    # QoS 0 from the broker: paho acknowledges a QoS 1 message on receipt, not when it is
    # answered, and an actor's clean session loses its in-flight messages when it dies; so
    # QoS 1 would buy no delivery guarantee, only a PUBACK per request (~15% of the CPU).
    client = mqtt.connect(
        settings.mqtt,
        client_id,
        ca_file=settings.mqtt_ca_file,
        subscriptions=subscriptions,
        on_message=on_message,
        on_connack=actor.on_connack,
        will=(actor.status_topic, b""),  # a dead actor's retained status disappears
        no_delay=True,
    )
    if probe is not None:
        client.message_callback_add(probe.ping_topic, probe.echo)  # not a request
        actor.broker_delay_ms = probe.latest
    health = runtime.connected_health("actor", client, None)
    health.add(  # ready: answers with weights (a built-in model's initial ones at first)
        "weights",
        lambda: None if actor.answers else "no weights loaded yet",
    )
    log.info("forward pass by %s: %s", actor.runtime, actor.runtime_reason)
    log.info("%d usable CPUs (%s); pools %s", actor.cpus.usable, actor.cpus.source, actor.threads)
    actor.heartbeat = health.beat
    door = None
    if model.actor.http_port is not None:  # the Open Inference Protocol, beside MQTT
        door = HttpDoor(actor, model.actor.http_host, model.actor.http_port, settings.bearer_token)
        http_port = door.start()
        log.info("Open Inference Protocol on http://%s:%d/v2", door.host, http_port)
    grpc_door = None
    if model.actor.grpc_port is not None:  # the protocol's gRPC service, beside them
        from streamlearn.actor.grpc_door import GrpcDoor  # grpcio: loaded where it serves

        grpc_door = GrpcDoor(
            actor, model.actor.grpc_host, model.actor.grpc_port, settings.bearer_token
        )
        grpc_port = grpc_door.start()
        log.info("Open Inference Protocol over gRPC on %s:%d", grpc_door.host, grpc_port)

    def snapshot() -> metrics.Snapshot:
        figures: dict[str, float | int | None | dict[str, int]] = dict(actor.metrics())
        figures["pending_evicted_total"] = actor.keeper.evicted  # kept ones dropped early
        figures["pending_share_evicted_total"] = actor.keeper.evicted_own  # by their own sender
        figures["ready"] = int(health.ready().ok)  # none of a model's ready: `NoReadyActors`
        if actor.states is not None:
            figures.update(actor.states.metrics())
        if door is not None:
            figures["http_responses_total"] = dict(door.responses)
            figures["http_unproven_closed_total"] = door.conns.evicted
            figures["http_peer_refused_total"] = door.conns.refused_peer
            figures.update(door.labels.metrics())  # the labels route's joins
        if grpc_door is not None:
            figures["grpc_responses_total"] = dict(grpc_door.responses)
            figures["grpc_calls"] = grpc_door.calls
        return figures

    labels = {"http_responses_total": "code", "grpc_responses_total": "code"}
    port = metrics.expose(
        "actor", model.name, snapshot, settings.metrics_port, labels=labels, health=health
    )
    if port is not None:
        log.info("metrics on port %d", port)
        latency = metrics.histogram(
            "actor_request_latency_seconds",
            "arrival at the actor to reply sent",
            metrics.LATENCY_BUCKETS,
        )
        rows = metrics.histogram("actor_batch_size", "rows per forward pass", metrics.BATCH_BUCKETS)
        actor.observe_latency = latency.labels(model.name).observe
        actor.observe_batch = rows.labels(model.name).observe
    runtime.settle()  # TensorFlow's ~400,000 objects, where it serves: a full collection ~0.2 s
    if probe is not None:  # after the collection, which would hold an echo up
        probe.start()
    log.info("actor for %s ready on %s", model.name, names.predict_topic)
    try:
        actor.run(stop)  # until the first SIGTERM; then unready, and what it took answered
        doors = [opened for opened in (door, grpc_door) if opened is not None]
        drained = shutdown.drain(actor, client, shares, health, doors)
        log.info("answered %d requests taken before unsubscribing", drained)
    finally:
        for opened in (door, grpc_door):
            if opened is not None:
                opened.stop()
        if probe is not None:
            probe.stop()
        actor.clear_status()
        mqtt.close(client)
    log.info("actor stopped after %d replies in %d batches", actor.served, actor.batches)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
