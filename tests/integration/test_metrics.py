"""Prometheus /metrics of running workers: the counters move as samples and requests flow."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from streamlearn.observe.catalog import METRICS
from streamlearn.stack.embedded import free_port
from tests.conftest import eventually, plain_paho

TOML = """
[models.p]
inputs = 2
task = "binary"
"""


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(streamlearn_[a-z_]+)(\{[^}]*\})? ([-+0-9.eEinfNa]+)$", line)
        if m:
            values[m[1] + (m[2] or "")] = float(m[3])
    return values


def uncatalogued(port: int) -> set[str]:
    """The `streamlearn_` metrics a worker exposes that `streamlearn.observe.catalog` lacks
    (scraped names: a counter's with `_total`; a histogram's `_created` is the client's)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    exposed = set()
    for family, kind in re.findall(r"^# TYPE (streamlearn_\w+) (\w+)$", text, re.M):
        counter = kind == "counter" and not family.endswith("_total")
        exposed.add(family + "_total" if counter else family)
    return {name for name in exposed - set(METRICS) if name.removesuffix("_created") not in METRICS}


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`.

    A metric that is not exposed fails the test rather than reading as 0: `== 0` and
    before-equals-after checks must not pass for a renamed or removed metric.
    """
    found = [
        value
        for key, value in values.items()
        if key.split("{")[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items())
    ]
    assert found, f"{name}{labels or ''} is not exposed"
    return sum(found)


def test_workers_expose_moving_counters(start_role, client_for, settings):
    ports = {role: free_port() for role in ("ingest", "learner", "actor")}
    for role, port in ports.items():
        start_role(role, TOML, env={"STREAMLEARN_METRICS_PORT": str(port)})
    before = {role: scrape(port) for role, port in ports.items()}
    assert metric(before["ingest"], "streamlearn_ingest_samples_total", model="p") == 0

    device = plain_paho(settings)
    topic = f"{settings.topic_prefix}/p/samples"
    for i in range(50):
        device.publish(topic, f'{{"x": [{i % 5}, 1], "y": {i % 2}}}', qos=1)
    device.publish(topic, b'{"x": [1], "y": 0}', qos=1)
    device.publish(topic, b"not json", qos=1).wait_for_publish(10)
    device.disconnect()

    eventually(
        lambda: metric(scrape(ports["ingest"]), "streamlearn_ingest_samples_total") == 50,
        30,
        "ingest counted the samples",
    )
    ingest = scrape(ports["ingest"])
    assert metric(ingest, "streamlearn_ingest_messages_total") == 52
    assert metric(ingest, "streamlearn_ingest_deadletters_total") == 2
    assert metric(ingest, "streamlearn_ingest_deadletters_total", reason="invalid_json") == 1
    assert metric(ingest, "streamlearn_ingest_deadletters_total", reason="wrong_shape") == 1

    eventually(
        lambda: metric(scrape(ports["learner"]), "streamlearn_learner_samples_total") == 50,
        30,
        "learner counted the samples it trained on",
    )
    learner = scrape(ports["learner"])
    assert metric(learner, "streamlearn_learner_steps_total") >= 1
    assert metric(learner, "streamlearn_learner_version") >= 1
    assert metric(learner, "streamlearn_learner_deadletters") == 2
    assert 'streamlearn_learner_queue_length{model="p",variant="base"}' in learner
    assert 'streamlearn_learner_pending{model="p",variant="base"}' in learner
    assert metric(learner, "streamlearn_learner_retraces_total") == metric(
        before["learner"], "streamlearn_learner_retraces_total"
    ), "no retrace after warm-up"

    client = client_for("p")
    eventually(
        lambda: metric(scrape(ports["actor"]), "streamlearn_actor_version") >= 1,
        30,
        "actor loaded a version",
    )
    for _ in range(5):
        assert "y" in client.request({"x": [1, 1]})

    def observed_all() -> dict[str, float] | None:
        """The actor observes a request's latency just after its reply has gone."""
        values = scrape(ports["actor"])
        return (
            values
            if metric(values, "streamlearn_actor_request_latency_seconds_count") >= 5
            else None
        )

    actor = eventually(observed_all, 10, "the five latencies observed")
    assert metric(actor, "streamlearn_actor_weights_age_seconds") >= 0
    for role, port in ports.items():
        assert not uncatalogued(port), f"{role} exposes metrics the catalog lacks"


def test_learner_writes_tensorboard_curves(start_role, settings, tmp_path):
    logdir = tmp_path / "tb"
    toml = TOML + f'\n[models.p.learner]\ntensorboard_dir = "{logdir}"\nstatus_every_ms = 200\n'
    toml += "buckets = [256]\n"  # one padded size, one trace before ready (above: three)
    start_role("learner", toml)
    start_role("ingest", toml)
    device = plain_paho(settings)
    topic = f"{settings.topic_prefix}/p/samples"
    infos = [
        device.publish(topic, f'{{"x": [{i % 5}, 1], "y": {i % 2}}}', qos=1) for i in range(100)
    ]
    for info in infos:
        info.wait_for_publish(10)
    device.disconnect()

    def curves() -> dict[str, list[tuple[int, float]]]:
        import tensorflow as tf
        from tensorflow.core.util import event_pb2
        from tensorflow.python.lib.io import tf_record

        found: dict[str, list[tuple[int, float]]] = {}
        for path in (logdir / "p").glob("events.out.tfevents.*"):
            for record in tf_record.tf_record_iterator(str(path)):
                event = event_pb2.Event.FromString(record)
                for value in event.summary.value:
                    number = float(tf.make_ndarray(value.tensor))
                    found.setdefault(value.tag, []).append((event.step, number))
        return found

    eventually(
        lambda: any(step == 100 for step, _ in curves().get("version", [])),
        30,
        "a point at 100 samples",
    )
    found = curves()
    assert {"online_loss", "online_metric", "version"} <= set(found)
    assert max(v for _, v in found["version"]) >= 1


# -- where the metrics port listens, and how long it waits for a client --------------------


def answers(host: str, port: int) -> bool:
    """True if GET http://host:port/metrics answers; False if the connection is refused."""
    try:
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
    except urllib.error.URLError as exc:
        assert isinstance(exc.reason, ConnectionRefusedError), exc
        return False
    return True


def test_the_metrics_port_listens_on_loopback_unless_told(start_role):
    """A role run without STREAMLEARN_METRICS_HOST listens on 127.0.0.1 only (as under
    `streamlearn up`); with it, on the address it names (compose: 0.0.0.0)."""
    port = free_port()
    start_role("ingest", TOML, env={"STREAMLEARN_METRICS_PORT": str(port)})
    assert answers("127.0.0.1", port)
    assert not answers("127.0.0.2", port), "bound to 127.0.0.1, not to every address"

    other = free_port()
    env = {"STREAMLEARN_METRICS_PORT": str(other), "STREAMLEARN_METRICS_HOST": "127.0.0.2"}
    start_role("ingest", TOML, instance="1", env=env)
    assert answers("127.0.0.2", other)
    assert not answers("127.0.0.1", other)


def test_the_default_and_the_setting_in_process(monkeypatch):
    from streamlearn.observe.metrics import serve

    for wanted, env in (("127.0.0.1", None), ("0.0.0.0", "0.0.0.0")):
        if env is None:
            monkeypatch.delenv("STREAMLEARN_METRICS_HOST", raising=False)
        else:
            monkeypatch.setenv("STREAMLEARN_METRICS_HOST", env)
        server = serve(0)
        try:
            assert server.server_address[0] == wanted
            assert answers("127.0.0.1", server.server_port)
        finally:
            server.shutdown()
            server.server_close()


def test_a_silent_client_blocks_nobody_and_is_dropped():
    """A client that connects and sends nothing holds only its own thread, and the server
    hangs up on it at its `request_deadline_s`."""
    import socket

    from streamlearn.observe.metrics import REQUEST_DEADLINE_S, serve

    assert REQUEST_DEADLINE_S == 5.0
    server = serve(0, host="127.0.0.1", request_deadline_s=0.5)
    silent = socket.create_connection(("127.0.0.1", server.server_port), timeout=30)
    half = socket.create_connection(("127.0.0.1", server.server_port), timeout=30)
    try:
        half.sendall(b"GET /metr")  # a request line never finished
        assert answers("127.0.0.1", server.server_port), "others are served meanwhile"
        assert silent.recv(1) == b"", "the silent client is hung up on"
        assert half.recv(1) == b"", "so is the one that stopped mid-line"
    finally:
        silent.close()
        half.close()
        server.shutdown()
        server.server_close()
