"""ModelStreamInfer: many requests on one gRPC call, as Triton's streaming API sends them.

tritonclient.grpc's `start_stream` / `async_stream_infer` (and perf_analyzer's
`--streaming`) open one call and send ModelInferRequests on it; each is answered on the
same call by a ModelStreamInferResponse, as soon as its batch is computed (so not always
in the order sent: its `id` says which), with `error_message` set instead of
`infer_response` for a request refused: a bad request costs its reply, not the stream.

The stream holds one of its address's places (`grpc_max_rpcs_per_peer`) as a call does.
A message is read only while fewer than `WINDOW` of the stream's are in flight (more wait
unread in the connection's flow control: the sender slows), and joins the inbox as a
ModelInfer request does, under the same bounds, address's share and deadline (its own
`timeout`, or the call's deadline, when sooner). A stream without a message for `IDLE_S`
is ended (UNAVAILABLE, saying so), as is one whose actor stops, once those in flight are
answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message

from streamlearn.actor import grpc_messages as messages
from streamlearn.actor.grpc_messages import GRACE_S, Call, Code, Refused
from streamlearn.actor.proto import grpc_service_pb2 as pb
from streamlearn.config import ModelConfig

WINDOW = 64  # a stream's messages in flight (read, not yet answered), at most
IDLE_S = 60.0  # a stream without a message for this long is ended
NAME = "ModelStreamInfer"


Answering = Callable[[dict[str, Any]], Message]


class Door(Protocol):
    """What a stream needs of its door (`grpc_door.GrpcDoor`)."""

    cfg: ModelConfig
    draining: bool

    def queue(self, request: Any, call: Call) -> tuple[asyncio.Future[Any], float, Answering]:
        """A request queued: the future its reply settles, its deadline, its answer's maker."""

    def failure(self, exc: Exception, name: str) -> tuple[grpc.StatusCode, str]:
        """The status an error answers with."""

    def counted(self, code: grpc.StatusCode) -> None:
        """An answer counted by its code."""


class Stream:
    """One ModelStreamInfer call: its messages read, queued and answered in turn."""

    def __init__(self, door: Door, context: Any, peer: str) -> None:
        self.door, self.context, self.peer = door, context, peer
        self.window = asyncio.Semaphore(WINDOW)
        self.outbox: asyncio.Queue[Message | None] = asyncio.Queue()
        self.open = 0  # messages read, not yet answered
        self.quiet = asyncio.Event()  # set when the last one is answered
        self.loop = asyncio.get_running_loop()

    async def run(self) -> None:
        """Reads until the client is done, then answers what is in flight and ends."""
        writer = asyncio.create_task(self._write())
        try:
            ended = await self._read()
            while self.open:
                self.quiet.clear()
                await self.quiet.wait()
        finally:
            self.outbox.put_nowait(None)
            await writer
        if ended is not None:
            await self.context.abort(ended.code, ended.reason)

    async def _read(self) -> Refused | None:
        """Serves each message read; returns at the client's end (None) or the stream's."""
        while True:
            await self.window.acquire()
            try:
                async with asyncio.timeout(IDLE_S):
                    raw = await self.context.read()
            except TimeoutError:
                self.window.release()
                return Refused(Code.UNAVAILABLE, f"no message for {IDLE_S:g} s: stream ended")
            if raw is grpc.aio.EOF:  # the client is done (or sent one over the bound)
                self.window.release()
                return None
            self.open += 1
            if self.door.draining:
                ended = Refused(Code.UNAVAILABLE, "the actor stops: stream ended")
                self._error(ended, "")
                return ended
            self._serve(bytes(raw))

    def _serve(self, raw: bytes) -> None:
        """One message: queued, its answer written when its reply comes; or its error."""
        call = Call(self.context, self.peer, time.monotonic(), len(raw))
        rid = ""
        try:
            request = messages.parse(pb.ModelInferRequest, raw)
            rid = request.id
            replied, deadline, answering = self.door.queue(request, call)
        except Exception as exc:
            self._failed(exc, rid)
            return
        expiry = self.loop.call_at(deadline + GRACE_S, replied.cancel)
        replied.add_done_callback(lambda done: self._answered(done, rid, answering, expiry))

    def _answered(
        self,
        done: asyncio.Future[dict[str, Any]],
        rid: str,
        answering: Answering,
        expiry: asyncio.TimerHandle,
    ) -> None:
        expiry.cancel()
        if done.cancelled():
            refused = Refused(Code.DEADLINE_EXCEEDED, "no reply within the request's deadline")
            self._failed(refused, rid)
            return
        try:
            response = answering(done.result())
        except Exception as exc:
            self._failed(exc, rid)
            return
        self.door.counted(Code.OK)
        self.outbox.put_nowait(pb.ModelStreamInferResponse(infer_response=response))

    def _failed(self, exc: Exception, rid: str) -> None:
        code, reason = self.door.failure(exc, NAME)
        self._error(Refused(code, reason), rid)

    def _error(self, refused: Refused, rid: str) -> None:
        """An error answered in the stream (counted by its code): the stream goes on."""
        self.door.counted(refused.code)
        message = pb.ModelStreamInferResponse(
            error_message=refused.reason,
            infer_response=pb.ModelInferResponse(model_name=self.door.cfg.name, id=rid),
        )
        self.outbox.put_nowait(message)

    async def _write(self) -> None:
        """The answers, one write at a time (grpcio's rule), each freeing its place."""
        while (message := await self.outbox.get()) is not None:
            with contextlib.suppress(Exception):  # the client went away: the rest settles
                await self.context.write(message)
            self.window.release()
            self.open -= 1
            if not self.open:
                self.quiet.set()
