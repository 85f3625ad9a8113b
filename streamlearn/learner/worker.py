"""`streamlearn learner`: Redis stream -> train_on_batch -> versioned weights.

`--variant VNAME` runs one of the model's variants (`streamlearn.learner.variants`): the same
stream in its own consumer group, its own weights keys, and the model's while champion.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from streamlearn import mqtt, runtime
from streamlearn.config.app import BASE_VARIANT
from streamlearn.config.tfconfig import Workers
from streamlearn.errors import LeaseLost
from streamlearn.learner.lease import LeaseKeeper
from streamlearn.learner.lockstep import LockstepLearner
from streamlearn.learner.loop import Learner
from streamlearn.learner.reporting import StatusPublisher
from streamlearn.learner.tensorboard import ScalarLog
from streamlearn.learner.variants import Promoter
from streamlearn.nn import networks
from streamlearn.observe import metrics
from streamlearn.observe.health import Health, Progress, quick_redis
from streamlearn.observe.monitor import queue_figures
from streamlearn.observe.presence import Presence
from streamlearn.store.appends import Appender
from streamlearn.store.lease import Lease
from streamlearn.store.partitions import open_stream
from streamlearn.store.stream import group_of
from streamlearn.store.weights import WeightsStore

log = logging.getLogger("streamlearn.learner")


def main(argv: list[str] | None = None) -> int:
    args = runtime.parse_args("learner", argv)
    model, settings, names, client_id = runtime.load("learner", args)
    variant = args.variant or BASE_VARIANT
    cfg = model.variant(variant)  # ConfigError for an unknown variant
    usable = runtime.usable_cpus()  # TensorFlow's pools sized before it runs anything
    cpus = {
        **usable.status(),
        **networks.size_thread_pools(usable.usable),
        "prefetch_batches": cfg.learner.prefetch_depth(),
    }
    if variant != BASE_VARIANT:
        client_id = f"{client_id}-{variant}"
    redis = runtime.redis_client(settings)
    instance = runtime.instance_of(args, settings)
    if variant != BASE_VARIANT:
        instance = f"{instance}-{variant}"
    # one worker of a multi-host learner (docs/scaling.md): its own partitions; only the
    # chief reports, competes and holds the lease
    workers = Workers.from_env() if cfg.learner.distribute == "multi_worker" else None
    partitions = workers.partitions(cfg.ingest.partitions) if workers else None
    chief = workers is None or workers.chief
    own = names.of_variant(variant) if model.variants else names
    lease = Lease(redis, own, cfg.learner.lease.ttl_s) if chief else None
    keeper = LeaseKeeper(lease, cfg.learner.lease) if lease else None
    # its lease token: `streamlearn status` tells the holder from the learners that wait
    presence = Presence(
        names, "learner", instance, variant=variant, lease=lease.token if lease else None
    )
    client = mqtt.connect(
        settings.mqtt, client_id, ca_file=settings.mqtt_ca_file, online=presence.online
    )

    label = model.name if variant == BASE_VARIANT else f"{model.name}/variants/{variant}"
    curves = ScalarLog(cfg.learner.tensorboard_dir, label) if cfg.learner.tensorboard_dir else None
    publisher = StatusPublisher(client, names, curves, cpus)
    promoter = (
        Promoter(redis, names, variant, model.promotion, announce=publisher.announce, lease=lease)
        if model.variants
        else None
    )
    store = WeightsStore(
        redis,
        names,
        variant if model.variants else None,
        keep=cfg.learner.history.newest,
        history=cfg.learner.history.versions,
        history_every_s=cfg.learner.history.every_s,
        lease=lease,
    )
    stream = open_stream(redis, names, cfg, group_of(variant), partitions)
    parts: dict[str, Any] = {  # for either learner
        "consumer": f"learner-{model.name}",
        "status": publisher if chief else None,
        "variant": variant,
        "promoter": promoter if chief else None,
        "lease": keeper,
    }

    def build() -> Learner:
        """A learner as a restarted process has it: resumed from the durable state."""
        if workers:
            return LockstepLearner(cfg, stream, store, workers=workers, **parts)
        return Learner(cfg, stream, store, **parts)

    stop = runtime.stop_on_signals()
    probe = quick_redis(settings.redis)
    waiting = [
        Appender(probe, names.of_partition(i), cfg.sample_shape, group_of(variant))
        for i in (partitions or range(cfg.ingest.partitions))
    ]
    health = runtime.connected_health("learner", client, settings)
    learner: Learner | None = None

    def snapshot() -> metrics.Snapshot:
        """The learner's counters plus its stream's length, pending and dead letters, and
        the samples waiting for it (the alert on a stale learner reads them)."""
        figures = queue_figures(redis, names, group_of(variant), cfg.ingest.partitions)
        backlog = sum(a.backlog() for a in waiting)
        found = {**(learner.metrics() if learner else {}), **(keeper.metrics() if keeper else {})}
        return {**found, **figures, "backlog_samples": backlog}

    # Not ready when samples wait and none is trained: a stuck learner, or one waiting for
    # the lease (a loop that does not turn at all fails /livez instead).

    def trained() -> int:
        """Samples trained on or dead-lettered: grows while a backlog is worked off."""
        return learner.state.samples_seen + learner.state.dead_lettered if learner else 0

    health.add("progress", Progress(trained, lambda: sum(a.backlog() for a in waiting)))
    port = metrics.expose(
        "learner",
        model.name,
        snapshot,
        settings.metrics_port,
        health=health,
        fixed={"variant": variant},
    )
    if port is not None:
        log.info("metrics on port %d", port)
    try:
        while keeper is None or keeper.wait(stop, health.beat):
            learner = build()
            runtime.stop_on_signals(stop)  # again: a multi-worker strategy installs its own
            try:
                serve(learner, health, stop)
                learner.report(compete=False)
                break
            except LeaseLost as exc:  # another learner publishes now: wait for the lease
                assert keeper is not None
                keeper.lose(str(exc))  # said by the keeper once, whoever noticed first
                keeper.release()
                log.warning("learner stopped at step %d, waits for the lease", learner.state.step)
                if workers:  # the workers start again together (their Job restarts them)
                    return 1
    finally:
        if keeper is not None:
            keeper.release()
        presence.clear(client)
        mqtt.close(client)
    if learner is not None:
        state = learner.state
        log.info("learner stopped at step %d, version %d", state.step, state.version)
    return 0


def serve(learner: Learner, health: Health, stop: threading.Event) -> None:
    """Start `learner` (resume, trace: it holds the lease by now) and run it until `stop`."""
    learner.heartbeat = health.beat
    health.beat()  # the lease taken: the loop's clock starts again
    learner.start()  # resumes, then traces every batch bucket once
    promoter = learner.promoter

    def ready() -> None:
        """Every step traced: the learner at its pace from now on. It learns (and
        publishes) before, from its first trace on: a new model's first samples do not
        wait for the larger steps' traces."""
        # else a full collection walks TensorFlow's objects: a ~0.2 s stall. Before the
        # ready line: a client that starts sending on it had its first samples answered
        # by the initial weights while this ran (the first ~5, one sample a message at 25/s).
        runtime.settle()
        champion = f" (champion: {promoter.champion})" if promoter else ""
        log.info(
            "learner for %s%s ready at version %d",
            learner.cfg.name,
            f" variant {learner.variant}{champion}" if promoter else "",
            learner.state.version,
        )

    if learner.trainer.cold:  # said by the loop once the last is traced
        learner.traced = ready
    else:  # every step traced at start (several devices, a lockstep learner)
        ready()
    learner.run(stop)


if __name__ == "__main__":
    raise SystemExit(main())
