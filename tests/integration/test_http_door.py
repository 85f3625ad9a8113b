"""The actor's Open Inference Protocol door, driven by a client no one here wrote.

`tritonclient.http` (NVIDIA's client for Triton, which speaks the same protocol as KServe
and MLServer) checks readiness, reads the model's metadata and infers over HTTP against a
real actor on a real Redis and Mosquitto; the same inputs over MQTT must get the same
predictions from the same version. Versions by request: a kept older version answers as
the file `streamlearn export` writes of it, a label names its version, a trimmed version
gets an error naming the versions kept.
"""

from __future__ import annotations

import json
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import keras
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from streamlearn.cli import main as cli
from streamlearn.config import parse_config
from streamlearn.contract import codec
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import tensors
from streamlearn.stack.embedded import free_port
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually

MODEL = "h"
TOML = """
[models.h]
inputs = 3
task = "binary"
hidden = [8]

[models.h.ingest]
max_payload_bytes = 32768  # a request body over it gets a 413; small, so that the whole
                           # body is in the socket's buffers before the answer comes

[models.h.actor]
http_port = {port}
reload_check_ms = 50
status_every_ms = 200
"""
KEEP = 3  # versions the publisher keeps: 1..8 published, 6, 7 and 8 kept


def weights(template: dict[str, np.ndarray], v: int) -> dict[str, np.ndarray]:
    """Version v's weights: random, but for the identity standardisation and mixture."""
    rng = np.random.default_rng(v)
    return {
        path: a
        if "standardize" in path or "alpha" in path
        else rng.normal(0, 0.7, a.shape).astype(a.dtype)
        for path, a in template.items()
    }


@pytest.fixture
def served(start_role, settings, redis, tmp_path: Path):
    """An actor with its HTTP door; versions 1..8 published, 6..8 kept. -> (url, store)."""
    port = free_port()
    toml = TOML.format(port=port)
    cfg = parse_config(tomllib.loads(toml)).model(MODEL)
    template = tensors.get_arrays(networks.build_model(cfg))
    store = WeightsStore(redis, Names(MODEL, settings.topic_prefix, settings.key_prefix))
    store.keep, store.history = KEEP, 0
    for v in range(1, 9):
        store.publish(codec.encode(weights(template, v), {"version": str(v)}))
    (tmp_path / "config.toml").write_text(toml)
    start_role("actor", toml)
    url = f"127.0.0.1:{port}"
    client = triton.InferenceServerClient(url)
    eventually(lambda: client.is_model_ready(MODEL), what="the actor serving version 8")
    client.close()
    return url, store, tmp_path / "config.toml"


def test_a_triton_client_reads_metadata_and_gets_the_mqtt_predictions(served, client_for):
    url, _store, _config = served
    client = triton.InferenceServerClient(url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(MODEL)
    meta = client.get_model_metadata(MODEL)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]
    assert meta["versions"] == ["6", "7", "8"]

    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    mqtt = client_for(MODEL).request({"x": x.tolist(), "id": "m"})
    assert mqtt["version"] == 8
    for binary in (False, True):  # the JSON body, and Triton's binary tensor extension
        tensor = triton.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        out = triton.InferRequestedOutput("y", binary_data=False)
        result = client.infer(MODEL, [tensor], outputs=[out], request_id="r1")
        response = result.get_response()
        assert response["model_name"] == MODEL and response["model_version"] == "8"
        assert response["id"] == "r1"
        y = result.as_numpy("y")
        assert y.shape == (5, 1)
        np.testing.assert_allclose(y[:, 0], mqtt["y"], rtol=1e-5, atol=1e-6)
    client.close()


def test_a_kept_version_answers_as_its_exported_file_and_a_trimmed_one_names_the_kept(
    served, client_for, settings, monkeypatch, tmp_path: Path
):
    url, store, config = served
    exported = tmp_path / "v6.keras"
    for name, value in settings.as_env().items():
        monkeypatch.setenv(name, value)
    argv = ["export", "--version", "6", "--output", str(exported), "--config", str(config)]
    assert cli.main(argv) == 0
    x = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    want = keras.saving.load_model(exported).predict(x, verbose=0)[:, 0]

    client = triton.InferenceServerClient(url)
    tensor = triton.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=False)
    result = client.infer(MODEL, [tensor], model_version="6")
    assert result.get_response()["model_version"] == "6"
    np.testing.assert_allclose(result.as_numpy("y")[:, 0], want, rtol=1e-5, atol=1e-6)
    mqtt = client_for(MODEL).request({"x": x.tolist(), "version": 6})
    assert mqtt["version"] == 6
    np.testing.assert_allclose(mqtt["y"], want, rtol=1e-5, atol=1e-6)

    with pytest.raises(InferenceServerException) as refused:
        client.infer(MODEL, [tensor], model_version="2")
    assert "version 2 is not kept; versions kept: [6, 7, 8]" in str(refused.value)
    assert refused.value.status() == "400"
    mqtt = client_for(MODEL).request({"x": x.tolist(), "version": 2})
    assert "versions kept: [6, 7, 8]" in mqtt["error"]

    # A label (`streamlearn pin --label`) names its version; `latest` is always there.
    assert cli.main(["pin", "--label", "stable", "--version", "7", "--config", str(config)]) == 0
    for label, version in (("stable", "7"), ("latest", "8")):
        result = client.infer(MODEL, [tensor], model_version=label)
        assert result.get_response()["model_version"] == version
    with pytest.raises(InferenceServerException, match="no version is labelled 'canary'"):
        client.infer(MODEL, [tensor], model_version="canary")
    client.close()


def post(url: str, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{url}{path}", body, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_bad_requests_get_the_protocol_error_and_the_door_keeps_serving(served):
    url, _store, _config = served
    infer = f"/v2/models/{MODEL}/infer"
    good = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    cases = [
        (infer, b"{not json", 400, "invalid JSON"),
        (infer, b"[1, 2]", 400, "must be a JSON object"),
        (infer, json.dumps({"inputs": []}).encode(), 400, "inputs: a list of 1 to"),
        (
            infer,
            json.dumps({"inputs": [{**good["inputs"][0], "shape": [1, 4]}]}).encode(),
            400,
            "3 values for shape [1, 4]",
        ),
        (
            infer,
            json.dumps({"inputs": [{**good["inputs"][0], "shape": [3, 1]}]}).encode(),
            400,
            "x: shape must be [rows, 3], got [3, 1]",
        ),
        (
            infer,
            json.dumps({"inputs": [{**good["inputs"][0], "datatype": "FP128"}]}).encode(),
            400,
            "datatype 'FP128'",
        ),
        (f"/v2/models/{MODEL}/versions/-1/infer", json.dumps(good).encode(), 400, "version:"),
        ("/v2/models/nope/infer", json.dumps(good).encode(), 404, "unknown model 'nope'"),
        (infer, b"[" * 40_000, 413, ""),
    ]
    for path, body, status, reason in cases:
        got, doc = post(url, path, body)
        assert (got, reason in doc.get("error", "")) == (status, True), (path, body[:60], doc)
    got, doc = post(url, infer, json.dumps(good).encode())
    assert got == 200 and doc["outputs"][0]["shape"] == [1, 1]
