"""What `bench._hostile_http` watches beside an attack: the actor's peak memory and
threads (`Usage`), and a legitimate HTTP client of another address (`LegitHttp`)."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

LEGIT_HTTP_FROM = "127.0.0.2"  # the legitimate HTTP client's own address: another host
LEGIT_HTTP_EVERY_S = 0.05


class Usage:
    """A process's peak resident memory and thread count, sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_mb, self.peak_threads = pid, 0.0, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> tuple[float, int]:
        rss, threads = 0.0, 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        return rss, threads

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            rss, threads = self.now()
            self.peak_mb = max(self.peak_mb, rss)
            self.peak_threads = max(self.peak_threads, threads)

    def __enter__(self) -> Usage:
        self.peak_mb, self.peak_threads = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


class LegitHttp:
    """A legitimate HTTP client beside an attack: `request` (bytes, HTTP/1.1) every
    `LEGIT_HTTP_EVERY_S` from its own address, each on a connection of its own; what it
    got (statuses) and its latencies."""

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self.address = (host, port)
        self.request = request.replace(b"\r\n", b"\r\nConnection: close\r\n", 1)
        self.statuses: Counter[int] = Counter()
        self.latencies_ms: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(LEGIT_HTTP_EVERY_S):
            start = time.monotonic()
            try:
                with socket.create_connection(self.address, 5, (LEGIT_HTTP_FROM, 0)) as sock:
                    sock.sendall(self.request)
                    head = sock.recv(1 << 16)
                status = int(head[9:12]) if head.startswith(b"HTTP/") else 0
            except OSError:
                status = 0
            self.statuses[status] += 1
            self.latencies_ms.append((time.monotonic() - start) * 1000)

    def __enter__(self) -> LegitHttp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)

    def answered(self) -> str:
        """`ok/sent`: requests answered 200, of those sent."""
        return f"{self.statuses[200]}/{self.statuses.total()}"

    def p99_ms(self) -> float | None:
        return float(np.percentile(self.latencies_ms, 99)) if self.latencies_ms else None
