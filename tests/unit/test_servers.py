"""Who the local HTTP servers answer: the metrics port's address setting and the
dashboard's accepted Host headers."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from streamlearn.config.settings import load_settings
from streamlearn.errors import ConfigError
from streamlearn.stack.dashboard import allowed_hosts


def test_metrics_host_defaults_to_loopback(monkeypatch):
    monkeypatch.delenv("STREAMLEARN_METRICS_HOST", raising=False)
    assert load_settings().metrics_host == "127.0.0.1"


@pytest.mark.parametrize("value", ["0.0.0.0", "10.1.2.3", "::", "[::1]"])
def test_metrics_host_takes_an_address(monkeypatch, value):
    monkeypatch.setenv("STREAMLEARN_METRICS_HOST", value)
    assert load_settings().metrics_host == value.strip("[]")


@pytest.mark.parametrize("value", ["example.com", "localhost", "0.0.0.0:9100", ""])
def test_a_bad_metrics_host_is_named_with_its_value(monkeypatch, value):
    monkeypatch.setenv("STREAMLEARN_METRICS_HOST", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "STREAMLEARN_METRICS_HOST: must be an IP address" in message
    assert f"got {value!r}" in message


def test_a_dashboard_on_another_address_answers_only_that_address():
    assert allowed_hosts("10.1.2.3", 8050) == {"10.1.2.3:8050"}
    assert "localhost:8050" in allowed_hosts("127.0.0.1", 8050)
    assert allowed_hosts("::1", 80) >= {"[::1]", "localhost", "localhost:80"}


# -- one client cannot hold the servers' threads ------------------------------------------


def metrics_server(cap: int, deadline_s: float) -> tuple[int, Callable[[], None]]:
    from streamlearn.observe.metrics import serve

    server = serve(0, host="127.0.0.1", max_connections=cap, request_deadline_s=deadline_s)

    def close() -> None:
        server.shutdown()
        server.server_close()

    return server.server_port, close


def dashboard_server(cap: int, deadline_s: float) -> tuple[int, Callable[[], None]]:
    from streamlearn.config import parse_config
    from streamlearn.config.settings import Settings
    from streamlearn.stack.dashboard import Dashboard

    settings = Settings(mqtt_url="mqtt://127.0.0.1:1", redis_url="redis://127.0.0.1:1")
    dashboard = Dashboard(
        parse_config({"models": {"d": {"inputs": 3}}}),
        settings,
        max_connections=cap,
        request_deadline_s=deadline_s,
    )
    dashboard.start(sample=False)
    return int(urlsplit(dashboard.url).port or 0), dashboard.close


class Tricklers:
    """Connections that each send a byte of their request line every 50 ms, for ever: a
    read timeout between reads never ends them."""

    def __init__(self, port: int, n: int) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]
        self.closed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        while not self._stop.wait(0.05):
            for i, sock in enumerate(self.socks):
                if i not in self.closed:
                    try:
                        sock.send(b"G")
                    except OSError:
                        self.closed.add(i)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.socks:
            sock.close()


def scrape(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize(("start", "path"), [(metrics_server, "/metrics"), (dashboard_server, "/")])
def test_trickling_clients_hold_a_bounded_number_of_threads_and_are_cut_off(start, path):
    """300 trickling connections held 300 threads of a metrics server. Now: at most `cap`
    connections open (a new one closes the oldest: a scrape takes milliseconds, so the
    oldest is a trickler), and a request not whole within the deadline is hung up on."""
    port, close = start(4, 1.0)
    before = threading.active_count()
    crowd = Tricklers(port, 12)
    try:
        time.sleep(0.5)
        assert threading.active_count() <= before + 1 + 2 * 4  # the trickler's own + the cap's
        assert scrape(port, path) == 200, "a legitimate scrape is answered meanwhile"
        assert len(crowd.closed) >= 12 - 4, "the oldest were closed to let new ones in"
    finally:
        crowd.close()
    few = Tricklers(port, 2)  # under the cap: only the deadline ends them
    try:
        deadline = time.monotonic() + 10
        while len(few.closed) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert few.closed == {0, 1}, "trickling requests are hung up on at their deadline"
    finally:
        few.close()
        close()


@pytest.mark.parametrize("start", [metrics_server, dashboard_server])
def test_a_request_of_endless_headers_is_hung_up_on_unanswered(start):
    """http.server takes 100 header lines of 64 KiB each: 6.5 MB held per connection. A
    request is at most `MAX_REQUEST_BYTES` read; past that the connection is closed."""
    from streamlearn.observe.httpd import MAX_REQUEST_BYTES

    port, close = start(4, 30.0)  # a deadline far off: only the byte bound can end it
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n")
        sent, reply = 0, b""
        try:
            while sent < 120 * 60_000:
                sock.sendall(b"X-Pad: " + b"p" * 60_000 + b"\r\n")
                sent += 60_009
        except OSError:
            pass  # hung up on while sending
        with contextlib.suppress(OSError):
            reply = sock.recv(100)
        assert reply == b"", "hung up on, not answered"
        assert sent <= MAX_REQUEST_BYTES + (8 << 20), "the server stopped reading early"
    finally:
        sock.close()
        close()
