"""What every worker's /metrics page says besides its role's figures: which release it runs
(`streamlearn_build_info`), and a learner's variant on each of its series."""

from __future__ import annotations

from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from streamlearn.observe import metrics
from streamlearn.observe.catalog import METRICS


def page(*collectors: Collector) -> str:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry).decode()


def test_a_learners_series_carry_its_variant_and_every_worker_its_build():
    figures = {"steps_total": 3, "version": 2, "redis_oom": 0}
    learner = metrics.SnapshotCollector("learner", "m", lambda: figures, fixed={"variant": "v2"})
    text = page(learner, metrics.BuildInfo("learner", "m"))
    assert 'streamlearn_learner_steps_total{model="m",variant="v2"} 3.0' in text
    assert 'streamlearn_learner_redis_oom{model="m",variant="v2"} 0.0' in text
    version = metrics.package_version()
    assert f'streamlearn_build_info{{model="m",role="learner",version="{version}"}} 1.0' in text
    assert version != "unknown"  # installed: the checkout's pyproject version


def test_the_catalog_lists_the_labels_each_family_has():
    assert METRICS["streamlearn_build_info"].labels == ("model", "role", "version")
    assert METRICS["streamlearn_learner_version"].labels == ("model", "variant")
    assert METRICS["streamlearn_actor_http_responses_total"].labels == ("model", "code")
    assert METRICS["streamlearn_actor_ready"].kind == "gauge"
