"""The public client against a real Mosquitto, Redis, and ingest, learner and actor processes.

The model `w` is windowed (a window of 3 steps of 2 features), so one stack answers whole
windows, several windows per request, and key-only requests completed from what a device
published.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import redis as redis_lib

import streamlearn
from streamlearn.client import ConnectionClosedError
from streamlearn.client import client as client_module
from streamlearn.config import Settings
from streamlearn.config.ingest import IngestConfig
from streamlearn.contract.names import Names
from streamlearn.errors import StreamlearnError
from streamlearn.stack import embedded
from tests.conftest import eventually, launch_role, own_settings, plain_paho, samples_seen
from tests.deployed import device_url, mqtt_url

TOML = """
[models.w]
inputs = 2
window = 3
architecture = "conv1d"
hidden = [8]
task = "regression"

[models.w.gateways]
hub = ["*"]
"""
WINDOW = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]


@pytest.fixture(scope="module")
def stack(
    redis_server: embedded.ServerProcess,
    mosquitto_server: embedded.ServerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Settings, redis_lib.Redis]]:
    """Ingest, learner and actor for `w`, trained on samples the client published."""
    settings = own_settings(redis_server, mosquitto_server)
    config = tmp_path_factory.mktemp("client") / "streamlearn.toml"
    config.write_text(TOML)
    roles = [launch_role(settings, role, config) for role in ("ingest", "learner", "actor")]
    store = redis_lib.Redis.from_url(settings.redis)
    names = Names("w", settings.topic_prefix, settings.key_prefix)
    try:
        for role in roles:
            role.wait_for(" ready")
        rng = np.random.default_rng(0)
        xs = rng.uniform(-1, 1, (2000, 3, 2))
        with connect(settings) as client:
            client.publish_many("w", xs, xs[:, -1, 0])

        def learned() -> bool:
            return samples_seen(store, names) > 0

        eventually(lambda: int(store.get(names.ingest_count_key) or 0) == 2000, 60, "ingested")
        eventually(learned, 60, "a first version trained on them")
        yield settings, store
    finally:
        for role in roles:
            role.stop()
        store.close()


def connect(settings: Settings, **options: object) -> streamlearn.Client:
    return streamlearn.Client(settings.mqtt, topic_prefix=settings.topic_prefix, **options)


def test_published_samples_reach_the_stream_in_messages_ingest_takes(stack):
    settings, store = stack
    names = Names("w", settings.topic_prefix, settings.key_prefix)
    before = int(store.get(names.ingest_count_key) or 0)
    # 12,000 windows: over ingest's 10,000 samples a message, and as one message over its
    # 1 MiB, so the client splits them; ingest dead-letters a message over either cap.
    xs = np.random.default_rng(1).uniform(-1, 1, (12_000, 3, 2))
    ids = [f"s{i}" for i in range(len(xs))]
    with connect(settings) as client:
        messages = client.publish_many("w", xs, xs[:, -1, 0], ids)
        client.publish("w", x=WINDOW, y=0.5, id="one")
        client.publish("w", x=WINDOW, y=0.5, id="one")  # the same id: stored once
    assert messages >= 2
    count = before + 12_001
    eventually(lambda: int(store.get(names.ingest_count_key) or 0) == count, 30, "every sample")
    assert store.xlen(names.deadletter_key) == 0


def test_predict_returns_the_prediction_and_raises_what_the_service_says(stack):
    settings, _ = stack
    with connect(settings) as client:
        one = client.predict("w", WINDOW, timeout=10)
        rows = client.predict("w", [WINDOW, WINDOW, WINDOW], timeout=10)
        with pytest.raises(streamlearn.PredictionError) as refused:
            client.predict("w", WINDOW[:2], timeout=10)
        with pytest.raises(TimeoutError, match="no reply from model 'nobody' within 0.5 s"):
            client.predict("nobody", WINDOW, timeout=0.5)
    assert isinstance(one, streamlearn.Prediction)
    assert one.model == "w" and one.version >= 1 and isinstance(one.y, float)
    assert rows.version >= one.version and len(rows.y) == 3 and rows.y[0] == rows.y[1]
    assert str(refused.value) == "x must have shape [3, 2], got [2, 2]"
    assert refused.value.model == "w"


def test_key_only_requests_are_completed_from_the_devices_observations(stack):
    """A device (its client id its key) extends its own window and asks with its key; a
    gateway (`[models.w.gateways]`) may ask for any key, the device for no other."""
    settings, _ = stack
    with connect(settings, client_id="dev-1") as device, connect(settings, client_id="hub") as hub:
        for seq, step in enumerate(WINDOW[:2]):
            device.publish("w", x=step, key="dev-1", seq=seq)  # no y: only extends the window
        prediction = answered(lambda: device.predict("w", WINDOW[2], key="dev-1"))
        asked_by_hub = hub.predict("w", WINDOW[2], key="dev-1")
        with pytest.raises(streamlearn.PredictionError) as unknown:
            hub.predict("w", [0.5, 0.5], key="dev-9")
        with pytest.raises(streamlearn.PredictionError) as another:
            device.predict("w", [0.5, 0.5], key="dev-9")
        with pytest.raises(streamlearn.PredictionError) as early:
            device.predict("w", WINDOW[2], key="dev-1", seq=1)
    assert prediction.model == "w" and isinstance(prediction.y, float)
    assert isinstance(asked_by_hub.y, float)
    assert str(unknown.value) == (
        "key 'dev-9': 0 of the 2 earlier observations a window needs are known"
    )
    assert str(another.value).startswith("key: 'dev-9' is not the sender's own, 'dev-1'")
    assert str(early.value) == (
        "key 'dev-1': 1 of the 2 earlier observations a window needs are known before seq 1"
    )


def answered(ask: Callable[[], streamlearn.Prediction]) -> streamlearn.Prediction:
    """The first answer that is not an error: ingest stores observations as they come."""
    got: list[streamlearn.Prediction] = []

    def ok() -> bool:
        try:
            got.append(ask())
        except streamlearn.PredictionError:
            return False
        return True

    eventually(ok, 30, "an answer")
    return got[0]


def test_concurrent_requests_share_one_connection_and_get_their_own_replies(stack):
    settings, _ = stack
    sizes = [1 + i % 7 for i in range(300)]
    with connect(settings) as client:
        futures, unanswered = [], []
        for n in sizes:
            futures.append(client.predict_async("w", [WINDOW] * n, timeout=30))
            if n == 7:  # between them, requests no actor answers
                unanswered.append(client.predict_async("nobody", WINDOW, timeout=60))
        done, waiting = concurrent.futures.wait(futures, timeout=30)
        assert waiting == set()
        assert [len(f.result().y) for f in futures] == sizes, "each reply is its request's"
        assert not any(f.done() for f in unanswered)


def test_async_client(stack):
    settings, _ = stack

    async def use() -> tuple[list[streamlearn.Prediction], str]:
        url = settings.mqtt
        async with streamlearn.AsyncClient(url, topic_prefix=settings.topic_prefix) as ac:
            await ac.publish("w", WINDOW, 0.5)
            replies = await asyncio.gather(*(ac.predict("w", [WINDOW] * n) for n in (1, 2, 3)))
            try:
                await ac.predict("w", [[1.0, 2.0]], timeout=10)
            except streamlearn.PredictionError as exc:
                return replies, str(exc)
            raise AssertionError("a wrong shape was answered")

    replies, error = asyncio.run(use())
    assert [len(p.y) for p in replies] == [1, 2, 3] and {p.model for p in replies} == {"w"}
    assert error == "x must have shape [3, 2], got [1, 2]"


def test_waiting_requests_are_bounded_and_fail_when_the_connection_ends(settings, tmp_path: Path):
    client = connect(settings, max_pending=3)
    waiting = [client.predict_async("nobody", WINDOW, timeout=60) for _ in range(3)]
    with pytest.raises(StreamlearnError, match="3 requests already await replies"):
        client.predict_async("nobody", WINDOW)
    client.close()
    for future in waiting:
        with pytest.raises(ConnectionClosedError, match="closed with 3 requests unanswered"):
            future.result(timeout=10)
    with pytest.raises(ConnectionClosedError, match="client is closed"):
        client.predict("nobody", WINDOW)

    with embedded.mosquitto(workdir=tmp_path) as broker:
        client = streamlearn.Client(f"mqtt://127.0.0.1:{broker.port}")
        lost = client.predict_async("nobody", WINDOW, timeout=60)
    with pytest.raises(ConnectionClosedError, match="lost"):
        lost.result(timeout=30)
    client.close()


def test_credentials_and_tls_come_from_the_url(broker, start_role, monkeypatch):
    """A device's account on the deployed broker (TLS, ACL): its requests and replies go
    only where the ACL lets that device, and what the broker refuses raises."""
    start_role(
        "actor",
        '[models.a]\ninputs = 2\ntask = "binary"\n',
        env={
            "STREAMLEARN_MQTT_URL": mqtt_url(broker, "actor"),
            "STREAMLEARN_TOPIC_PREFIX": "streamlearn",
        },
    )
    monkeypatch.setenv("STREAMLEARN_MQTT_URL", device_url(broker, "alice"))
    monkeypatch.setenv("STREAMLEARN_MQTT_CA_FILE", str(broker.ca_file))
    monkeypatch.delenv("STREAMLEARN_TOPIC_PREFIX", raising=False)
    with streamlearn.Client() as alice:
        assert alice.client_id == "alice"
        alice.publish("a", [0.1, 0.2], 1.0)
        assert alice.predict("a", [0.1, 0.2]).version == 0  # the prior: nothing learned yet
    elsewhere = streamlearn.Client(topic_prefix="elsewhere")
    with elsewhere, pytest.raises(StreamlearnError, match="Not authorized"):
        elsewhere.publish("a", [0.1, 0.2], 1.0)
    with pytest.raises(StreamlearnError, match="refused"):
        streamlearn.Client(device_url(broker, "alice", password="wrong"))


def test_the_client_loads_no_service_dependency_and_agrees_with_the_service():
    heavy = ("tensorflow", "keras", "redis", "numpy", "pydantic")
    code = (
        "import sys, streamlearn, streamlearn.client.client\n"
        "from streamlearn import AsyncClient, Client, Prediction, PredictionError\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # What the client assumes of the service's settings and ingest's defaults.
    env = {f"STREAMLEARN_{name.upper()}" for name in Settings.model_fields}
    names = (client_module.URL_ENV, client_module.CA_FILE_ENV, client_module.TOPIC_PREFIX_ENV)
    assert set(names) <= env
    assert Settings(mqtt_url=None).mqtt == client_module.DEFAULT_URL
    assert Settings.model_fields["topic_prefix"].default == client_module.DEFAULT_TOPIC_PREFIX
    assert IngestConfig().max_payload_bytes == client_module.MAX_PAYLOAD_BYTES
    assert IngestConfig().max_samples_per_message == client_module.MAX_SAMPLES_PER_MESSAGE


def test_named_samples_requests_and_later_labels_go_out_as_the_contract_says(settings):
    """What a named model's devices send, read off the broker by a plain subscriber."""
    got: dict[str, list] = {"samples": [], "labels": [], "predict": []}
    prefix = settings.topic_prefix
    sub = plain_paho(settings)
    sub.on_message = lambda _c, _u, m: got[m.topic.split("/")[2]].append(json.loads(m.payload))
    for leaf in ("samples/#", "labels/#", "predict/#"):
        sub.subscribe(f"{prefix}/m/{leaf}", qos=1)
    time.sleep(0.5)
    reading = {"temperature": 88.0, "ENERGY": {"Power": 5}, "machine_type": "press"}
    try:
        with connect(settings, max_samples_per_message=3) as client:
            client.publish("m", {**reading, "failed": 1}, id="s-1")
            client.publish("m", [{**reading, "failed": i % 2} for i in range(7)])  # 3, 3, 1
            asked = client.predict_async("m", reading, id="r-1", timeout=0.5)
            client.label("m", "r-1", 1)
            assert client.labels("m", [(f"r-{i}", i % 2) for i in range(5)]) == 2
            with pytest.raises(TimeoutError):
                asked.result()  # no actor here: what matters is what was sent

            for mistake, said in (
                (lambda: client.label("m", None, 1), "a label's id must be a non-empty string"),
                (lambda: client.label("m", "r-1", "1"), "must be a finite number, got '1'"),
                (lambda: client.label("m", "r-1", float("nan")), "must be a finite number"),
                (lambda: client.labels("m", [("r-1",)]), r"labels\[0\]: an \(id, y\) pair"),
                (lambda: client.publish("m", reading, y=1), "carries its label as one of"),
                (lambda: client.predict("m", {"key": 1}), "field 'key' is one of the payload"),
                (lambda: client.predict("m", reading, id=""), "id must be a non-empty string"),
            ):
                with pytest.raises(ValueError, match=said):
                    mistake()
        eventually(lambda: len(got["labels"]) == 3 and len(got["samples"]) == 4, 10, "all")
    finally:
        sub.loop_stop()
        sub.disconnect()
    assert got["samples"][0] == {**reading, "failed": 1, "id": "s-1"}
    assert [len(doc["samples"]) for doc in got["samples"][1:]] == [3, 3, 1]
    assert got["samples"][1]["samples"][1] == {**reading, "failed": 1}
    assert got["predict"] == [{**reading, "id": "r-1"}]
    assert got["labels"][0] == {"id": "r-1", "y": 1}
    assert got["labels"][1:] == [
        {"labels": [{"id": "r-0", "y": 0}, {"id": "r-1", "y": 1}, {"id": "r-2", "y": 0}]},
        {"labels": [{"id": "r-3", "y": 1}, {"id": "r-4", "y": 0}]},
    ]


def test_async_client_labels(settings):
    got: list[dict] = []
    sub = plain_paho(settings)
    sub.on_message = lambda _c, _u, m: got.append(json.loads(m.payload))
    sub.subscribe(f"{settings.topic_prefix}/m/labels/#", qos=1)
    time.sleep(0.5)

    async def use() -> None:
        url = settings.mqtt
        async with streamlearn.AsyncClient(url, topic_prefix=settings.topic_prefix) as ac:
            await ac.label("m", "a-1", 0.5)
            await ac.labels("m", [("a-2", 2), ("a-3", 3)])

    try:
        asyncio.run(use())
        eventually(lambda: len(got) == 2, 10, "both label messages")
    finally:
        sub.loop_stop()
        sub.disconnect()
    assert got == [
        {"id": "a-1", "y": 0.5},
        {"labels": [{"id": "a-2", "y": 2}, {"id": "a-3", "y": 3}]},
    ]
