"""`streamlearn learner`: Redis stream -> train_on_batch -> versioned weights."""

from __future__ import annotations

import json
import logging

from streamlearn import metrics, mqtt
from streamlearn.learner import Learner
from streamlearn.monitor import queue_figures
from streamlearn.queue import SampleQueue
from streamlearn.tensorboard import Rate, ScalarLog
from streamlearn.weights import WeightsStore
from workers import _runtime

log = logging.getLogger("streamlearn.learner")


def main(argv: list[str] | None = None) -> int:
    args = _runtime.parse_args("learner", argv)
    model, settings, names, client_id = _runtime.load("learner", args)
    redis = _runtime.redis_client(settings)
    client = mqtt.connect(settings.mqtt, client_id, ca_file=settings.mqtt_ca_file)

    rate = Rate()
    curves = (
        ScalarLog(model.learner.tensorboard_dir, model.name)
        if model.learner.tensorboard_dir
        else None
    )

    def publish_status(status: dict[str, object]) -> None:
        status["samples_per_s"] = rate.update(int(status["samples_seen"]))
        client.publish(names.status_topic, json.dumps(status), qos=1, retain=True)
        if curves is not None:
            curves.write(status)

    learner = Learner(
        model,
        SampleQueue(redis, names, model.sample_shape),
        WeightsStore(redis, names, model.learner.keep_versions),
        consumer=f"learner-{model.name}",
        status=publish_status,
    )
    stop = _runtime.stop_on_signals()
    learner.start()  # resumes, then traces every batch bucket once

    def snapshot() -> dict[str, object]:
        """The learner's counters plus its stream's length, pending and dead letters."""
        return {**learner.metrics(), **queue_figures(redis, names)}

    port = metrics.expose("learner", model.name, snapshot, settings.metrics_port)
    if port is not None:
        log.info("metrics on port %d", port)
    log.info("learner for %s ready at version %d", model.name, learner.state.version)
    try:
        learner.run(stop)
        publish_status(learner.status())
    finally:
        mqtt.close(client)
    log.info("learner stopped at step %d, version %d", learner.state.step, learner.state.version)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
