"""`streamlearn ingest`: MQTT samples -> Redis stream."""

from __future__ import annotations

import logging

from streamlearn import mqtt, runtime
from streamlearn.contract.payloads import PayloadParser
from streamlearn.ingest.host import HostState
from streamlearn.ingest.loop import Ingest
from streamlearn.observe import metrics
from streamlearn.observe.presence import Presence
from streamlearn.store.partitions import open_stream

log = logging.getLogger("streamlearn.ingest")


def source_group(share_group: str, model: str) -> str:
    """The shared-subscription group of a model's sources: one of its own, so that every
    model reading a filter gets each of its messages (in one group, they split them). A
    model name holds no `.`, so two models' groups never coincide.

    >>> source_group("streamlearn", "machines")
    'streamlearn.machines'
    """
    return f"{share_group}.{model}"


def main(argv: list[str] | None = None) -> int:
    args = runtime.parse_args("ingest", argv)
    model, settings, names, client_id = runtime.load("ingest", args)
    stream = open_stream(runtime.redis_client(settings), names, model)
    ingest = Ingest(PayloadParser(model), stream, model.ingest)
    stop = runtime.stop_on_signals()
    # the samples, the devices' own topics (`[[sources]]`) and the labels, all QoS 1; bare
    # and per sender (`samples/{client}`, `labels/{client}`: their ids in its namespace)
    leaves = ("samples", "samples/+", "labels", "labels/+")
    topics = [*(names.topic(leaf) for leaf in leaves), *(s.topic for s in model.sources)]
    instance = runtime.instance_of(args, settings)
    presence = Presence(names, "ingest", instance, session_expiry_s=mqtt.SESSION_EXPIRY_S)
    groups = {s.topic: source_group(settings.share_group, model.name) for s in model.sources}
    client = mqtt.connect(
        settings.mqtt,
        client_id,
        ca_file=settings.mqtt_ca_file,
        subscriptions=[
            (f"$share/{groups.get(topic, settings.share_group)}/{topic}", 1) for topic in topics
        ],
        # a session of an older release holds its sources in the common group: dropped
        unsubscribe=[f"$share/{settings.share_group}/{topic}" for topic in groups],
        on_message=ingest.on_message,
        manual_ack=True,
        persistent=True,
        receive_maximum=model.ingest.max_pending_messages,
        online=presence.online,
        gone=presence.gone,
    )
    host = None  # a Sparkplug primary host's STATE, after the subscriptions (the spec's order)
    primary = model.sparkplug.primary_host if model.sparkplug is not None else None
    if primary and ingest.sparkplug is not None:
        host = HostState(settings.mqtt, primary, f"{client_id}-state", settings.mqtt_ca_file)
        host.start()
    health = runtime.connected_health("ingest", client, settings)
    ingest.heartbeat = health.beat
    port = metrics.expose(
        "ingest",
        model.name,
        ingest.metrics,
        settings.metrics_port,
        {
            "deadletters_total": "reason",
            "source_messages_total": "source",
            "missing_inputs_total": "field",
            "unseen_categories_total": "field",
            "sparkplug_messages_total": "status",
            "sparkplug_skipped_metrics_total": "reason",
        },
        health=health,
    )
    if port is not None:
        log.info("metrics on port %d", port)
    runtime.settle()  # before the ready line, as the learner and actor do
    log.info("ingest for %s ready on %s", model.name, ", ".join(topics))
    try:
        ingest.run(stop)
    finally:
        if host is not None:
            host.close()
        presence.clear(client)
        mqtt.close(client)
    log.info("ingest stopped: %s", ingest.counters)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
