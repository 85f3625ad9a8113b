"""`streamlearn actor`: prediction requests over MQTT, answered with the latest weights."""

from __future__ import annotations

import logging
import os

from streamlearn import mqtt
from streamlearn.actor import Actor
from streamlearn.weights import WeightsStore
from workers import _runtime

log = logging.getLogger("streamlearn.actor")


def main(argv: list[str] | None = None) -> int:
    args = _runtime.parse_args("actor", argv)
    model, settings, names, client_id = _runtime.load("actor", args)
    client_id = f"{client_id}-{os.getpid()}"  # actors keep no session: ids only need be unique
    store = WeightsStore(_runtime.redis_client(settings), names)
    client = None

    def publish(topic: str, payload: bytes, properties: object) -> None:
        client.publish(topic, payload, qos=1, properties=properties)

    actor = Actor(model, store, names, publish)
    stop = _runtime.stop_on_signals()
    client = mqtt.connect(
        settings.mqtt,
        client_id,
        ca_file=settings.mqtt_ca_file,
        subscriptions=[(names.shared("predict", settings.share_group), 1)],
        on_message=actor.on_message,
    )
    log.info("actor for %s ready on %s", model.name, names.predict_topic)
    try:
        actor.run(stop)
    finally:
        mqtt.close(client)
    log.info("actor stopped after %d replies", actor.served)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
