"""/livez and /readyz of running workers, on their metrics port: what compose's
healthchecks ask. Ready means able to do the role's work, not just a TCP connection."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from streamlearn.observe.health import Health, Progress
from streamlearn.stack.embedded import free_port
from tests.conftest import eventually

TOML = """
[models.h]
inputs = 2
task = "binary"
"""


def probe(port: int, path: str) -> tuple[int, dict]:
    """(HTTP status, JSON body) of GET http://127.0.0.1:{port}{path}."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def metrics_env() -> tuple[int, dict[str, str]]:
    port = free_port()
    return port, {"STREAMLEARN_METRICS_PORT": str(port)}


FACTORY_TOML = """
[models.f]
inputs = 2
factory = "tests.factories:tiny_regressor"
"""


def test_a_built_in_models_actor_is_ready_before_any_weights(start_role):
    """It answers from its first request (its prior, as version 0): ready at once."""
    port, env = metrics_env()
    start_role("actor", TOML, env=env)
    code, body = probe(port, "/readyz")
    assert code == 200 and body["weights"] == "ok", body


def test_actor_becomes_ready_when_weights_are_published(start_role):
    """A factory's model has no known initial state: not ready until the first version."""
    actor_port, actor_env = metrics_env()
    start_role("actor", FACTORY_TOML, env=actor_env)

    code, body = probe(actor_port, "/readyz")
    assert code == 503, body
    assert body["weights"] == "no weights loaded yet" and body["broker"] == "ok"
    assert probe(actor_port, "/livez")[0] == 200

    learner_port, learner_env = metrics_env()
    start_role("learner", FACTORY_TOML, env=learner_env)  # publishes the initial weights
    eventually(lambda: probe(actor_port, "/readyz")[0] == 200, 30, "actor ready")
    assert probe(actor_port, "/readyz")[1]["weights"] == "ok"

    code, body = probe(learner_port, "/readyz")
    assert code == 200, body
    assert body == {"ok": True, "role": "learner", "broker": "ok", "redis": "ok", "progress": "ok"}
    code, body = probe(learner_port, "/livez")
    assert code == 200 and body["loop_silent_s"] < 60, body
    # the same port still serves the metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{learner_port}/metrics", timeout=10) as reply:
        assert b"streamlearn_learner_steps_total" in reply.read()


def test_ingest_is_ready_only_with_both_broker_and_redis(start_role):
    port, env = metrics_env()
    start_role("ingest", TOML, env=env)
    code, body = probe(port, "/readyz")
    assert code == 200 and body["broker"] == "ok" and body["redis"] == "ok", body

    lost_port, lost_env = metrics_env()
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # no Redis listens there
    start_role("ingest", TOML, instance="1", env={**lost_env, "STREAMLEARN_REDIS_URL": nowhere})
    code, body = probe(lost_port, "/readyz")
    assert code == 503 and body["broker"] == "ok", body
    assert body["redis"].startswith("Redis unreachable"), body
    assert probe(lost_port, "/livez")[0] == 200  # alive: retrying, not hung
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{lost_port}/nothing", timeout=10)
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    else:
        raise AssertionError("/nothing answered")


# -- the verdicts themselves, on a clock the test moves --------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_that_stops_turning_is_not_live():
    clock = Clock()
    health = Health("learner", stall_s=60, clock=clock)
    clock.now += 59
    assert health.live().ok
    clock.now += 2
    verdict = health.live()
    assert not verdict.ok and "has not turned for 61 s" in verdict.detail["reason"]
    health.beat()
    assert health.live().ok


def test_a_backlog_nobody_works_off_makes_the_learner_not_ready():
    clock, trained, waiting = Clock(), [0], [0]
    progress = Progress(lambda: trained[0], lambda: waiting[0], stall_s=30, clock=clock)
    clock.now += 100
    assert progress() is None  # idle: nothing waits
    waiting[0] = 500
    assert progress() is None  # the stall clock starts now
    clock.now += 31
    assert progress() == "500 samples waiting and none trained for 31 s"
    trained[0] = 64
    assert progress() is None  # it moved
    clock.now += 31
    waiting[0] = 0
    assert progress() is None  # worked off


