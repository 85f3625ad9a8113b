"""The actor's second door: the Open Inference Protocol over HTTP (`actor.http_port`).

    GET  /v2/health/live, /v2/health/ready, /v2
    GET  /v2/models/{model}[/versions/{v}]          metadata: inputs, output, versions kept
    GET  /v2/models/{model}[/versions/{v}]/ready
    GET  /v2/models/{model}[/versions/{v}]/config   the model as Triton's tools read it
    POST /v2/models/{model}[/versions/{v}]/infer    `{v}`: a version, a label, `latest`
    POST /v2/models/{model}/labels                  an extension: labels that come later

The documents are `streamlearn.actor.oip`'s. An inference request is read in the door's
thread and queued in the actor's inbox beside the MQTT requests, under the same bounds, an
address having a client's share: a full inbox sheds it at once (503), and it waits at most
`request_deadline_ms` (504; a request's own `timeout` may shorten it). The serving loop
batches both doors' requests together and hands an HTTP request's reply back to its
waiting handler. A one-row request with an `id`
keeps its prediction for its label in its caller's namespace (`names.http_owner`: its
token's, else its address's), which only that caller's labels route joins
(`streamlearn.actor.labels`), under the same body bound as MQTT's label messages.

A client costs the door no more than a valid request: at most `actor.http_max_connections`
connections (one more is answered 503 and closed, unread), each body refused unread when
its Content-Length passes the model's largest valid request (`streamlearn.actor.bodies`,
413) or the inbox has no room for it (503), read whole within `actor.http_body_timeout_ms`
(408, connection closed), scanned for width before it is decoded (400). With a bearer
token set (`STREAMLEARN_HTTP_TOKEN[_FILE]`) every route but the two health probes asks
for it (401). Every error is the protocol's `{"error": ...}`, counted by status; Redis
unreachable (the versions metadata lists) is a 503 that says so.

With a token, the door asks before it counts, and one address holds at most its share
(`actor.http_max_connections_per_peer`; `streamlearn.actor.connections`).

aiohttp, chosen by measurement (`bench.serve`'s HTTP case, against uvicorn and the
standard library's threading server: docs/learning-log.md, "Serving"). It runs its own
event loop in one thread, so it adds one thread to the actor whatever the connections.
aiohttp accepts every connection: the cap is `Connections`, the door's protocol factory.
An idle keep-alive connection, or one whose headers do not arrive, is closed after `KEEPALIVE_S`.

A stopping actor drains the door (`drain`, `streamlearn.actor.shutdown`): not ready, no new
connection, and each request in progress or still to come on an open connection answered
with `Connection: close`, so that a client's next request opens one to another actor.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis
from aiohttp import web

from streamlearn.actor import oip
from streamlearn.actor.bodies import BodyBounds
from streamlearn.actor.connections import Connections, Refused
from streamlearn.actor.handover import Handover
from streamlearn.actor.inbox import Pending
from streamlearn.actor.labels import DoorLabels
from streamlearn.contract.names import http_owner
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.schemas import version_ref
from streamlearn.errors import PayloadError

if TYPE_CHECKING:
    from streamlearn.actor.loop import Actor

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0  # an idle keep-alive connection is closed after this
OPEN_PATHS = frozenset({"/v2/health/live", "/v2/health/ready"})  # kubelet probes: no token
_JSON = "application/json"
_SHED = "the actor's queue is full: request shed, retry later"


class HttpDoor:
    """Serves one actor's model over the Open Inference Protocol, in a thread of its own."""

    def __init__(self, actor: Actor, host: str, port: int, token: str | None = None) -> None:
        self.actor = actor
        self.cfg = actor.cfg
        self.host = host
        self.port = port
        self.parser = PayloadParser(actor.cfg)
        self.bounds = BodyBounds(actor.cfg)
        self.token = None if token is None else token.encode()
        self.labels = DoorLabels(actor.cfg, actor.keeper.store.redis, actor.names)
        self.responses: dict[str, int] = {}  # by status code
        self.handover = Handover()  # replies from the serving loop's thread
        self.conns = Connections(
            self.cfg.actor.http_max_connections,
            token is not None,
            self.cfg.actor.http_max_connections_per_peer,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.draining = False  # the actor stops: answer, then close each connection
        self.active = 0  # requests in progress (the loop's thread counts them)

    def start(self) -> int:
        """Listen; returns the port (the one bound, for port 0). Raises OSError if taken."""
        loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(
            self._app(),
            handle_signals=False,
            access_log=None,
            keepalive_timeout=KEEPALIVE_S,
            lingering_time=0,  # a body refused unread is not read after its answer: closed
        )
        loop.run_until_complete(self._runner.setup())
        try:
            self._listener = loop.run_until_complete(
                loop.create_server(self._accept, self.host, self.port, backlog=128)
            )
        except OSError:
            loop.run_until_complete(self._runner.cleanup())
            loop.close()
            raise
        self.port = self._listener.sockets[0].getsockname()[1]
        self._loop = self.handover.loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="http-door", daemon=True)
        self._thread.start()
        return self.port

    def drain(self) -> None:
        """Not ready, and no new connection: a client is refused at once and goes elsewhere."""
        self.draining = True
        loop, listener = self._loop, self._listener
        if loop is not None and listener is not None:
            loop.call_soon_threadsafe(listener.close)  # the open connections stay

    def busy(self) -> bool:
        """Whether a request is in progress (its reply not sent yet)."""
        return self.active > 0

    def stop(self) -> None:
        """Stop listening and close the connections (requests queued still get answered)."""
        loop, runner, listener = self._loop, self._runner, self._listener
        if loop is None or runner is None or listener is None:
            return
        loop.call_soon_threadsafe(listener.close)
        try:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5.0)
        except Exception as exc:  # stopping anyway
            log.warning("closing the HTTP door: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5.0)
        loop.close()
        self._loop = self.handover.loop = None

    def _accept(self) -> asyncio.Protocol:
        """The protocol of a new connection (the loop's thread): `Connections.accept`."""
        server = None if self._runner is None else self._runner.server
        protocol = self.conns.accept(server)
        if isinstance(protocol, Refused):
            self._counted(503)
        return protocol

    def _counted(self, status: int) -> None:
        key = str(status)
        self.responses[key] = self.responses.get(key, 0) + 1

    # -- routes ----------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=self.cfg.ingest.max_payload_bytes)
        model = "/v2/models/{model}"
        versioned = model + "/versions/{version}"
        app.router.add_get("/v2/health/live", self._live)
        app.router.add_get("/v2/health/ready", self._ready)
        app.router.add_get("/v2", self._server)
        for path in (model, versioned):
            app.router.add_get(path, self._metadata)
            app.router.add_get(path + "/ready", self._model_ready)
            app.router.add_get(path + "/config", self._config)
            app.router.add_post(path + "/infer", self._infer)
        app.router.add_post(model + "/labels", self._labels)
        app.middlewares.extend([self._count, self._authorize])
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every answer counted by status; every error the protocol's JSON; while the door
        drains, every answer closes its connection."""
        self.active += 1
        try:
            response = await handler(request)
        except PayloadError as exc:  # the body, or the path's version or label
            response = self._error(413 if exc.kind == "too_large" else 400, str(exc))
        except web.HTTPException as exc:  # 404 of an unknown path, 405
            response = self._error(exc.status, exc.reason)
        except redis.RedisError as exc:  # the versions kept, asked of Redis
            response = self._error(503, f"Redis unreachable: {exc}")
        except Exception:
            log.exception("HTTP request %s %s", request.method, request.path)
            response = self._error(500, "internal error")
        finally:
            self.active -= 1
        if self.draining:
            response.force_close()  # `Connection: close`: its client reconnects elsewhere
        self._counted(response.status)
        return response

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """With a token set, `Authorization: Bearer <token>` (compared in constant time) on
        every route but the health probes; before any body is read."""
        if self.token is None:
            return await handler(request)
        unproven = self.conns.unproven(request.protocol)
        if request.path in OPEN_PATHS:
            response = await handler(request)
            if unproven:  # a probe costs a connection of its own, not one kept
                response.force_close()
            return response
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token):
            refused = self.conns.prove(request.protocol)
            if refused is None:
                return await handler(request)
            response = self._error(503, refused)
            response.force_close()
            return response
        response = self._error(401, "a bearer token is required: Authorization: Bearer <token>")
        response.headers["WWW-Authenticate"] = "Bearer"
        if unproven:
            response.force_close()
        return response

    async def _live(self, _request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def _ready(self, _request: web.Request) -> web.Response:
        ready = self.actor.answers and not self.draining
        return web.json_response({"ready": ready}, status=200 if ready else 503)

    async def _server(self, _request: web.Request) -> web.Response:
        return web.json_response(oip.server_metadata())

    async def _metadata(self, request: web.Request) -> web.Response:
        problem = self._unknown(request)
        if problem is not None:
            return problem
        kept = await asyncio.to_thread(self.actor.versions.store.versions)
        return web.json_response(oip.model_metadata(self.cfg, kept))

    async def _config(self, request: web.Request) -> web.Response:
        problem = self._unknown(request)
        return problem or web.json_response(oip.model_config(self.cfg))

    async def _model_ready(self, request: web.Request) -> web.Response:
        problem = self._unknown(request)
        if problem is not None:
            return problem
        ready = self.actor.answers and not self.draining
        if ready and "version" in request.match_info:
            wanted = self._version(request)
            if isinstance(wanted, int):
                ready = wanted in await asyncio.to_thread(self.actor.versions.store.versions)
        return web.json_response(
            {"name": self.cfg.name, "ready": ready}, status=200 if ready else 503
        )

    async def _infer(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        problem = self._unknown(request)
        if problem is not None:
            return problem
        version = self._version(request)
        header = _int(request.headers.get("Inference-Header-Content-Length"))
        limit = self.bounds.limit(header)
        declared = request.content_length
        if declared is not None and declared > limit:
            raise PayloadError(
                f"a body of {declared} bytes: a request of model {self.cfg.name!r} holds at "
                f"most {limit}; refused unread",
                "too_large",
            )
        peer = request.remote or ""  # its address: a client's share of the inbox
        if not self.actor.inbox.admits(declared or 0, peer):
            return self._error(503, _SHED)
        try:
            body = await self._read(request, limit)
        except TimeoutError:
            timeout_ms = self.cfg.actor.http_body_timeout_ms
            return self._error(408, f"body not received within http_body_timeout_ms={timeout_ms:g}")
        x, rid, wanted = oip.read_infer(self.cfg, self.parser, body, header)
        replied: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        def answer(reply: dict[str, Any]) -> None:  # the serving loop's thread
            self.handover.give(replied, reply)

        pending = Pending(
            arrived, x, True, rid, None, None, version=version, answer=answer, peer=peer
        )
        pending.client = http_owner(self.token, peer)  # its id's namespace, for its label
        if wanted.timeout_s is not None:  # its own, when shorter than request_deadline_ms
            pending.deadline = arrived + wanted.timeout_s
        if not self.actor.inbox.offer(pending, len(body)):
            return self._error(503, _SHED)
        wait_s = pending.deadline - time.monotonic() + 1.0  # the loop answers expiry itself
        try:
            async with asyncio.timeout(wait_s):  # (no task of its own, as wait_for makes)
                reply = await replied
        except TimeoutError:
            return self._error(504, "no reply within the request's deadline")
        if "error" in reply:
            return self._error(oip.status_of(reply["error"]), reply["error"])
        doc, tail = oip.response(self.cfg, reply, rid, wanted)
        if not wanted.binary:
            return _json(doc)
        head = json.dumps(doc).encode()
        response = web.Response(body=head + tail, content_type="application/octet-stream")
        response.headers["Inference-Header-Content-Length"] = str(len(head))
        return response

    async def _labels(self, request: web.Request) -> web.Response:
        """Labels for the caller's predictions (`streamlearn.actor.labels`): bounded as a
        label message on MQTT (`ingest.max_payload_bytes`: 413), read within
        `http_body_timeout_ms` (408), refused while the learner is behind (503)."""
        problem = self._unknown(request)
        if problem is not None:
            return problem
        limit = self.cfg.ingest.max_payload_bytes
        declared = request.content_length
        if declared is not None and declared > limit:
            raise PayloadError(
                f"a body of {declared} bytes: a labels body of model {self.cfg.name!r} holds "
                f"at most {limit} (ingest.max_payload_bytes); refused unread",
                "too_large",
            )
        try:
            body = await self._read(request, limit)
        except TimeoutError:
            timeout_ms = self.cfg.actor.http_body_timeout_ms
            return self._error(408, f"body not received within http_body_timeout_ms={timeout_ms:g}")
        held = await asyncio.to_thread(self.labels.held_back)
        if held is not None:
            return self._error(503, held)
        owner = http_owner(self.token, request.remote or "")
        return _json(await asyncio.to_thread(self.labels.take, body, owner))

    # -- helpers ---------------------------------------------------------------------------

    async def _read(self, request: web.Request, limit: int) -> bytes:
        """The body, whole within `http_body_timeout_ms` (TimeoutError) and of at most
        `limit` bytes: a chunked one is read no further (PayloadError `too_large`)."""
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.cfg.actor.http_body_timeout_ms / 1000):
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > limit:
                        raise PayloadError(
                            f"a body of more than {limit} bytes: a request of model "
                            f"{self.cfg.name!r} holds at most {limit}; read no further",
                            "too_large",
                        )
                    chunks.append(chunk)
        except (ConnectionError, web.RequestPayloadError) as exc:  # a client gone, bad chunks
            raise PayloadError(f"the body could not be read: {exc}") from None
        return b"".join(chunks)

    def _unknown(self, request: web.Request) -> web.Response | None:
        name = request.match_info["model"]
        if name == self.cfg.name:
            return None
        return self._error(404, f"unknown model {name!r}; this actor serves {self.cfg.name!r}")

    def _version(self, request: web.Request) -> int | str | None:
        """The path's version or label; PayloadError when it is neither."""
        text = request.match_info.get("version")
        return None if text is None else version_ref(text)

    def _error(self, status: int, reason: str) -> web.Response:
        return _json({"error": reason}, status)


def _json(doc: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(doc).encode(), status=status, content_type=_JSON)


def _int(header: str | None) -> int | None:
    if header is None:
        return None
    try:
        return int(header)
    except ValueError:
        raise PayloadError(f"Inference-Header-Content-Length: a number, got {header!r}") from None
