"""The autoscaling examples (deploy/autoscaling, docs/scaling.md#autoscaling) scale the
actors' Deployment on metrics the actors serve."""

from __future__ import annotations

import re

import yaml

from streamlearn.observe.catalog import METRICS
from tests.conftest import ROOT

AUTOSCALING = ROOT / "deploy" / "autoscaling"


def actor_deployment() -> dict:
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "common" / "actor.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "Deployment")


def test_the_hpa_and_keda_scale_the_actors_deployment_on_a_catalogued_metric():
    actor = actor_deployment()["metadata"]["name"]
    hpa = yaml.safe_load((AUTOSCALING / "hpa-actor.yaml").read_text())
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": actor,
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] in METRICS
    keda = yaml.safe_load((AUTOSCALING / "keda-actor.yaml").read_text())
    assert keda["spec"]["scaleTargetRef"]["name"] == actor
    assert hpa["spec"]["minReplicas"] == keda["spec"]["minReplicaCount"]
    (trigger,) = keda["spec"]["triggers"]
    names = re.findall(r"\bstreamlearn_\w+", trigger["metadata"]["query"])
    assert names and all(name in METRICS for name in names)


def test_the_adapter_serves_the_metric_the_hpa_reads_from_catalogued_series():
    values = yaml.safe_load((AUTOSCALING / "prometheus-adapter-values.yaml").read_text())
    rules = values["rules"]["custom"]
    for rule in rules:
        (series,) = re.findall(r"^(streamlearn_\w+)\{", rule["seriesQuery"])
        assert series in METRICS, series
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}  # Pods metrics
    hpa = yaml.safe_load((AUTOSCALING / "hpa-actor.yaml").read_text())
    served = {rule["name"]["as"] for rule in rules}
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] in served
