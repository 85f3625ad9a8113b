#!/bin/sh
# Writes the Mosquitto password file for streamlearn: the roles' accounts from passwords in
# the environment,
#
#   MQTT_INGEST_PASSWORD MQTT_ACTOR_PASSWORD MQTT_LEARNER_PASSWORD
#
# (users ingest, actor, learner), and one account per device from the devices file
# (MQTT_DEVICES_FILE, default deploy/mosquitto/devices; see devices.example): lines
# `NAME PASSWORD`, `#` comments. Rights: deploy/mosquitto/acl. Unset variables are read from
# ./.env when it exists. Usage, from the repository root:
#   deploy/mosquitto/make-passwd.sh [OUTPUT]    (default OUTPUT: deploy/mosquitto/passwd)
# then, on a running stack, `docker compose kill -s HUP mosquitto` to reload it.
#
# A device name is its MQTT client id and a topic level (replies/NAME/...): 1-64 letters,
# digits, `.`, `_`, `-`; not a role's name and not starting with `sl-` (the roles' client
# ids). Needs `mosquitto_passwd` (Debian/Ubuntu: the `mosquitto` package); without it the
# eclipse-mosquitto:2 image is used through docker. The file holds salted PBKDF2-SHA512
# hashes; it is made readable by all (0644) so that the broker, running as uid 1883 in its
# container, can read it. Do not commit it (nor the devices file).
# Use long random passwords (e.g. `openssl rand -hex 24`): hex needs no escaping in the
# mqtt://user:password@host URLs. Note: `mosquitto_passwd -b` takes the password on its
# command line, briefly visible to other local users in `ps`.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/passwd}

if [ -z "${MQTT_INGEST_PASSWORD:-}" ] && [ -f ./.env ]; then
    set -a
    # shellcheck source=/dev/null
    . ./.env
    set +a
fi
devices=${MQTT_DEVICES_FILE:-$here/devices}

dir=$(cd "$(dirname "$out")" && pwd)
tmp=$(mktemp "$dir/.passwd.XXXXXX")
trap 'rm -f "$tmp"' EXIT
: > "$tmp"

fail() { echo "make-passwd.sh: $*" >&2; exit 1; }

# passwd_add USER PASSWORD: check the password, append USER to the temporary file.
check_password() {
    if [ -z "$2" ]; then fail "$1: no password"; fi
    if [ "${#2}" -lt 16 ]; then fail "$1: password shorter than 16 characters"; fi
    case $2 in *change-me*|*CHANGE-ME*) fail "$1: password is still a placeholder";; esac
}
if command -v mosquitto_passwd >/dev/null 2>&1; then
    passwd_add() { check_password "$1" "$2"; mosquitto_passwd -b "$tmp" "$1" "$2"; }
else
    passwd_add() {
        check_password "$1" "$2"
        MQTT_PW="$2" docker run --rm -e MQTT_PW -u "$(id -u):$(id -g)" -v "$dir:/out" \
            eclipse-mosquitto:2 sh -c 'mosquitto_passwd -b "/out/$1" "$2" "$MQTT_PW"' \
            sh "$(basename "$tmp")" "$1"
    }
fi

for user in ingest actor learner; do
    var=MQTT_$(echo "$user" | tr '[:lower:]' '[:upper:]')_PASSWORD
    eval "pw=\${$var:-}"
    if [ -z "$pw" ]; then fail "$var is not set"; fi
    passwd_add "$user" "$pw"
done

count=0
if [ -f "$devices" ]; then
    seen=" ingest actor learner "
    while read -r name pw rest || [ -n "$name" ]; do
        case $name in ''|'#'*) continue;; esac
        if [ -n "$rest" ]; then fail "$devices: $name: expected 'NAME PASSWORD'"; fi
        case $name in *[!A-Za-z0-9._-]*) bad=1;; *) bad=$(( ${#name} > 64 ));; esac
        if [ "$bad" = 1 ]; then
            fail "$devices: device name '$name': use 1-64 letters, digits, '.', '_', '-'"
        fi
        case $name in sl-*) fail "$devices: device name '$name' starts with sl- (roles' client ids)";; esac
        case $seen in *" $name "*) fail "$devices: '$name' is a role or a device already listed";; esac
        seen="$seen$name "
        passwd_add "$name" "$pw"
        count=$((count + 1))
    done < "$devices"
fi
if [ "$count" -eq 0 ]; then
    echo "make-passwd.sh: no device accounts ($devices): only the roles can connect" >&2
fi

chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out (3 roles, $count devices)" >&2
