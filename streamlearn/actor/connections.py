"""The HTTP door's connections: how many it holds, and which count against its cap.

aiohttp accepts every connection; the cap is this protocol factory's. At most `cap`
connections count; one more is answered 503 and closed, unread. With a token, the door asks
before it counts: a connection counts once a request on it showed the token (`prove`).
Until then it is one of at most `UNPROVEN_MAX` others, closed after `UNPROVEN_IDLE_S` idle;
when they are all taken, the oldest goes, not the newcomer. So clients without the token,
however many connections they open and keep, cannot take the cap from one that has it.

A peer (an IP address) holds at most `per_peer` of the counted connections, its next one
answered 503 and closed, and at most `UNPROVEN_PER_PEER` unproven ones, its own oldest
closed for a newer: so one host's flood, with or without the token, leaves the rest of the
cap and of the unproven room to the others. Behind a proxy every client is the proxy's address:
raise `actor.http_max_connections_per_peer` to the cap there.
Everything here runs in the door's event-loop thread.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable

UNPROVEN_MAX = 32  # with a token: connections that have not shown it yet, at most
UNPROVEN_PER_PEER = 8  # ...of one peer; its own oldest closed for a newer
UNPROVEN_IDLE_S = 2.0  # ...each closed when idle this long


class Connections:
    """The door's open connections: counted ones (at most `cap`) and, with a token, the
    unproven ones, oldest first."""

    def __init__(self, cap: int, token: bool, per_peer: int | None = None) -> None:
        self.cap = cap
        self.token = token
        self.per_peer = cap if per_peer is None else per_peer
        self.counted = 0  # open, of at most `cap`
        self.evicted = 0  # unproven connections closed for a newer one, or idle
        self.refused_peer = 0  # connections refused: their peer held `per_peer` counted ones
        self.busy_reason = f"too many connections (http_max_connections={cap})"
        self.busy = unavailable(self.busy_reason)
        self.peer_reason = (
            f"too many connections from one address (http_max_connections_per_peer={self.per_peer})"
        )
        self._unproven: dict[Counted, None] = {}
        self._by_handler: dict[object, Counted] = {}  # aiohttp's protocol -> its connection
        self._peers: Counter[str] = Counter()  # counted connections by peer

    def accept(self, make: Callable[[], asyncio.Protocol] | None) -> asyncio.Protocol:
        """The protocol of a new connection (aiohttp's `make()`, wrapped to be counted);
        past the cap, one that answers 503 and closes, reading nothing."""
        if make is None or (not self.token and self.counted >= self.cap):
            return Refused(self.busy)
        if not self.token:
            self.counted += 1
        return Counted(make(), self, proven=not self.token)

    def unproven(self, handler: object) -> bool:
        """Whether the connection of aiohttp's protocol `handler` has not shown the token."""
        conn = self._by_handler.get(handler)
        return conn is not None and not conn.proven

    def prove(self, handler: object) -> str | None:
        """The token shown on `handler`'s connection: counted from now on. The reason when
        the counted ones are at the cap, or its peer's at its share (the caller answers 503
        and closes it); None when counted."""
        conn = self._by_handler.get(handler)
        if conn is None or conn.proven:
            return None
        self._unproven.pop(conn, None)
        if self.counted >= self.cap:
            return self.busy_reason
        if self._peers[conn.peer] >= self.per_peer:
            self.refused_peer += 1
            return self.peer_reason
        conn.proven = True
        self.counted += 1
        self._peers[conn.peer] += 1
        return None

    def _opened(self, conn: Counted) -> bool:
        """Take in a connection made; False when its peer holds its share of the counted
        ones (the connection is then refused)."""
        if conn.proven:  # no token: counted from the start
            if self._peers[conn.peer] >= self.per_peer:
                self.refused_peer += 1
                return False
            self._peers[conn.peer] += 1
            self._by_handler[conn.inner] = conn
            return True
        self._by_handler[conn.inner] = conn
        own = [c for c in self._unproven if c.peer == conn.peer]
        if len(own) >= UNPROVEN_PER_PEER:  # a peer's flood closes its own oldest
            self._evict(own[0])
        elif len(self._unproven) >= UNPROVEN_MAX:  # the oldest unproven out, not the newcomer
            self._evict(next(iter(self._unproven)))
        self._unproven[conn] = None
        self._watch(conn)
        return True

    def _watch(self, conn: Counted) -> None:
        """Closes `conn` once it is idle `UNPROVEN_IDLE_S` and still unproven."""
        if conn not in self._unproven:
            return
        loop = asyncio.get_running_loop()
        idle = loop.time() - conn.active
        if idle >= UNPROVEN_IDLE_S:
            self._evict(conn)
        else:
            loop.call_later(UNPROVEN_IDLE_S - idle, self._watch, conn)

    def _evict(self, conn: Counted) -> None:
        del self._unproven[conn]
        self.evicted += 1
        conn.close()

    def _lost(self, conn: Counted) -> None:
        taken = self._by_handler.pop(conn.inner, None) is not None  # refused: never taken in
        if conn.proven:
            self.counted -= 1
            if taken:
                self._peers[conn.peer] -= 1
                if not self._peers[conn.peer]:
                    del self._peers[conn.peer]
        else:
            self._unproven.pop(conn, None)


class Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted in `Connections` while it is open;
    with a token, from its first request that shows it (`proven`)."""

    def __init__(self, inner: asyncio.Protocol, conns: Connections, proven: bool) -> None:
        self.inner = inner
        self.conns = conns
        self.proven = proven
        self.active = 0.0  # the loop's time of its last bytes in
        self.transport: asyncio.BaseTransport | None = None
        self.peer = ""  # its IP address
        self.refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.active = asyncio.get_running_loop().time()
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self.conns._opened(self):
            self.refused = True
            Refused(unavailable(self.conns.peer_reason)).connection_made(transport)
            return
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if not self.proven:
            self.active = asyncio.get_running_loop().time()
        self.inner.data_received(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool | None:
        return None if self.refused else self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns._lost(self)
        if not self.refused:
            self.inner.connection_lost(exc)


class Refused(asyncio.Protocol):
    """A connection past the cap: its 503 written, then closed, nothing read."""

    def __init__(self, response: bytes) -> None:
        self.response = response

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(self.response)
        transport.close()


def unavailable(reason: str) -> bytes:
    """A whole HTTP/1.1 503 response, `{"error": reason}`, that closes its connection."""
    body = json.dumps({"error": reason}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
