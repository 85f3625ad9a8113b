"""A lean MQTT v5 load generator: open loop (a fixed send schedule) and closed loop.

What is measured is the service, so the generator must take as little of the shared CPU
as it can: paho spends ~200 us of Python per request and reply, here a request is a few
prebuilt bytes and a reply is parsed with slicing, about ten times less. It speaks just
enough MQTT v5 for that: CONNECT, SUBSCRIBE, PUBLISH with Response Topic and Correlation
Data (QoS 0 or 1; the broker's PUBACKs are read and ignored). Loopback brokers only.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


def _vbi(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("!H", len(b)) + b


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _vbi(len(body)) + body


@dataclass
class Reply:
    at: float  # time.monotonic() when it was read
    correlation: bytes
    payload: bytes


@dataclass
class LoadClient:
    """One connection: sends requests, collects the replies that come to `reply_topic`."""

    host: str
    port: int
    reply_topic: str = field(default_factory=lambda: f"bench/replies/{uuid.uuid4().hex[:8]}")
    replies: list[Reply] = field(default_factory=list)
    on_reply: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.sock = socket.create_connection((self.host, self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client_id = f"load-{uuid.uuid4().hex[:10]}"
        # CONNECT: MQTT 5, clean start, keep alive off, no properties.
        self.sock.sendall(_packet(0x10, _str("MQTT") + b"\x05\x02\x00\x00\x00" + _str(client_id)))
        first, body = self._read_one()
        if first >> 4 != 2 or body[1] != 0:
            raise ConnectionError(f"CONNACK refused: {body[1]:#x}")
        self.sock.sendall(_packet(0x82, b"\x00\x01\x00" + _str(self.reply_topic) + b"\x00"))
        first, body = self._read_one()
        if first >> 4 != 9 or body[-1] >= 0x80:
            raise ConnectionError("SUBACK refused")
        self._pid = 0
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def request(
        self, topic: str, payload: bytes, correlation: bytes, qos: int = 1, reply: bool = True
    ) -> bytes:
        """A PUBLISH packet (build ahead, send with `send`)."""
        props = b""
        if reply:
            props = b"\x08" + _str(self.reply_topic) + b"\x09" + _str(correlation)
        body = _str(topic)
        if qos:
            self._pid = self._pid % 65535 + 1
            body += struct.pack("!H", self._pid)
        return _packet(0x30 | qos << 1, body + _vbi(len(props)) + props + payload)

    def send(self, packets: bytes) -> None:
        self.sock.sendall(packets)

    def close(self) -> None:
        try:
            self.sock.sendall(b"\xe0\x00")  # DISCONNECT
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(2)

    # -- reading -------------------------------------------------------------------------

    def _read_one(self) -> tuple[int, bytes]:
        head = self._recv_exact(2)
        length, shift, byte = 0, 0, head[1]
        while True:
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            byte = self._recv_exact(1)[0]
        return head[0], self._recv_exact(length)

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return buf

    def _read_loop(self) -> None:
        buf = bytearray()
        while True:
            try:
                chunk = self.sock.recv(262144)
            except OSError:
                return
            if not chunk:
                return
            now = time.monotonic()
            buf += chunk
            pos = 0
            while len(buf) - pos >= 2:
                length, shift, i = 0, 0, pos + 1
                while i < len(buf):
                    length |= (buf[i] & 0x7F) << shift
                    shift += 7
                    i += 1
                    if not buf[i - 1] & 0x80:
                        break
                else:
                    break  # the length itself is incomplete
                if i + length > len(buf):
                    break
                if buf[pos] >> 4 == 3:  # PUBLISH; PUBACKs and the rest are ignored
                    self._on_publish(buf[pos], bytes(buf[i : i + length]), now)
                pos = i + length
            del buf[:pos]

    def _on_publish(self, first: int, body: bytes, now: float) -> None:
        (tlen,) = struct.unpack_from("!H", body)
        pos = 2 + tlen + (2 if first & 0x06 else 0)
        plen, shift = 0, 0
        while True:
            byte = body[pos]
            pos += 1
            plen |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        end, correlation = pos + plen, b""
        while pos < end:
            ident = body[pos]
            pos += 1
            if ident in (8, 9, 3):  # string or binary: two-byte length
                (n,) = struct.unpack_from("!H", body, pos)
                if ident == 9:
                    correlation = body[pos + 2 : pos + 2 + n]
                pos += 2 + n
            elif ident == 38:  # user property: two strings
                for _ in range(2):
                    (n,) = struct.unpack_from("!H", body, pos)
                    pos += 2 + n
            else:  # fixed-size properties that a broker may add
                pos += {1: 1, 2: 4, 35: 2, 11: 1}.get(ident, 0)
        self.replies.append(Reply(now, correlation, body[end:]))
        if self.on_reply is not None:
            self.on_reply()


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """A timed load without this process's cyclic collector, which runs before it instead.

    A full collection of the bench's own heap (it grows with every reply a run keeps, and
    grpcio leaves cycles) paused the load generator for 140-190 ms, and every request it
    was sending or timing then looked that slow: `bench.serve`'s MQTT p99 at 4,000/s read
    166-244 ms in 2 of 4 runs, each time three seconds after a gRPC stream's load.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def without_collection(load: Callable[..., T]) -> Callable[..., T]:
    """`load`, run inside `no_collection`."""

    @functools.wraps(load)
    def run(*args: object, **kwargs: object) -> T:
        with no_collection():
            return load(*args, **kwargs)

    return run


def open_loop(
    client: LoadClient, packets: Sequence[bytes], rate: float, start_delay_s: float = 0.05
) -> list[float]:
    """Send `packets[i]` at `t0 + i / rate` whatever the replies; returns those times.

    Latency is measured from these scheduled times, so a late sender (or a stalled
    service) cannot hide the wait it caused (no coordinated omission).
    """
    t0 = time.monotonic() + start_delay_s
    scheduled = [t0 + i / rate for i in range(len(packets))]
    i = 0
    while i < len(packets):
        now = time.monotonic()
        if scheduled[i] > now:
            time.sleep(scheduled[i] - now)
            now = time.monotonic()
        due = i
        while due < len(packets) and scheduled[due] <= now:
            due += 1
        client.send(b"".join(packets[i:due]))
        i = due
    return scheduled


def closed_loop(
    client: LoadClient, make: Callable[[int], bytes], window: int, duration_s: float
) -> int:
    """Keep `window` requests outstanding for `duration_s`; returns how many were sent."""
    slots = threading.Semaphore(window)
    client.on_reply = slots.release
    end = time.monotonic() + duration_s
    sent = 0
    while time.monotonic() < end:
        if not slots.acquire(timeout=0.5):
            continue
        client.send(make(sent))
        sent += 1
    client.on_reply = None
    return sent
