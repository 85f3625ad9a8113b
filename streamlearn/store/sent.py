"""A script call sent to Redis now, its reply taken later: Redis runs it (on a core of its
own) while the caller trains, instead of the caller waiting for it.

The learner reads its next batch and acknowledges durable entries this way
(`SampleStream.send_read`, `send_ack`): for one-sample entries Redis works ~2.5 us an entry
to read and pack them and ~0.5 us to acknowledge them, which the learner spent waiting, a
step's time again, while it sent one call and waited for its reply before the next.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.commands.core import Script

from streamlearn.store.redis_client import is_cluster


class Senders:
    """The connections of one client that `Sent` calls go out on, kept between calls:
    taking one from the client's pool each time cost ~12 us of checks, twice a step."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._idle: list[redis.Connection] = []  # pop and append: safe across threads

    def take(self) -> redis.Connection | None:
        """A connection of its own for one call; None on a cluster client."""
        if is_cluster(self.client):
            return None
        try:
            return self._idle.pop()
        except IndexError:
            return self.client.connection_pool.get_connection()

    def give(self, conn: redis.Connection) -> None:
        self._idle.append(conn)


class Sent:
    """One EVALSHA sent on a connection of its own. Take its `result()` once, always: the
    script runs whether or not anyone does, and the connection is free again after it.

    On a cluster client the call runs in `result()` (routed by redis-py, as any other).
    """

    def __init__(self, senders: Senders, script: Script, keys: list, args: list) -> None:
        self._call = lambda: script(keys=keys, args=args)
        self._senders = senders
        self._conn = conn = senders.take()
        if conn is not None:
            try:
                # one write: redis-py sends a long argument (the ids) in a write of its own
                command = conn.pack_command("EVALSHA", script.sha, len(keys), *keys, *args)
                conn.send_packed_command([b"".join(command)])
            except BaseException:
                self._conn = None
                self._lost(conn)
                raise

    def result(self) -> Any:
        """The script's reply, or its error raised."""
        conn, self._conn = self._conn, None
        if conn is None:
            return self._call()
        try:
            reply = conn.read_response()
        except redis.ResponseError as exc:  # an error reply: the connection is fine
            self._senders.give(conn)
            if isinstance(exc, redis.exceptions.NoScriptError):  # Redis lost its scripts
                return self._call()  # nothing ran; redis-py loads it again
            raise
        except BaseException:
            self._lost(conn)
            raise
        self._senders.give(conn)
        return reply

    def _lost(self, conn: redis.Connection) -> None:
        conn.disconnect()  # a reply may be left half read: the next call connects again
        self._senders.give(conn)
