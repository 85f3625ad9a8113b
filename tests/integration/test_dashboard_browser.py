"""The dashboard in headless Chromium shows hostile status strings as text.

Whoever can publish a model's status or write its Redis keys chooses the metric name, the
champion and the variant names the page shows. The config forbids markup in model and
variant names, so the markup comes the way a hostile publisher would send it: a retained
learner status on the broker and the model's champion and variants keys in Redis, read by
the dashboard's own sampler.
"""

from __future__ import annotations

import json
import re
import time

from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.stack.dashboard import Dashboard
from tests.conftest import eventually, plain_paho
from tests.integration.test_dashboard import chromium


def payload(where: str) -> str:
    """An element whose error handler, if it ever runs, marks the page's title."""
    return f"<img src=x onerror=\"document.title+='|pwned-{where}'\">"


def test_markup_in_status_strings_creates_no_element_and_runs_no_script(settings, redis, tmp_path):
    names = Names("d", settings.topic_prefix, settings.key_prefix)
    figures = {"updated_at": time.time(), "version": 1, "samples_seen": 10, "online_loss": 0.5}
    figures.update(online_metric=0.6, metric=payload("metric"))
    redis.set(names.champion_key, payload("champion"))
    redis.hset(names.variants_key, payload("variant"), json.dumps({**figures, "variant": "x"}))
    device = plain_paho(settings)
    status = json.dumps({**figures, "step": 1})
    device.publish(names.topic("status"), status, qos=1, retain=True).wait_for_publish(10)

    dashboard = Dashboard(parse_config({"models": {"d": {"inputs": 3}}}), settings, every_s=0.2)
    url = dashboard.start()
    try:

        def sampled() -> bool:
            points = dashboard.data()["models"]["d"]
            return bool(points) and points[-1]["metric"] == payload("metric")

        eventually(sampled, 30, "the hostile status sampled")
        point = dashboard.data()["models"]["d"][-1]
        assert point["champion"] == payload("champion")
        assert list(point["variants"]) == [payload("variant")]
        dom = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", url)
    finally:
        dashboard.close()
        device.publish(names.topic("status"), b"", qos=1, retain=True).wait_for_publish(10)
        device.loop_stop()
        device.disconnect()

    assert re.search(r'<svg data-chart="\d" data-points="[1-9]', dom), "the page drew"
    assert "<title>streamlearn</title>" in dom, "an onerror handler ran: " + dom[:300]
    assert not re.search(r"<img\b", dom, re.I), "markup from a status became an element"
    shown = payload("").replace("<", "&lt;").replace(">", "&gt;").split("pwned-")[0]
    for where in ("metric", "champion", "variant"):  # each shown as the text it is
        assert shown + f"pwned-{where}" in dom, (where, dom[:3000])
