"""The public surface: what `streamlearn` and each subpackage export, pinned, so that a
change to it is a decision (and a CHANGELOG line), not an accident."""

from __future__ import annotations

import importlib

import pytest

SURFACE = {
    "streamlearn": ["AsyncClient", "Client", "Prediction", "PredictionError"],
    "streamlearn.client": [
        "AsyncClient",
        "Client",
        "ConnectionClosedError",
        "Prediction",
        "PredictionError",
    ],
    "streamlearn.contract": [
        "FastSamples",
        "Names",
        "Observations",
        "Parsed",
        "PayloadParser",
        "Rejection",
        "Request",
        "Samples",
        "decode",
        "encode",
    ],
    "streamlearn.store": [
        "Appender",
        "Entry",
        "Packed",
        "PartitionedStream",
        "Retried",
        "SampleStream",
        "Sent",
        "WeightsStore",
        "WindowStore",
        "connect",
        "group_of",
        "open_stream",
    ],
    "streamlearn.ingest": ["Ingest", "IngestCounters", "IngestInbox", "RunWriter"],
    "streamlearn.learner": [
        "Drainer",
        "Durability",
        "Learner",
        "LearnerWrites",
        "LockstepLearner",
        "Promoter",
    ],
    "streamlearn.actor": ["Actor", "Inbox", "Replier", "WeightsReloader"],
    "streamlearn.online": ["Batch", "Forward", "Params", "Trainer"],
    "streamlearn.nn": ["build_model", "export"],
    "streamlearn.observe": ["Health", "Presence", "StatusMonitor", "WorkerServer", "read_status"],
    "streamlearn.stack": ["Dashboard", "DemoStream", "Stack", "mosquitto", "redis_server"],
    "streamlearn.cli": ["main"],
}


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_each_package_exports_what_is_pinned_and_every_name_resolves(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == SURFACE[package]
    assert module.__doc__, f"{package} says what it owns"
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
