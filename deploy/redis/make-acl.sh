#!/bin/sh
# Writes the Redis ACL file for streamlearn from passwords in the environment.
#
#   REDIS_INGEST_PASSWORD REDIS_LEARNER_PASSWORD REDIS_ACTOR_PASSWORD   (required)
#   REDIS_ADMIN_PASSWORD                                                (optional: adds an
#                                                                       all-powerful `admin`)
#
# Unset variables are read from ./.env when it exists. Usage, from the repository root:
#   deploy/redis/make-acl.sh [OUTPUT]        (default OUTPUT: deploy/redis/users.acl)
#
# The output holds sha256 hashes, never the passwords, so it may be world-readable (the
# redis container reads it as uid 999). Use long random passwords (e.g. `openssl rand -hex
# 24`): a hash of a short one can be brute-forced, and hex needs no escaping in URLs.
# Do not commit the output. Redis 7.0 ACL files allow no comments, hence the rules are
# documented here:
#
#   default  off, without a password: nobody can authenticate as it, and a client that has
#            not authenticated can run nothing but AUTH/HELLO (NOAUTH). Its rights are
#            nevertheless all (+@all ~* &*): Redis replays the AOF at start-up as the default
#            user and re-checks ACLs at each EXEC, so a default user without rights would
#            drop every MULTI/EXEC from the AOF (the weights updates) on a restart.
#   ingest   XADD (and XLEN, XINFO) on sl:*:samples and sl:*:deadletter, through its Lua
#            scripts (EVALSHA; scripts run with the caller's rights): de-duplication sets
#            and the appended-samples counter under sl:*:ingest:*, and the backlog it reads
#            (XINFO, XPENDING, XRANGE) for back-pressure; the per-device windows of keyed
#            observations under sl:*:window:* (sorted sets, through its Lua script), and
#            which sender made each window (hashes sl:*:ingest:owners, sl:*:ingest:senders;
#            each sender's windows by time, sorted sets sl:*:ingest:by:*: ZREM; each
#            sender's de-duplication ids this generation, hash sl:*:ingest:seen:by: HMGET).
#            Labels that come later: MGET of the kept predictions sl:*:pending:*, and the
#            join's Lua script (tombstones, the served score: HINCRBY/HINCRBYFLOAT of
#            sl:*:served, LPUSH/LTRIM of sl:*:served:delays); the named payloads' field
#            counts (HINCRBY of sl:*:fields). No read of weights, no consumer group.
#   learner  consumes sl:*:samples in its group (XREADGROUP, XACK, XAUTOCLAIM/XCLAIM,
#            XPENDING, XTRIM, XGROUP CREATE; reads and acks through Lua scripts, so
#            EVALSHA too), XADDs dead letters, SET/GET/DEL of
#            sl:*:weights* (MULTI/EXEC), PUBLISH on channel sl:*:weights; plus EXISTS/XLEN
#            so `streamlearn status` works with its credentials. With variants: their
#            weights (sl:*:variant:*:weights*, matched by sl:*:weights*) and version lists
#            (RPUSH/LPOP/LLEN/LRANGE), the pin (`streamlearn pin`/`unpin`: GETDEL) and version
#            labels (HSET/HVALS, kept from the trim), the champion pointer and last promotion (GET/SET), the
#            figures hash sl:*:variants (HSET/HGETALL), through Lua scripts (EVALSHA);
#            its lease sl:*:learner:lease (a variant's sl:*:variant:*:learner:lease): SET NX
#            PX to take it, GET/SET/DEL in its scripts (GET in the publish and promotion
#            scripts, which check it), PTTL for `streamlearn status`;
#            read-only: the served score (sl:*:served*) and the field counts (sl:*:fields)
#            it puts in the model's status.
#   actor    read-only GET of sl:*:weights* (HGET: a version's blob; HKEYS: the versions
#            kept, which the HTTP door's model metadata and versioned `ready` answer and
#            an error for a version not kept names; HGETALL: the version labels of
#            `streamlearn pin --label`), SUBSCRIBE to channel sl:*:weights; read-only
#            ZREVRANGEBYSCORE of sl:*:window:* (the stored steps of key-only requests), through
#            its read-only Lua script (EVALSHA_RO, SCRIPT LOAD; it runs with the actor's rights).
#            Read-write sl:*:pending* (each served prediction of a request with an id,
#            kept for its label, the index that bounds them and each client's index and
#            bytes for its share; a Lua script: SET EX, ZADD, ZREM, ZREMRANGEBYSCORE/
#            ZREMRANGEBYRANK, INCRBY/DECRBY, UNLINK). The HTTP door's labels route joins
#            labels as ingest does (streamlearn/actor/labels.py): MGET of sl:*:pending*,
#            the exactly-once append script on sl:*:samples (XADD; the backlog's XINFO,
#            XPENDING, XRANGE, XLEN) and its de-duplication keys sl:*:ingest:*, and the
#            join's script on sl:*:served*; with [models.M.state], the index of retained
#            device states sl:*:served:states (a Lua script: ZSCORE, ZADD GT, ZCARD, ZRANGE,
#            ZREMRANGEBYRANK). As ingest's, these rights on the other keys are
#            in a selector: the actor cannot delete or overwrite the stream, and writes no
#            dead letters.
# Selectors (Redis 7): ingest's and the learner's rights on their other keys (UNLINK, DEL,
# SET, EXPIRE, ...) are each in a `(...)` selector limited to those keys, so a leaked
# ingest or learner password cannot delete or overwrite the sample stream or the dead
# letters, not even from a script: on the streams they have only the streams' commands.
# What stays possible on them is what the role is for: ingest's XADD (with a MAXLEN
# argument, that trims too: Redis ACLs do not see arguments), the learner's XTRIM.
# Every user may PING, HELLO and CLIENT SETNAME (what redis-py sends on connect). CLIENT
# SETINFO is left out (it exists only from Redis 7.2): redis-py ignores its refusal.
# The `sl` key prefix is STREAMLEARN_KEY_PREFIX: change the patterns if you change it.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/users.acl}

