#!/usr/bin/env bash
# One entry point that sets itself up on a fresh machine:
#   bash run.sh up      the whole stack with a demo stream (embedded mosquitto + redis-server)
#   bash run.sh test    the test suite (real servers started by the fixtures)
#   bash run.sh docs    the documentation site: mkdocs build --strict into site/
# Anything after the verb is passed on (to `streamlearn up`, to pytest or to mkdocs build).
set -euo pipefail
cd "$(dirname "$0")"

need_debian_packages() {
  # Servers for every verb; for the tests only, the browser (the dashboard test drives it)
  # and a C compiler with mosquitto's plugin headers.
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
  command -v openssl >/dev/null || missing+=(openssl)
  if [ "${1:-}" = test ]; then
    command -v chromium >/dev/null || missing+=(chromium)
    # The deployed broker's guard plugin (deploy/mosquitto/guard), compiled by its tests.
    command -v cc >/dev/null || missing+=(gcc)
    [ -f /usr/include/mosquitto_plugin.h ] || missing+=(mosquitto-dev)
    [ -f /usr/include/mosquitto.h ] || missing+=(libmosquitto-dev)
    # kubectl's built-in kustomize renders deploy/k8s (tests/integration/test_k8s_manifests.py).
    command -v kubectl >/dev/null || command -v kustomize >/dev/null || missing+=(kubernetes-client)
    # promtool and prometheus: the alerting rules' tests (deploy/prometheus/alerts.yml).
    command -v promtool >/dev/null || missing+=(prometheus)
  fi
  [ ${#missing[@]} -eq 0 ] && return
  echo "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    # The package enables and starts its own server on :9090 where an init system lets
    # it; the tests start theirs on free ports, so stop and disable that one.
    if [ -d /run/systemd/system ]; then
      $sudo systemctl disable --now prometheus.service
    else
      $sudo /etc/init.d/prometheus stop >/dev/null || true
      $sudo update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
  fi
}

python_env() {
  # $1: the extras to install (the tests also run the quality bench's smoke tests: bench)
  local extras="$1"
  local py="${PYTHON:-python3}"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local stamp=.venv/.streamlearn-installed
  local hash
  hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if ! installed "$stamp" "$hash" "$extras"; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[$extras]"
    echo "$hash $extras" >> "$stamp"
  fi
}

installed() {
  # Whether the stamp $1 has a line for this pyproject.toml ($2) with every extra in $3:
  # `up` after `test` installs nothing more (pip keeps what an earlier install added).
  local line have extra ok
  [ -f "$1" ] || return 1
  while read -r line; do
    [ "${line%% *}" = "$2" ] || continue
    have=",${line#* },"
    ok=1
    for extra in ${3//,/ }; do [[ "$have" == *",$extra,"* ]] || ok=0; done
    [ "$ok" = 1 ] && return 0
  done < "$1"
  return 1
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
  docs)
    # No server: the pages, and the reference written from the code (its config, commands
    # and metrics: the docs extra carries what they import, no Keras or TensorFlow).
    python_env docs
    export DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1
    exec .venv/bin/mkdocs build --strict --site-dir site "$@"
    ;;
  *)
    echo "usage: bash run.sh up|test|docs [args...]" >&2
    exit 2
    ;;
esac
