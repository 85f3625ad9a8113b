#!/bin/sh
# Writes the broker's TLS files for its 8883 listener (deploy/mosquitto/mosquitto.conf):
#
#   CERTS/ca.crt      the private CA's certificate: give it to devices and client tools
#                     (STREAMLEARN_MQTT_CA_FILE, mosquitto_pub --cafile, ...)
#   CERTS/server.crt  the broker's certificate, signed by the CA, for MQTT_TLS_HOSTNAMES
#   CERTS/server.key  its key
#   CA/ca.key         the CA's key (0600); kept out of CERTS, which the broker mounts
#
# Usage, from the repository root (MQTT_TLS_HOSTNAMES is read from ./.env when unset):
#   deploy/mosquitto/make-certs.sh [CERTS [CA]]   (default deploy/mosquitto/certs, .../ca)
# MQTT_TLS_HOSTNAMES: comma-separated DNS names and IP addresses devices use to reach the
# broker (default: localhost); localhost and 127.0.0.1 are always included. An existing
# CA is reused, so re-running renews the server certificate (e.g. for a new hostname)
# without touching the devices' trust; delete CA to start over. The server certificate is
# valid for 825 days, the CA for 10 years. Needs openssl (1.1.1 or later).
#
# The broker drops root to uid 1883 in its container before reading the key: run as root
# and the key is given to uid 1883 (mode 0600); otherwise it is left readable by all (0644)
# so that the broker can read it, and the CERTS directory should be kept private.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
certs=${1:-$here/certs}
ca=${2:-$here/ca}

if [ -z "${MQTT_TLS_HOSTNAMES:-}" ] && [ -f ./.env ]; then
    MQTT_TLS_HOSTNAMES=$(sed -n 's/^MQTT_TLS_HOSTNAMES=//p' ./.env | tail -n 1)
fi
san="DNS:localhost,IP:127.0.0.1"
for name in $(echo "${MQTT_TLS_HOSTNAMES:-}" | tr ',' ' '); do
    case $name in
        localhost|127.0.0.1) ;;
        *[!0-9.]*) case $name in *:*) san="$san,IP:$name";; *) san="$san,DNS:$name";; esac;;
        *) san="$san,IP:$name";;
    esac
done

mkdir -p "$certs" "$ca"
chmod 700 "$ca"
umask 077
if [ ! -f "$ca/ca.key" ] || [ ! -f "$certs/ca.crt" ]; then
    openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -sha256 \
        -subj "/CN=streamlearn MQTT CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$ca/ca.key" -out "$certs/ca.crt" 2>/dev/null
    echo "make-certs.sh: new CA $certs/ca.crt" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl req -newkey rsa:2048 -nodes -subj "/CN=streamlearn MQTT broker" \
    -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
cat > "$tmp/ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
subjectAltName=$san
EXT
openssl x509 -req -in "$tmp/server.csr" -CA "$certs/ca.crt" -CAkey "$ca/ca.key" \
    -CAcreateserial -CAserial "$tmp/ca.srl" -days 825 -sha256 -extfile "$tmp/ext" \
    -out "$tmp/server.crt" 2>/dev/null
chmod 644 "$certs/ca.crt" "$tmp/server.crt"
if [ "$(id -u)" = 0 ]; then
    chown 1883:1883 "$tmp/server.key"
    chmod 600 "$tmp/server.key"
else
    chmod 644 "$tmp/server.key"
fi
mv "$tmp/server.crt" "$tmp/server.key" "$certs/"
chmod 755 "$certs"
echo "make-certs.sh: wrote $certs/server.crt for $san" >&2
