"""HTTP servers for probes, scrapes and the dashboard that no client can hold: a bounded
number of connections, each with a deadline for its whole request.

`http.server` starts a thread per connection and times out only between reads, so a client
sending a byte every few seconds held a thread for ever. Here:

- at most `max_connections` are open; a new one beyond that closes the oldest (a probe or
  a scrape takes milliseconds, so the oldest open connection is one that trickles), so a
  flood of slow clients cannot keep a legitimate scrape, or a liveness probe, out;
- a connection has `request_deadline_s` from its accept for its request, however its bytes
  are spread (`_DeadlineReader`), and the reply gets what is left of it; it is closed once
  it sent `MAX_REQUEST_BYTES` (http.server alone reads up to 100 header lines of 64 KiB);
- threads: at most twice `max_connections` (those closed finish at once); beyond that a
  new connection is closed unread;
- with a `token`, what is not for probes asks for it (`DeadlineHandler.shows_token`):
  `streamlearn up` makes one per run, so another local user reads none of it.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 32  # open at once: probes and scrapes come a few, or a burst, at a time
REQUEST_DEADLINE_S = 5.0  # from accept to the request read whole
MAX_REQUEST_BYTES = 64 * 1024  # read of one request at most; a probe sends a few hundred


class BoundedServer(ThreadingHTTPServer):
    """A `ThreadingHTTPServer` of bounded connections and request deadlines; its handler
    must be a `DeadlineHandler`. One request per connection (HTTP/1.0)."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: connections wait there for the cap's say

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[DeadlineHandler],
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        if max_connections < 1 or request_deadline_s <= 0:
            raise ValueError(
                f"max_connections >= 1 and request_deadline_s > 0, got {max_connections} "
                f"and {request_deadline_s}"
            )
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.request_deadline_s = request_deadline_s
        self.closed_oldest = 0  # connections closed to let a newer one in
        self.refused = 0  # connections closed unread: too many threads still finishing
        self._slots = threading.BoundedSemaphore(2 * max_connections)  # threads
        self._open: dict[socket.socket, None] = {}  # oldest first
        self._lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        """On the accepting thread: make room, then hand the connection a thread."""
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        with self._lock:
            if len(self._open) >= self.max_connections:
                oldest = next(iter(self._open))
                del self._open[oldest]
                self.closed_oldest += 1
                _hang_up(oldest)
            self._open[request] = None
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: socket.socket) -> None:
        with self._lock:
            self._open.pop(request, None)
        self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-reply (closed, or hung up on) is not a traceback on stderr."""
        log.debug("http client %s: request failed", client_address, exc_info=True)


class DeadlineHandler(BaseHTTPRequestHandler):
    """Reads its request under the server's deadline; subclasses add `do_GET`."""

    server: BoundedServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # http.server's own reader: replaced by one that keeps the deadline
        deadline = time.monotonic() + self.server.request_deadline_s
        self.rfile = io.BufferedReader(
            _DeadlineReader(self.connection, deadline, MAX_REQUEST_BYTES)
        )

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Quiet: a probe every few seconds is not news."""

    def shows_token(
        self, token: str | None, cookie: str | None = None, given: str | None = None
    ) -> bool:
        """Whether the request shows `token` (always, without one): `Authorization: Bearer`,
        the cookie named `cookie`, or `given` (a query's); compared in constant time."""
        if token is None:
            return True
        shown = [] if given is None else [given]
        scheme, _, bearer = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer":
            shown.append(bearer.strip())
        if cookie is not None:
            jar = (c.strip().partition("=") for c in (self.headers.get("Cookie") or "").split(";"))
            shown += [value for name, _, value in jar if name == cookie]
        return any(hmac.compare_digest(s.encode(), token.encode()) for s in shown)

    def refuse(self, why: str) -> None:
        """401, asking for the bearer token."""
        body = f"{why}\n".encode()
        self.send_response(401)
        self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes until a deadline: each read waits only what is left of it, and
    one past it raises TimeoutError (which `http.server` answers by hanging up); a read
    past `limit` bytes raises ConnectionAbortedError (the server closes the connection)."""

    def __init__(self, sock: socket.socket, deadline: float, limit: int) -> None:
        self.sock = sock
        self.deadline = deadline
        self.left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not received whole within its deadline")
        if self.left <= 0:
            raise ConnectionAbortedError("the request is larger than a probe's or a page's")
        self.sock.settimeout(left)
        n = self.sock.recv_into(buffer, min(len(buffer), self.left))
        self.left -= n
        return n


def _hang_up(sock: socket.socket) -> None:
    """End a connection that another thread serves: its reads see the end at once."""
    with contextlib.suppress(OSError):  # already gone
        sock.shutdown(socket.SHUT_RDWR)