def test_a_failing_check_says_why_and_a_raising_one_fails():
    health = Health("ingest")
    health.add("broker", lambda: None)
    health.add("redis", lambda: 1 / 0)
    verdict = health.ready()
    assert not verdict.ok
    assert verdict.detail["broker"] == "ok"
    assert verdict.detail["redis"] == "check failed: ZeroDivisionError: division by zero"


def test_ingest_waiting_out_a_lost_redis_stays_live():
    """Its backoff between retries beats the heartbeat the worker wires to /livez: a long
    Redis outage is not a hung worker that an orchestrator should restart (readiness
    reports the outage)."""
    import threading

    import redis as redis_lib

    from streamlearn.config import ModelConfig
    from streamlearn.contract.names import Names
    from streamlearn.contract.payloads import PayloadParser
    from streamlearn.ingest.loop import Ingest
    from streamlearn.store.stream import SampleStream

    model = ModelConfig(name="h", inputs=2)
    gone = redis_lib.Redis(port=free_port(), socket_connect_timeout=1)  # nothing listens
    ingest = Ingest(PayloadParser(model), SampleStream.of(gone, Names("h"), model), model.ingest)
    clock = Clock()
    health = Health("ingest", stall_s=60, clock=clock)
    stop = threading.Event()
    verdicts = []

    def beat() -> None:  # each beat, a minute of the outage has passed
        health.beat()
        clock.now += 59
        verdicts.append(health.live().ok)
        if len(verdicts) == 3:
            stop.set()

    ingest.heartbeat = beat  # as streamlearn/ingest/worker.py wires it
    deadline = threading.Timer(20, stop.set)  # unwired, nothing would stop the retries
    deadline.start()
    try:
        assert ingest.writer.retry(gone.ping, stop) is None  # stopped, Redis still gone
    finally:
        deadline.cancel()
    assert verdicts == [True, True, True]


# -- the readiness verdict is kept a second: a burst of probes costs one Redis check -----


def test_a_burst_of_readiness_probes_costs_one_redis_check_per_interval(settings):
    """Counted on the real Redis (INFO commandstats), on a clock the test moves: twenty
    probes at once ping Redis once; once `ready_cache_s` (1 s) has passed, the next
    probe checks again."""
    import threading

    import redis as redis_lib

    from streamlearn.observe.health import READY_CACHE_S, redis_reachable
    from streamlearn.observe.metrics import serve

    assert READY_CACHE_S == 1.0
    counter = redis_lib.Redis.from_url(settings.redis)

    def pings() -> int:
        return counter.info("commandstats").get("cmdstat_ping", {}).get("calls", 0)

    clock = Clock()
    health = Health("ingest", clock=clock)
    health.add("redis", redis_reachable(redis_lib.Redis.from_url(settings.redis)))
    server = serve(0, health)
    port = server.server_port
    try:
        before = pings()
        codes: list[int] = []
        burst = [
            threading.Thread(target=lambda: codes.append(probe(port, "/readyz")[0]))
            for _ in range(20)
        ]
        for thread in burst:
            thread.start()
        for thread in burst:
            thread.join(30)
        assert codes == [200] * 20
        assert pings() - before == 1, "twenty probes within the interval: one check"

        clock.now += 0.9
        assert probe(port, "/readyz")[0] == 200
        assert pings() - before == 1, "still within the interval"
        clock.now += 0.1
        assert [probe(port, "/readyz")[0] for _ in range(5)] == [200] * 5
        assert pings() - before == 2, "the interval passed: one more check"
    finally:
        server.shutdown()
        server.server_close()
        counter.close()
