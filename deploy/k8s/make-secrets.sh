#!/bin/sh
# Writes the Secrets that `streamlearn deploy k8s` names, as YAML on stdout, for
# `kubectl apply -f -` (never into a file of the checkout):
#
#   streamlearn-ingest, -learner, -actor  each role's STREAMLEARN_MQTT_URL and
#                                         STREAMLEARN_REDIS_URL, with its own account
#   streamlearn-mosquitto-passwd          --broker: `passwd` of deploy/mosquitto/make-passwd.sh
#                                         (the roles' accounts, and the devices file's)
#   streamlearn-mosquitto-certs           --broker: deploy/mosquitto/make-certs.sh's ca.crt,
#                                         server.crt and server.key (run it first)
#   streamlearn-redis-acl                 --redis: `users.acl` of deploy/redis/make-acl.sh
#   streamlearn-http-token                --http-token: `token`, HTTP_TOKEN or a new random one
#
# from the passwords compose reads (unset variables are read from ./.env when it exists):
#
#   MQTT_INGEST_PASSWORD MQTT_LEARNER_PASSWORD MQTT_ACTOR_PASSWORD
#   REDIS_INGEST_PASSWORD REDIS_LEARNER_PASSWORD REDIS_ACTOR_PASSWORD
#
# The roles' URLs name the install's own Services with --broker and --redis (mosquitto:1883,
# redis:6379 in the namespace streamlearn); without them, say where yours are: MQTT_HOST and
# REDIS_HOST (host:port). Usage, from the repository root:
#
#   deploy/k8s/make-secrets.sh --broker --redis | kubectl apply -f -
#
# Needs kubectl (it writes the YAML: `create secret --dry-run=client`, no cluster asked) and
# what the scripts it runs need (mosquitto_passwd or docker; sha256sum or shasum). The
# passwords reach kubectl in files of a private temporary folder, not on a command line.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
deploy=$(dirname "$here")
namespace=streamlearn
broker=0 redis=0 token=0
for arg in "$@"; do
    case $arg in
        --broker) broker=1;;
        --redis) redis=1;;
        --http-token) token=1;;
        *) echo "usage: make-secrets.sh [--broker] [--redis] [--http-token]" >&2; exit 2;;
    esac
done

if [ -z "${MQTT_INGEST_PASSWORD:-}" ] && [ -f ./.env ]; then
    set -a
    # shellcheck source=/dev/null
    . ./.env
    set +a
fi

fail() { echo "make-secrets.sh: $*" >&2; exit 1; }
command -v kubectl >/dev/null 2>&1 || fail "needs kubectl (it writes the Secrets' YAML)"
if [ "$broker" = 1 ]; then mqtt_host=mosquitto:1883; else mqtt_host=${MQTT_HOST:-}; fi
if [ "$redis" = 1 ]; then redis_host=redis:6379; else redis_host=${REDIS_HOST:-}; fi
[ -n "$mqtt_host" ] || fail "MQTT_HOST is not set (host:port of your broker), nor --broker"
[ -n "$redis_host" ] || fail "REDIS_HOST is not set (host:port of your Redis), nor --redis"

umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

secret() {  # secret NAME ARGS...: one Secret's YAML, a document of its own
    name=$1
    shift
    kubectl create secret generic "$name" --namespace "$namespace" --dry-run=client -o yaml \
        "$@" > "$tmp/secret.yaml"
    echo "---"
    sed '/creationTimestamp: null/d' "$tmp/secret.yaml"
}

for role in ingest learner actor; do
    upper=$(echo "$role" | tr '[:lower:]' '[:upper:]')
    eval "mqtt=\${MQTT_${upper}_PASSWORD:-}"
    eval "redis_pw=\${REDIS_${upper}_PASSWORD:-}"
    [ -n "$mqtt" ] || fail "MQTT_${upper}_PASSWORD is not set"
    [ -n "$redis_pw" ] || fail "REDIS_${upper}_PASSWORD is not set"
    {
        echo "STREAMLEARN_MQTT_URL=mqtt://$role:$mqtt@$mqtt_host"
        echo "STREAMLEARN_REDIS_URL=redis://$role:$redis_pw@$redis_host/0"
    } > "$tmp/$role.env"
    secret "streamlearn-$role" --from-env-file="$tmp/$role.env"
done

if [ "$broker" = 1 ]; then
    "$deploy/mosquitto/make-passwd.sh" "$tmp/passwd" >&2
    secret streamlearn-mosquitto-passwd --from-file=passwd="$tmp/passwd"
    certs=${MQTT_CERTS_DIR:-$deploy/mosquitto/certs}
    for file in ca.crt server.crt server.key; do
        [ -f "$certs/$file" ] || fail "$certs/$file is missing: run deploy/mosquitto/make-certs.sh"
    done
    secret streamlearn-mosquitto-certs --from-file="$certs/ca.crt" \
        --from-file="$certs/server.crt" --from-file="$certs/server.key"
fi

if [ "$redis" = 1 ]; then
    "$deploy/redis/make-acl.sh" "$tmp/users.acl" >&2
    secret streamlearn-redis-acl --from-file=users.acl="$tmp/users.acl"
fi

if [ "$token" = 1 ]; then
    printf '%s' "${HTTP_TOKEN:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}" > "$tmp/token"
    secret streamlearn-http-token --from-file=token="$tmp/token"
fi
