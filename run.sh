#!/usr/bin/env bash
# One entry point that sets itself up on a fresh machine:
#   bash run.sh up      the whole stack with a demo stream (embedded mosquitto + redis-server)
#   bash run.sh test    the test suite (real servers started by the fixtures)
# Anything after the verb is passed on (to `streamlearn up` or to pytest).
set -euo pipefail
cd "$(dirname "$0")"

need_debian_packages() {
  # Servers for every verb; the browser only for the tests (the dashboard test drives it).
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
  command -v openssl >/dev/null || missing+=(openssl)
  if [ "${1:-}" = test ]; then command -v chromium >/dev/null || missing+=(chromium); fi
  [ ${#missing[@]} -eq 0 ] && return
  echo "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

python_env() {
  # $1: the extras to install (the tests also run the quality bench's smoke tests: bench)
  local extras="$1"
  local py="${PYTHON:-python3}"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local stamp=.venv/.streamlearn-installed
  local want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
  if [ ! -f "$stamp" ] || ! grep -qxF "$want" "$stamp"; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[$extras]"
    echo "$want" >> "$stamp"
  fi
}

verb="${1:-}"
shift || true
export PATH="$PATH:/usr/sbin"
case "$verb" in
  up)
    need_debian_packages up
    python_env service
    exec .venv/bin/streamlearn up --demo "$@"
    ;;
  test)
    need_debian_packages test
    python_env service,test,bench
    exec .venv/bin/python -m pytest "$@"
    ;;
  *)
    echo "usage: bash run.sh up|test [args...]" >&2
    exit 2
    ;;
esac
