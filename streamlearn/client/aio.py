"""`AsyncClient`: the client for asyncio, the same connection as `Client`'s, awaited
instead of waited on (paho's network thread underneath, calls in `asyncio.to_thread`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from streamlearn.client.client import Client
from streamlearn.client.pending import ConnectionClosedError, Prediction


class AsyncClient:
    """`Client` for asyncio: the same connection, awaited instead of waited on."""

    def __init__(self, url: str | None = None, **options: Any) -> None:
        self._url, self._options = url, options
        self._client: Client | None = None

    async def __aenter__(self) -> AsyncClient:
        self._client = await asyncio.to_thread(Client, self._url, **self._options)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)

    @property
    def client(self) -> Client:
        """The thread-based client underneath (connected by `async with`)."""
        if self._client is None:
            raise ConnectionClosedError("not connected: use `async with AsyncClient(...)`")
        return self._client

    async def publish(self, model: str, x: Any, y: Any = None, **kw: Any) -> None:
        await asyncio.to_thread(self.client.publish, model, x, y, **kw)

    async def publish_many(self, model: str, xs: Any, ys: Any, ids: Any = None, **kw: Any) -> int:
        return await asyncio.to_thread(self.client.publish_many, model, xs, ys, ids, **kw)

    async def label(self, model: str, id: str, y: float, **kw: Any) -> None:
        await asyncio.to_thread(self.client.label, model, id, y, **kw)

    async def labels(self, model: str, pairs: Iterable[tuple[str, float]], **kw: Any) -> int:
        return await asyncio.to_thread(self.client.labels, model, list(pairs), **kw)

    async def predict(self, model: str, x: Any, **kw: Any) -> Prediction:
        """As `Client.predict`; cancelling the await forgets the request."""
        return await asyncio.wrap_future(self.client.predict_async(model, x, **kw))

    async def request(self, model: str, body: Mapping[str, Any], timeout: float = 10.0) -> dict:
        return await asyncio.wrap_future(self.client.request_async(model, body, timeout))
