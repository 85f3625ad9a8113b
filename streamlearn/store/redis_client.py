"""The one way every role connects to Redis: a standalone server or a Redis Cluster.

Given the URL of any node, `connect` asks it `CLUSTER INFO`: a cluster node answers, a
standalone server refuses ("cluster support disabled"). For a cluster it returns redis-py's
cluster client, which routes each command to the node serving its key's hash slot, follows
MOVED and ASK, and finds the new master after a failover. Nothing else changes: every key
of a model carries the hash tag `{model}` (`streamlearn.contract.names`), so all of them share one
slot, and every Lua script is given every key it touches. Pub/sub is the cluster's
(a PUBLISH reaches subscribers on every node).

A server that cannot be reached within `probe_s` is taken for a standalone one, with a
warning: the roles retry their commands, and a restart detects the mode again.
"""

from __future__ import annotations

import logging
import time
from typing import Any, TypeGuard, cast

import redis
from redis.cluster import RedisCluster
from redis.commands.policies import (
    CommandPolicies,
    PolicyResolver,
    RequestPolicy,
    ResponsePolicy,
    StaticPolicyResolver,
)

from streamlearn.config.runfile import redact

log = logging.getLogger("streamlearn")


def connect(url: str, *, probe_s: float = 10.0, **kwargs: Any) -> redis.Redis:
    """A client for `url` (`redis://` or `rediss://`), a cluster client if it is one.
    `kwargs` go to redis-py (`retry`, timeouts); the cluster client passes them on to
    its connection to each node."""
    if is_cluster_url(url, probe_s, kwargs):
        # typed as the standalone client, whose commands the cluster client serves too
        cluster = _Cluster.from_url(url, policy_resolver=_ScriptsByTheirKeys(), **kwargs)
        return cast(redis.Redis, cluster)
    return redis.Redis.from_url(url, **kwargs)


def is_cluster(client: object) -> TypeGuard[RedisCluster]:
    return isinstance(client, RedisCluster)


def routed(client: object, key: str) -> dict[str, Any]:
    """Options that send a command to the node serving `key`: for a command whose keys
    redis-py's cluster client would otherwise ask a node for (EVALSHA_RO: `COMMAND GETKEYS`,
    one more round trip, to a node that may be the one that just failed)."""
    return {"target_nodes": client.get_node_from_key(key)} if is_cluster(client) else {}


def is_cluster_url(url: str, probe_s: float = 10.0, kwargs: dict[str, Any] | None = None) -> bool:
    """Whether the server at `url` is a Redis Cluster node."""
    dropped = ("retry", "health_check_interval")
    options = {k: v for k, v in (kwargs or {}).items() if k not in dropped}
    options.setdefault("socket_connect_timeout", 2)
    options.setdefault("socket_timeout", 2)
    deadline = time.monotonic() + probe_s
    with redis.Redis.from_url(url, **options) as probe:
        while True:
            try:
                probe.execute_command("CLUSTER INFO")
                return True
            except (redis.ResponseError, redis.AuthenticationError):
                return False  # cluster support disabled, the ACL denies it, or a bad password
            except redis.ConnectionError as exc:
                if time.monotonic() >= deadline:
                    log.warning("redis %s unreachable (%s): taken for standalone", redact(url), exc)
                    return False
                time.sleep(0.2)


def evalsha(pipe: Any, sha: str, keys: list[str], *args: Any) -> None:
    """Queue EVALSHA on `pipe`, a standalone or a cluster pipeline. redis-py's cluster
    pipeline refuses its `evalsha` method (it could not reload a lost script mid-pipeline);
    the raw command is routed by its first key like any other, and our callers load the
    script again themselves on NOSCRIPT."""
    pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)


_KEYED = CommandPolicies(
    request_policy=RequestPolicy.DEFAULT_KEYED, response_policy=ResponsePolicy.DEFAULT_KEYED
)


class _ScriptsByTheirKeys(StaticPolicyResolver):
    """EVAL and EVALSHA routed by the keys they declare. Without this, redis-py's cluster
    pipeline asks its default node `COMMAND GETKEYS` for each script call: a round trip per
    call, and no way forward once that node is down (a failover)."""

    def resolve(self, command_name: str) -> CommandPolicies | None:
        if command_name in ("eval", "evalsha"):
            return _KEYED
        return super().resolve(command_name)

    def with_fallback(self, fallback: PolicyResolver) -> PolicyResolver:
        return _ScriptsByTheirKeys(fallback)


class _Cluster(RedisCluster):
    """redis-py's cluster client, whose pipelines resolve commands as it does (redis-py
    8.1 gives a pipeline the default resolver, whatever the client's)."""

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        pipe._policy_resolver = self._policy_resolver
        return pipe
