"""The live dashboard, driven in headless Chromium against a running learner and ingest."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from streamlearn.config import parse_config
from streamlearn.stack.dashboard import Dashboard
from tests.conftest import ROOT

TOML = """
[models.d]
inputs = 3
task = "binary"

[models.d.learner]
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's
"""
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def wait_for_points(dashboard: Dashboard, n: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(len(p) >= n for p in dashboard.data()["models"].values()):
            return True
        time.sleep(0.1)
    return False


def chromium(tmp_path: Path, *args: str) -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is needed (run.sh / .ci/run install it)"
    result = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout


@pytest.fixture
def feed(settings, client_for):
    """A device streaming labelled samples until the test ends."""
    client = client_for("d")
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            batch = [
                {"x": [((i + k) % 7) - 3.0, 1.0, -1.0], "y": float((i + k) % 7 > 3)}
                for k in range(20)
            ]
            client.publish_samples([{"samples": batch}])
            i += 20
            stop.wait(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)


def test_dashboard_charts_get_data_points(start_role, settings, feed, tmp_path):
    start_role("learner", TOML)
    start_role("ingest", TOML)
    cfg = parse_config({"models": {"d": {"inputs": 3, "task": "binary"}}})
    dashboard = Dashboard(cfg, settings, every_s=0.5, token="run-token-" * 4)  # as `up` runs it
    url = dashboard.start()
    try:
        assert url.endswith("/?token=" + "run-token-" * 4)
        with pytest.raises(urllib.error.HTTPError, match="401"):  # another local user
            urllib.request.urlopen(url.split("?")[0] + "api/series", timeout=5)
        assert wait_for_points(dashboard, 6, 60)
        points = dashboard.data()["models"]["d"]
        assert points[-1]["samples_seen"] > 0 and points[-1]["version"] > 0
        assert any((p["samples_per_s"] or 0) > 0 for p in points)

        # the browser trades the printed address's token for a cookie, then draws
        dom = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", url)
        counts = [int(n) for n in re.findall(r'<svg data-chart="\d" data-points="(\d+)"', dom)]
        assert len(counts) == 6, dom[:2000]
        assert all(n > 0 for n in counts), f"every chart has points: {counts}"
        assert re.search(r'id="points" data-count="[1-9]', dom)
        assert re.search(r"learner online · last status \d+ s ago", dom), dom[:2000]
    finally:
        dashboard.close()


# -- a synthetic history: a start-up spike, then a steady rate --------------------------------

SPIKE_S, HISTORY_S = 6, 300


def history(now: float) -> list[list[dict]]:
    """Five minutes of snapshot rows, one a second: model `v` with two variants (catching
    up at 40,000 samples/s for six seconds, then about 500 samples/s), model `r` without
    variants, pinned to version 2 while version 3 is out."""
    seen = {"base": 0.0, "wide": 0.0}
    out = []
    for i in range(HISTORY_S):
        at = now - HISTORY_S + i + 1
        base = 40_000 if i < SPIKE_S else 500 + 120 * math.sin(i / 9)
        seen["base"] += base
        seen["wide"] += 0.7 * base
        variants = {
            name: {
                "updated_at": at - 0.5,
                "version": i,
                "samples_seen": int(n),
                "online_loss": 0.7 / (1 + i / (40 if name == "base" else 80)),
                "online_metric": 0.5 + 0.4 * i / HISTORY_S,
                "metric": "accuracy",
            }
            for name, n in seen.items()
        }
        last = i == HISTORY_S - 1
        v = {"model": "v", "at": at, **variants["base"], "champion": "base"}
        v.update(variants=variants, queue_length=1000 - 3 * i, pending=20, actors=[])
        v.update(status_age_s=3.0 if last else 0.5, learner_state="online")
        r = {"model": "r", "at": at, "updated_at": at - 1, "version": 1 + (i > 100) + (i > 200)}
        r.update(samples_seen=i * 200, online_loss=1 / (1 + i), online_metric=2 / (1 + i))
        r.update(metric="mae", queue_length=5, pending=0, latest_version=r["version"])
        r.update(pinned_version=2 if i > 200 else None, learner_state="online")
        out.append([v, r])
    return out


def attrs(tag: str) -> dict[str, str]:
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag))


def charts(dom: str, model: str) -> list[tuple[dict[str, str], str]]:
    """(the svg's attributes, its inner markup) of each chart of `model`'s card."""
    card = dom.split(f'id="model-{model}"')[1].split('id="model-')[0]
    return [(attrs(head), body) for head, body in re.findall(r"(<svg [^>]*>)(.*?)</svg>", card)]


def test_dashboard_axes_variants_and_a_spike_that_does_not_flatten_the_rate(settings, tmp_path):
    cfg = parse_config(
        {
            "models": {
                "v": {"inputs": 3, "task": "binary", "variants": {"wide": {"hidden": [64]}}},
                "r": {"inputs": 3, "task": "regression"},
            }
        }
    )
    dashboard = Dashboard(cfg, settings)
    for rows in history(time.time()):
        dashboard.record(rows)
    url = dashboard.start(sample=False)
    try:
        shot = tmp_path / "dashboard.png"
        chromium(
            tmp_path,
            "--virtual-time-budget=3000",
            "--window-size=1280,1150",
            f"--screenshot={shot}",
            url,
        )
        assert shot.exists() and shot.stat().st_size > 20_000
        kept = ROOT / "bench" / "results" / "dashboard.png"
        kept.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, kept)
        dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", url)
    finally:
        dashboard.close()

    units = {"v": "accuracy", "r": "mae"}
    for model in ("v", "r"):
        found = charts(dom, model)
        assert len(found) == 6, dom[:3000]
        for _, body in found:  # y tick labels, a unit, and a time axis ending at now
            assert len(re.findall(r'class="ytick"[^>]*>-?[\d.,]+k?<', body)) >= 3, body[:1500]
            assert ">now<" in body and ">-4 min<" in body, body[:1500]
        found_units = [re.search(r'class="unit">([^<]+)<', body)[1] for _, body in found]
        assert found_units == ["samples/s", "loss", units[model], "entries", "version", "seconds"]

    rate, body = charts(dom, "v")[0]
    lines = {
        attrs(t)["data-series"]: attrs(t)["points"] for t in re.findall(r"<polyline[^>]*>", body)
    }
    assert sorted(lines) == ["base", "wide"], "one line per variant"
    top, bottom = float(rate["data-plot-top"]), float(rate["data-plot-bottom"])
    steady = [
        (bottom - float(xy.split(",")[1])) / (bottom - top)
        for xy in lines["base"].split()[SPIKE_S + 2 :]
    ]
    steady.sort()
    # under a scale to the spike (40,000), 380-620 samples/s would hug the bottom (< 2 %)
    assert steady[len(steady) // 2] > 0.3, (
        f"the steady rate's median height {steady[len(steady) // 2]}"
    )
    assert steady[-1] - steady[0] > 0.2, "the steady rate's swings are visible"
    assert 'class="clipped"' in body and "off scale (max 40,000 samples/s)" in body

    assert "learner online · last status 3 s ago" in dom
    version = charts(dom, "r")[4][1]
    assert 'data-series="pinned"' in version and 'data-pinned="2"' in dom


# -- who may read it: requests naming another host are refused (DNS rebinding) ----------------


def get(port: int, path: str, host: str | None) -> tuple[int, bytes]:
    """(status, body) of GET `path` on 127.0.0.1:`port` with this Host header (None: none)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_a_request_naming_another_host_is_refused(settings):
    """A page of evil.example, its name rebound to 127.0.0.1, sends `Host: evil.example:PORT`:
    it gets 403 and no data; the dashboard's own address and the loopback names work."""
    dashboard = Dashboard(parse_config({"models": {"d": {"inputs": 3}}}), settings)
    dashboard.record([{"model": "d", "at": time.time(), "version": 7}])
    dashboard.start(sample=False)
    port = urlsplit(dashboard.url).port
    try:
        for path in ("/api/series", "/", "/dashboard.js"):
            for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", None):
                code, body = get(port, path, host)
                assert code == 403 and b'"version"' not in body, (path, host, code)
        for name in ("127.0.0.1", "localhost", "LocalHost", "[::1]"):
            host = f"{name}:{port}"
            code, body = get(port, "/api/series", host)
            assert code == 200 and b'"version": 7' in body, (host, code)
        assert dashboard.url == f"http://127.0.0.1:{port}/"
    finally:
        dashboard.close()
