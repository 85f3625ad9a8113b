"""The actor's third door: the Open Inference Protocol over gRPC (`actor.grpc_port`).

    inference.GRPCInferenceService/ServerLive, ServerReady      the probes: no token
    .../ServerMetadata, ModelMetadata, ModelReady, ModelConfig   the HTTP door's documents
    .../ModelInfer      inputs as `contents` or `raw_input_contents`; `model_version`: a
                        version, a label, `latest`
    .../ModelStreamInfer  ModelInfer's requests on one call, each answered on it
                        (`grpc_stream`: a refused one's error too, the stream goes on)

The service is upstream's (`streamlearn.actor.proto`: Triton's and KServe's names and field
numbers), so tritonclient.grpc and stubs generated from their .proto, in any language, call
it. A ModelInfer request is read as the HTTP door reads its JSON (`grpc_messages`, then
`oip.read_document`: the same checks, the same messages) and queued in the actor's inbox
beside the other doors' requests, under the same bounds, deadline (or the call's own, when
sooner) and shares (an address's, the HTTP door's); the serving loop batches them together.
Its output comes back in `raw_output_contents`, as Triton sends it. Errors are status codes
with the HTTP door's messages (`CODES`), each counted by code.

Bounds, as far as grpcio lets a server set them (`grpc.aio`, with its event loop in a
thread of its own, as the HTTP door's): a message longer than the model's largest valid
request (`BodyBounds`) is refused by grpcio as it arrives (RESOURCE_EXHAUSTED), a reply
longer than `actor.max_reply_bytes` too; at most `actor.grpc_max_connections` connections
(grpcio closes one more as it accepts it), each closed after `IDLE_S` without a call; at
most `actor.grpc_max_rpcs` calls at once (RESOURCE_EXHAUSTED), of one address
`actor.grpc_max_rpcs_per_peer` (UNAVAILABLE), twice as many streams a connection. Every
method is served as request-streaming, so that the door acts before a message is read:
with a token, a call without it is refused unread (UNAUTHENTICATED), as is one past its
address's share or, for ModelInfer, one the inbox has no room for; a message not whole
within `actor.grpc_message_timeout_ms` ends its call (DEADLINE_EXCEEDED).

What grpcio does not let a server do: count a connection only once it showed the token
(connections without it count against the cap until idle `IDLE_S`), or cap the
connections of one address (the door caps its calls instead).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import Message

from streamlearn.actor import grpc_messages as messages
from streamlearn.actor import grpc_stream, oip
from streamlearn.actor.bodies import BodyBounds
from streamlearn.actor.grpc_messages import CODES, GRACE_S, SHED, Call, Code, Refused
from streamlearn.actor.grpc_stream import Stream
from streamlearn.actor.handover import Handover
from streamlearn.actor.inbox import Pending
from streamlearn.actor.proto import grpc_service_pb2 as pb
from streamlearn.contract.names import http_owner
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.schemas import version_ref

if TYPE_CHECKING:
    from streamlearn.actor.loop import Actor

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"
OPEN = frozenset({"ServerLive", "ServerReady"})  # the probes: no token
IDLE_S = 15.0  # a connection without a call is closed after this (the HTTP door's keep-alive)
METADATA_BYTES = 8192  # a call's metadata, at most (grpcio's default, set to be seen)
Method = Callable[[Any, Call], Awaitable[Message]]


class GrpcDoor:
    """Serves one actor's model over the protocol's gRPC service, in a thread of its own."""

    def __init__(self, actor: Actor, host: str, port: int, token: str | None = None) -> None:
        self.actor = actor
        self.cfg = actor.cfg
        self.host = host
        self.port = port
        self.parser = PayloadParser(actor.cfg)
        self.max_message_bytes = BodyBounds(actor.cfg).limit(None)
        self.token = None if token is None else token.encode()
        self.per_peer = self.cfg.actor.grpc_max_rpcs_per_peer
        self.responses: dict[str, int] = {}  # by status code's name
        self._calls: Counter[str] = Counter()  # calls in progress by address
        self.calls = 0  # in progress, streams included: their sum (read at scrape time)
        self.handover = Handover()  # replies from the serving loop's thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None  # grpc.aio.Server
        self._thread: threading.Thread | None = None
        self.draining = False  # the actor stops: new calls refused, those in progress answered

    def start(self) -> int:
        """Listen; returns the port (the one bound, for port 0). Raises OSError if taken."""
        loop = asyncio.new_event_loop()
        try:
            self.port = loop.run_until_complete(self._listen())
        except BaseException:
            loop.close()
            raise
        self._loop = self.handover.loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="grpc-door", daemon=True)
        self._thread.start()
        return self.port

    def drain(self) -> None:
        """Not ready; new calls refused (GOAWAY: a client's next call goes to another actor)
        and those in progress answered, for at most `actor.drain_s`."""
        self.draining = True
        if self._loop is not None and self._server is not None:
            stopping = self._server.stop(self.cfg.actor.drain_s)
            asyncio.run_coroutine_threadsafe(stopping, self._loop)

    def busy(self) -> bool:
        return self.calls > 0

    def stop(self) -> None:
        """Stop listening and end the calls in progress."""
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(5.0)
        except Exception as exc:  # stopping anyway
            log.warning("closing the gRPC door: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5.0)
        loop.close()
        self._loop = self.handover.loop = None

    async def _listen(self) -> int:
        actor = self.cfg.actor
        options = [
            ("grpc.so_reuseport", 0),  # a port taken is an error, not shared
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", actor.max_reply_bytes),
            ("grpc.max_allowed_incoming_connections", actor.grpc_max_connections),
            # above the door's per-address cap: grpcio frees a stream's slot only after its
            # client saw the reply (a client at the cap had streams reset, RST_STREAM)
            ("grpc.max_concurrent_streams", 2 * self.per_peer),
            ("grpc.max_connection_idle_ms", int(IDLE_S * 1000)),
            ("grpc.server_handshake_timeout_ms", int(IDLE_S * 1000)),
            ("grpc.max_metadata_size", METADATA_BYTES),
        ]
        server = grpc.aio.server(options=options, maximum_concurrent_rpcs=actor.grpc_max_rpcs)
        server.add_generic_rpc_handlers((self._handlers(),))
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"the gRPC door cannot listen on {address}: {exc}") from None
        await server.start()
        self._server = server
        return int(port)

    def _handlers(self) -> grpc.GenericRpcHandler:
        methods: dict[str, tuple[type[Message], Method]] = {
            "ServerLive": (pb.ServerLiveRequest, self._live),
            "ServerReady": (pb.ServerReadyRequest, self._ready),
            "ServerMetadata": (pb.ServerMetadataRequest, self._server_metadata),
            "ModelMetadata": (pb.ModelMetadataRequest, self._metadata),
            "ModelReady": (pb.ModelReadyRequest, self._model_ready),
            "ModelConfig": (pb.ModelConfigRequest, self._config),
            "ModelInfer": (pb.ModelInferRequest, self._infer),
        }
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                name: grpc.stream_unary_rpc_method_handler(
                    self._serving(name, kind, method), response_serializer=_serialize
                )
                for name, (kind, method) in methods.items()
            }
            | {
                grpc_stream.NAME: grpc.stream_stream_rpc_method_handler(
                    self._streaming(), response_serializer=_serialize
                )
            },
        )

    def _serving(self, name: str, kind: type[Message], method: Method) -> Callable[..., Any]:
        """The behaviour of method `name`: the token and the address's share asked before
        its message is read, the message read within its timeout and decoded, the answer
        or the error status counted by code."""

        async def serve(_requests: Any, context: Any) -> Message:
            arrived = time.monotonic()
            peer = messages.address(context.peer())
            try:
                self._enter(name, context, peer)
                try:
                    if name == "ModelInfer" and not self.actor.inbox.admits(0, peer):
                        raise Refused(Code.UNAVAILABLE, SHED)
                    raw = await self._read(context)
                    message = messages.parse(kind, raw)
                    response = await method(message, Call(context, peer, arrived, len(raw)))
                finally:
                    self.release(peer)
            except asyncio.CancelledError:  # the client went away, or the door stops
                self.counted(Code.CANCELLED)
                raise
            except Exception as exc:
                code, reason = self.failure(exc, name)
            else:
                self.counted(Code.OK)
                return response
            self.counted(code)
            await context.abort(code, reason)
            raise AssertionError("abort returned")  # it raises

        return serve

    def _streaming(self) -> Callable[..., Any]:
        """ModelStreamInfer: the token and the address's share asked as for a call, then
        its messages served (`grpc_stream.Stream`) while the stream holds one call."""

        async def serve(_requests: Any, context: Any) -> None:
            peer = messages.address(context.peer())
            try:
                self._enter(grpc_stream.NAME, context, peer)
            except Refused as exc:
                self.counted(exc.code)
                await context.abort(exc.code, exc.reason)  # (raises: the stream ends)
            try:
                await Stream(self, context, peer).run()
            finally:
                self.release(peer)

        return serve

    def _enter(self, name: str, context: Any, peer: str) -> None:
        """A call of `name` let in: its token, and a place in its address's share (taken:
        `_release` gives it back). Raises `Refused`."""
        if name not in OPEN:
            self._authorize(context)
        if self._calls[peer] >= self.per_peer:
            raise Refused(
                Code.UNAVAILABLE,
                f"too many calls from one address (grpc_max_rpcs_per_peer={self.per_peer})",
            )
        self._calls[peer] += 1
        self.calls += 1

    def failure(self, exc: Exception, name: str) -> tuple[grpc.StatusCode, str]:
        """The status an error in method `name` answers with; an unexpected one logged."""
        known = messages.failure(exc)
        if known is None:
            log.error("gRPC call %s", name, exc_info=exc)
            return Code.INTERNAL, "internal error"
        return known

    def _authorize(self, context: Any) -> None:
        """With a token set, `authorization: Bearer <token>` (compared in constant time)."""
        if self.token is None:
            return
        given = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                given = value
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.token):
            return
        raise Refused(
            Code.UNAUTHENTICATED, "a bearer token is required: Authorization: Bearer <token>"
        )

    async def _read(self, context: Any) -> bytes:
        """The call's message, whole within `grpc_message_timeout_ms`."""
        timeout_ms = self.cfg.actor.grpc_message_timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                raw = await context.read()
        except TimeoutError:
            raise Refused(
                Code.DEADLINE_EXCEEDED,
                f"message not received within grpc_message_timeout_ms={timeout_ms:g}",
            ) from None
        if raw is grpc.aio.EOF:  # none sent, or grpcio refused one over the bound
            raise Refused(
                Code.RESOURCE_EXHAUSTED,
                f"no message received: a request of model {self.cfg.name!r} holds at most "
                f"{self.max_message_bytes} bytes",
            )
        return bytes(raw)

    def release(self, peer: str) -> None:
        self._calls[peer] -= 1
        self.calls -= 1
        if not self._calls[peer]:
            del self._calls[peer]

    def counted(self, code: grpc.StatusCode) -> None:
        self.responses[code.name] = self.responses.get(code.name, 0) + 1

    def _known(self, name: str) -> None:
        if name != self.cfg.name:
            raise Refused(
                Code.NOT_FOUND, f"unknown model {name!r}; this actor serves {self.cfg.name!r}"
            )

    # -- methods ---------------------------------------------------------------------------

    async def _live(self, _request: Any, _call: Call) -> Message:
        return pb.ServerLiveResponse(live=True)

    async def _ready(self, _request: Any, _call: Call) -> Message:
        return pb.ServerReadyResponse(ready=self.actor.answers and not self.draining)

    async def _server_metadata(self, _request: Any, _call: Call) -> Message:
        return pb.ServerMetadataResponse(**oip.server_metadata())

    async def _metadata(self, request: Any, _call: Call) -> Message:
        self._known(request.name)
        kept = await asyncio.to_thread(self.actor.versions.store.versions)
        return messages.metadata(oip.model_metadata(self.cfg, kept))

    async def _model_ready(self, request: Any, _call: Call) -> Message:
        self._known(request.name)
        ready = self.actor.answers and not self.draining
        if ready and request.version:
            wanted = version_ref(request.version)
            if isinstance(wanted, int):
                ready = wanted in await asyncio.to_thread(self.actor.versions.store.versions)
        return pb.ModelReadyResponse(ready=ready)

    async def _config(self, request: Any, _call: Call) -> Message:
        self._known(request.name)
        return messages.config(oip.model_config(self.cfg))

    async def _infer(self, request: Any, call: Call) -> Message:
        replied, deadline, answering = self.queue(request, call)
        wait_s = deadline - time.monotonic() + GRACE_S
        try:
            async with asyncio.timeout(wait_s):  # (no task of its own, as wait_for makes)
                reply = await replied
        except TimeoutError:
            raise Refused(
                Code.DEADLINE_EXCEEDED, "no reply within the request's deadline"
            ) from None
        return answering(reply)

    def queue(
        self, request: Any, call: Call
    ) -> tuple[asyncio.Future[dict[str, Any]], float, Callable[[dict[str, Any]], Message]]:
        """A ModelInferRequest read, checked and queued in the inbox (ModelInfer's and each
        ModelStreamInfer message's): the future its reply settles, its deadline
        (`time.monotonic()`), and what makes the reply its ModelInferResponse (raising
        `Refused` for an error reply). Raises `Refused` or `PayloadError` unqueued."""
        self._known(request.model_name)
        version = version_ref(request.model_version) if request.model_version else None
        doc, tail = messages.document(request)
        x, rid, wanted = oip.read_document(self.cfg, self.parser, doc, tail)
        replied: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        def answer(reply: dict[str, Any]) -> None:  # the serving loop's thread
            self.handover.give(replied, reply)

        pending = Pending(
            call.arrived,
            x,
            True,
            rid,
            None,
            None,
            version=version,
            answer=answer,
            client=http_owner(self.token, call.peer),  # its ids' namespace, the HTTP door's
            peer=call.peer,
        )
        if wanted.timeout_s is not None:  # its own, when shorter than request_deadline_ms
            pending.deadline = call.arrived + wanted.timeout_s
        remaining = call.context.time_remaining()  # the call's deadline
        if remaining is not None:
            pending.deadline = min(pending.deadline, time.monotonic() + remaining)
        if not self.actor.inbox.offer(pending, call.size):
            raise Refused(Code.UNAVAILABLE, SHED)

        def answering(reply: dict[str, Any]) -> Message:
            if "error" in reply:
                raise Refused(CODES[oip.status_of(reply["error"])], reply["error"])
            out, data = oip.response(self.cfg, reply, rid, replace(wanted, binary=True))
            return messages.response(out, data)

        return replied, pending.deadline, answering


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