if [ -z "${REDIS_INGEST_PASSWORD:-}" ] && [ -f ./.env ]; then
    set -a
    # shellcheck source=/dev/null
    . ./.env
    set +a
fi

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum | cut -d' ' -f1
    else shasum -a 256 | cut -d' ' -f1; fi
}

# hash_of VAR: the sha256 of $VAR, refusing empty, short and placeholder values.
hash_of() {
    eval "pw=\${$1:-}"
    if [ -z "$pw" ]; then echo "make-acl.sh: $1 is not set" >&2; exit 1; fi
    if [ "${#pw}" -lt 16 ]; then echo "make-acl.sh: $1 is shorter than 16 characters" >&2; exit 1; fi
    case $pw in *change-me*|*CHANGE-ME*) echo "make-acl.sh: $1 is still a placeholder" >&2; exit 1;; esac
    printf '%s' "$pw" | sha256
}

conn='+ping +hello +client|setname +cluster|info +cluster|slots'  # cluster: mode probe, topology
# The keys other than the streams that ingest and the learner write (selectors below).
ingest_keys='~sl:*:ingest:* ~sl:*:window:* ~sl:*:pending* ~sl:*:served* ~sl:*:fields'
learner_keys='~sl:*:weights* ~sl:*:champion ~sl:*:promotion ~sl:*:variants ~sl:*:learner:lease'
actor_reads='%R~sl:*:weights* %R~sl:*:window:*'
actor_keys='~sl:*:pending* ~sl:*:ingest:* ~sl:*:served*'
ingest=$(hash_of REDIS_INGEST_PASSWORD)
learner=$(hash_of REDIS_LEARNER_PASSWORD)
actor=$(hash_of REDIS_ACTOR_PASSWORD)

tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
    echo "user default off resetpass ~* &* +@all"
    # Root rules: the streams' own commands and the scripts (a script's declared keys must
    # all match one rule set: every pattern is in the root set). Selectors, in (...): what
    # may touch the other keys, and nothing else. So UNLINK, DEL and SET never reach the
    # sample stream or the dead letters, directly or from a script.
    echo "user ingest on #$ingest resetkeys resetchannels ~sl:*:samples ~sl:*:deadletter $ingest_keys -@all $conn +xadd +xlen +xinfo +xpending +xrange +evalsha +eval +script|load ($ingest_keys +smismember +sadd +expire +unlink +get +set +zadd +zcard +zcount +zrange +zrem +zrevrangebyscore +zremrangebyrank +mget +lpush +ltrim +hincrby +hincrbyfloat +hlen +hexists +hget +hmget +hset +hdel)"
    echo "user learner on #$learner resetkeys resetchannels ~sl:*:samples ~sl:*:deadletter $learner_keys %R~sl:*:served* %R~sl:*:fields &sl:*:weights -@all $conn +xreadgroup +xack +xautoclaim +xclaim +xpending +xtrim +xlen +xinfo +xgroup|create +xgroup|createconsumer +xadd +exists +multi +exec +discard +publish +time +evalsha +eval +script|load ($learner_keys +get +mget +set +del +unlink +exists +rpush +lpop +llen +lrange +getdel +hset +hget +hdel +hkeys +hvals +hexists +hgetall +zadd +zrange +zscore +zcard +zpopmin +lpos +pttl) (%R~sl:*:served* %R~sl:*:fields +get +mget +hget +hgetall +lrange +llen +exists)"
    echo "user actor on #$actor resetkeys resetchannels ~sl:*:samples $actor_reads $actor_keys &sl:*:weights -@all $conn +subscribe +unsubscribe +evalsha_ro +script|load +evalsha +eval +xadd +xlen +xinfo +xpending +xrange ($actor_reads +get +hget +hkeys +hgetall +zrevrangebyscore) ($actor_keys +get +mget +set +expire +unlink +zscore +zadd +zcard +zrange +zrem +zremrangebyscore +zremrangebyrank +incrby +decrby +smismember +sadd +hget +hmget +hset +hincrby +hincrbyfloat +lpush +ltrim)"
    if [ -n "${REDIS_ADMIN_PASSWORD:-}" ]; then
        echo "user admin on #$(hash_of REDIS_ADMIN_PASSWORD) ~* &* +@all"
    fi
} > "$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out" >&2
