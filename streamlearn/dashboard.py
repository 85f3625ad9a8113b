"""A small live dashboard for `streamlearn up`, served on localhost.

A sampler thread records, once a second, each model's learner status and queue figures;
the page (plain HTML and JS shipped in the package, no build step) polls `/api/series`
and draws the curves on canvas.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

import redis

from streamlearn.config import AppConfig, Settings
from streamlearn.monitor import StatusMonitor, snapshot

log = logging.getLogger(__name__)

_STATIC = {
    "/": ("dashboard.html", "text/html"),
    "/dashboard.js": ("dashboard.js", "text/javascript"),
}


class Dashboard:
    def __init__(
        self,
        cfg: AppConfig,
        settings: Settings,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        every_s: float = 1.0,
        keep: int = 900,
    ) -> None:
        self.cfg = cfg
        self.settings = settings
        self.every_s = every_s
        self.series: dict[str, deque[dict[str, Any]]] = {m: deque(maxlen=keep) for m in cfg.models}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> str:
        for target in (self._server.serve_forever, self._sample_loop):
            thread = threading.Thread(target=target, daemon=True, name="dashboard")
            thread.start()
            self._threads.append(thread)
        return self.url

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def data(self) -> dict[str, Any]:
        with self._lock:
            return {"models": {m: list(points) for m, points in self.series.items()}}

    def _sample_loop(self) -> None:
        monitor = None
        store = redis.Redis.from_url(self.settings.redis, socket_timeout=5)
        while not self._stop.is_set():
            try:
                monitor = monitor or StatusMonitor(self.cfg, self.settings)
                self.record(snapshot(monitor, store))
            except Exception as exc:  # a dashboard hiccup must never stop the stack
                log.debug("dashboard sample failed: %s", exc)
            self._stop.wait(self.every_s)
        if monitor:
            monitor.close()

    def record(self, rows: list[dict[str, Any]]) -> None:
        """Append one point per model; samples/s comes from the learner's own timestamps."""
        keys = (
            "at",
            "updated_at",
            "version",
            "step",
            "samples_seen",
            "online_loss",
            "online_metric",
            "metric",
            "queue_length",
            "pending",
            "deadletters",
            "champion",
            "latest_version",
            "pinned_version",
        )
        with self._lock:
            for row in rows:
                points = self.series[row["model"]]
                point = {k: row.get(k) for k in keys}
                point["actors"] = len(row.get("actors", []))
                prev = points[-1] if points else None
                point["samples_per_s"] = prev.get("samples_per_s") if prev else None
                if prev and None not in (prev["updated_at"], point["updated_at"]):
                    dt = point["updated_at"] - prev["updated_at"]
                    if dt > 0:
                        point["samples_per_s"] = (point["samples_seen"] - prev["samples_seen"]) / dt
                points.append(point)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?")[0]
                if path == "/api/series":
                    body, kind = json.dumps(dashboard.data()).encode(), "application/json"
                elif path in _STATIC:
                    name, kind = _STATIC[path]
                    body = resources.files("streamlearn.static").joinpath(name).read_bytes()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        return Handler
