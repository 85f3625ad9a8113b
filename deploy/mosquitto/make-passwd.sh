#!/bin/sh
# Writes the Mosquitto password file for streamlearn from passwords in the environment:
#
#   MQTT_INGEST_PASSWORD MQTT_ACTOR_PASSWORD MQTT_LEARNER_PASSWORD MQTT_DEVICE_PASSWORD
#
# for the users ingest, actor, learner and device (rights: deploy/mosquitto/acl).
# Unset variables are read from ./.env when it exists. Usage, from the repository root:
#   deploy/mosquitto/make-passwd.sh [OUTPUT]    (default OUTPUT: deploy/mosquitto/passwd)
#
# Needs `mosquitto_passwd` (Debian/Ubuntu: the
# `mosquitto` package); without it the eclipse-mosquitto:2 image is used through docker.
# The file holds salted PBKDF2-SHA512 hashes; it is made readable by all (0644) so that the
# broker, running as uid 1883 in its container, can read it. Do not commit it.
# Use long random passwords (e.g. `openssl rand -hex 24`): hex needs no escaping in the
# mqtt://user:password@host URLs of .env. Note: `mosquitto_passwd -b` takes the password on
# its command line, briefly visible to other local users in `ps`.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/passwd}

if [ -z "${MQTT_INGEST_PASSWORD:-}" ] && [ -f ./.env ]; then
    set -a
    # shellcheck source=/dev/null
    . ./.env
    set +a
fi

dir=$(cd "$(dirname "$out")" && pwd)
tmp=$(mktemp "$dir/.passwd.XXXXXX")
trap 'rm -f "$tmp"' EXIT
: > "$tmp"

# passwd_add USER PASSWORD: append USER to the temporary file.
if command -v mosquitto_passwd >/dev/null 2>&1; then
    passwd_add() { mosquitto_passwd -b "$tmp" "$1" "$2"; }
else
    passwd_add() {
        MQTT_PW="$2" docker run --rm -e MQTT_PW -u "$(id -u):$(id -g)" -v "$dir:/out" \
            eclipse-mosquitto:2 sh -c 'mosquitto_passwd -b "/out/$1" "$2" "$MQTT_PW"' \
            sh "$(basename "$tmp")" "$1"
    }
fi

for user in ingest actor learner device; do
    var=MQTT_$(echo "$user" | tr '[:lower:]' '[:upper:]')_PASSWORD
    eval "pw=\${$var:-}"
    if [ -z "$pw" ]; then echo "make-passwd.sh: $var is not set" >&2; exit 1; fi
    if [ "${#pw}" -lt 16 ]; then echo "make-passwd.sh: $var is shorter than 16 characters" >&2; exit 1; fi
    case $pw in *change-me*|*CHANGE-ME*) echo "make-passwd.sh: $var is still a placeholder" >&2; exit 1;; esac
    passwd_add "$user" "$pw"
done

chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out" >&2
