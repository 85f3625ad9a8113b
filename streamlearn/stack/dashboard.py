"""A small live dashboard for `streamlearn up`, served on localhost.

A sampler thread records, once a second, each model's learner status and queue figures
(and, for a model with variants, each variant's figures from `standings.read_standings`);
the page (plain HTML and JS shipped in the package, no build step, no external library)
polls `/api/series` and draws SVG charts with axes, one line per variant, and a y scale
that a start-up spike does not flatten (see dashboard.js, `scale`).

Every string the page shows from a status is set as text, never parsed as HTML (a model's
status is written by whoever can publish to its topics). The server answers only requests
whose Host header names the address it is bound to (for loopback also `localhost`): a page
of another site whose name is made to resolve to 127.0.0.1 (DNS rebinding) sends its own
name and is refused, so it cannot read `/api/series`. At most `max_connections` are open, each
with `request_deadline_s` for its request (`streamlearn.observe.httpd`).

With a `token` (`streamlearn up` makes one per run), every path asks for it, so another
local user reads nothing: the address `up` prints carries it (`/?token=...`), which the
page trades for a cookie of this port (HttpOnly, SameSite=Strict) and drops from the
address bar; a script may send `Authorization: Bearer` instead.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections import deque
from importlib import resources
from typing import Any, cast
from urllib.parse import parse_qs, quote

from streamlearn.config.app import AppConfig
from streamlearn.config.settings import Settings
from streamlearn.observe.httpd import MAX_CONNECTIONS, BoundedServer, DeadlineHandler
from streamlearn.observe.monitor import StatusMonitor, snapshot
from streamlearn.store import redis_client

log = logging.getLogger(__name__)

_STATIC = {
    "/": ("dashboard.html", "text/html"),
    "/dashboard.js": ("dashboard.js", "text/javascript"),
}


REQUEST_DEADLINE_S = 10.0  # from accept to a request read whole
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")

_KEYS = (
    "at",
    "updated_at",
    "status_age_s",
    "learner_state",
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
    "served",  # the served score: labels joined to served predictions (`store.pending`)
)
# Each variant's figures, as its learner last wrote them in the model's variants hash.
_VARIANT_KEYS = ("updated_at", "version", "samples_seen", "online_loss", "online_metric", "metric")


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers a server bound to `host`:`port` answers: the address itself, and
    for a loopback address the loopback names too; each with the port, or bare on port 80.

    >>> sorted(allowed_hosts("127.0.0.1", 8050))
    ['127.0.0.1:8050', '[::1]:8050', 'localhost:8050']
    >>> sorted(allowed_hosts("192.168.1.5", 80))
    ['192.168.1.5', '192.168.1.5:80']
    """
    address = ipaddress.ip_address(host)
    shown = f"[{address}]" if address.version == 6 else str(address)
    names = {shown, *LOOPBACK_NAMES} if address.is_loopback else {shown}
    return frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))


def samples_per_s(prev: dict[str, Any] | None, point: dict[str, Any]) -> float | None:
    """Samples trained per second between two reports, by the learner's own clock; the
    previous rate while the report has not changed.

    >>> samples_per_s({"updated_at": 1, "samples_seen": 0}, {"updated_at": 3, "samples_seen": 200})
    100.0
    """
    if prev is None:
        return None
    t0, t1 = prev.get("updated_at"), point.get("updated_at")
    n0, n1 = prev.get("samples_seen"), point.get("samples_seen")
    if all(isinstance(v, int | float) for v in (t0, t1, n0, n1)) and t1 > t0:  # type: ignore[operator]
        return (n1 - n0) / (t1 - t0)  # type: ignore[operator]
    return prev.get("samples_per_s")


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
        max_connections: int = MAX_CONNECTIONS,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        token: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.token = token
        self.settings = settings
        self.every_s = every_s
        self.series: dict[str, deque[dict[str, Any]]] = {m: deque(maxlen=keep) for m in cfg.models}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = BoundedServer(
            (host, port),
            self._handler(),
            max_connections=max_connections,
            request_deadline_s=request_deadline_s,
        )
        self.hosts = allowed_hosts(host, self._server.server_address[1])
        self.cookie = f"streamlearn-{self._server.server_address[1]}"  # a port's own
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """The page's address, with the token when there is one."""
        host, port = cast(tuple[str, int], self._server.server_address[:2])  # TCP
        asks = f"?token={quote(self.token)}" if self.token else ""
        return f"http://{host}:{port}/{asks}"

    def start(self, *, sample: bool = True) -> str:
        """Serve the page; `sample=False` serves only what `record` is given (tests)."""
        targets = [self._server.serve_forever] + ([self._sample_loop] if sample else [])
        for target in targets:
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
        store = redis_client.connect(self.settings.redis, socket_timeout=5)
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
        with self._lock:
            for row in rows:
                points = self.series[row["model"]]
                prev = points[-1] if points else None
                point: dict[str, Any] = {k: row.get(k) for k in _KEYS}
                point["actors"] = len(row.get("actors", []))
                point["samples_per_s"] = samples_per_s(prev, point)
                if point["status_age_s"] is None and isinstance(point["updated_at"], int | float):
                    point["status_age_s"] = round(max(0.0, row["at"] - point["updated_at"]), 1)
                before = (prev or {}).get("variants") or {}
                point["variants"] = {}
                for name, doc in (row.get("variants") or {}).items():
                    if isinstance(doc, dict):
                        figures = {k: doc.get(k) for k in _VARIANT_KEYS}
                        figures["samples_per_s"] = samples_per_s(before.get(name), figures)
                        point["variants"][name] = figures
                points.append(point)

    def _handler(self) -> type[DeadlineHandler]:
        dashboard = self

        class Handler(DeadlineHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if (self.headers.get("Host") or "").lower() not in dashboard.hosts:
                    self.send_error(403, "Host not allowed: open the dashboard by its address")
                    return
                path, _, query = self.path.partition("?")
                given = parse_qs(query).get("token", [None])[0]
                if not self.shows_token(dashboard.token, dashboard.cookie, given):
                    self.refuse("open the dashboard at the address `streamlearn up` printed")
                    return
                if given is not None and path == "/" and dashboard.token is not None:
                    self.send_response(303)  # the token into a cookie, out of the address bar
                    self.send_header("Location", "/")
                    self.send_header(
                        "Set-Cookie",
                        f"{dashboard.cookie}={dashboard.token}; HttpOnly; SameSite=Strict; Path=/",
                    )
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path == "/api/series":
                    body, kind = json.dumps(dashboard.data()).encode(), "application/json"
                elif path in _STATIC:
                    name, kind = _STATIC[path]
                    body = resources.files("streamlearn.stack.static").joinpath(name).read_bytes()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
