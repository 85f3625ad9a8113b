"""Servers run with the deploy/ files (auth, ACLs) and clients logged in as each role.

A pytest plugin (`pytest_plugins` in conftest.py), so that any test module can use the
`broker` and `acl_redis` fixtures.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_lib

from streamlearn.stack import embedded

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ROLES = ("ingest", "actor", "learner")
# one account each, as in deploy/mosquitto/devices; `labeller` labels any device's predictions
DEVICES = ("alice", "bob", "dev-1", "labeller")
MQTT_PW = {name: f"mqtt-{name}-{uuid.uuid4().hex}" for name in ROLES + DEVICES}
# admin: make-acl.sh's optional all-powerful account, for the tests' ACL LOG reads
REDIS_PW = {r: f"redis-{r}-{uuid.uuid4().hex}" for r in ("ingest", "learner", "actor", "admin")}


def _secrets_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({f"MQTT_{r.upper()}_PASSWORD": MQTT_PW[r] for r in ROLES})
    env.update({f"REDIS_{r.upper()}_PASSWORD": pw for r, pw in REDIS_PW.items()})
    return env


def build_guard(out_dir: Path) -> Path:
    """Compile deploy/mosquitto/guard (the broker plugin the deployed config loads) with the
    machine's C compiler and Debian's mosquitto-dev headers (`run.sh test` installs both)."""
    source = DEPLOY / "mosquitto/guard/streamlearn_guard.c"
    out = out_dir / "streamlearn_guard.so"
    cmd = ["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(out), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"the guard plugin did not build: {done.stderr}"
    return out


def _generate(script: str, out: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """Run a deploy/ generator script (passwords, ACLs, certificates) with this session's
    secrets."""
    cmd = ["sh", str(DEPLOY / script), str(out), *args]
    env = {**_secrets_env(), **(env or {})}
    subprocess.run(cmd, env=env, check=True, cwd=out.parent, capture_output=True)


@dataclass(frozen=True)
class DeployedBroker:
    """mosquitto on deploy/mosquitto/*: `port` is the roles' plain listener (1883 in
    compose), `tls_port` the devices' TLS listener (8883), trusted through `ca_file`."""

    server: embedded.ServerProcess
    port: int
    tls_port: int
    ca_file: Path

    @property
    def log(self) -> str:
        return self.server.log_path.read_text()


@contextlib.contextmanager
def deployed_broker(overrides: dict[str, str] | None = None) -> Iterator[DeployedBroker]:
    """mosquitto running deploy/mosquitto/mosquitto.conf and acl, with the password file
    from make-passwd.sh and certificates from make-certs.sh; `overrides` replaces the value
    of the conf's options of those names (e.g. a small queue limit)."""
    # mosquitto started as root reads its files as the `mosquitto` user, and pytest's
    # temporary directories are private: use a world-readable one.
    wd = Path(tempfile.mkdtemp(prefix="sl-deploy-mosquitto-"))
    wd.chmod(0o777)
    try:
        devices = wd / "devices"
        devices.write_text("".join(f"{d} {MQTT_PW[d]}\n" for d in DEVICES))
        _generate(
            "mosquitto/make-passwd.sh", wd / "passwd", env={"MQTT_DEVICES_FILE": str(devices)}
        )
        _generate("mosquitto/make-certs.sh", wd / "certs", str(wd / "ca"))
        (wd / "certs/server.key").chmod(0o644)  # make-certs gives it to uid 1883 when root
        port, tls_port = embedded.free_port(), embedded.free_port()
        conf = (DEPLOY / "mosquitto/mosquitto.conf").read_text()
        conf = re.sub(r"^listener 1883$", f"listener {port} 127.0.0.1", conf, flags=re.M)
        conf = re.sub(r"^listener 8883$", f"listener {tls_port} 127.0.0.1", conf, flags=re.M)
        for option, value in (overrides or {}).items():
            conf, n = re.subn(rf"^{option} .*$", f"{option} {value}", conf, flags=re.M)
            assert n == 1, f"deploy mosquitto.conf has no single {option} line"
        conf = conf.replace("/mosquitto/plugins/streamlearn_guard.so", str(build_guard(wd)))
        conf = conf.replace("/mosquitto/config/passwd", str(wd / "passwd"))
        conf = conf.replace("/mosquitto/config/acl", str(DEPLOY / "mosquitto/acl"))
        conf = conf.replace("/mosquitto/certs/", f"{wd}/certs/")
        conf = conf.replace("/mosquitto/data/", f"{wd}/")
        (wd / "mosquitto.conf").write_text(conf)
        argv = ["mosquitto", "-c", str(wd / "mosquitto.conf")]
        with embedded.ServerProcess("mosquitto", argv, port, wd) as server:
            yield DeployedBroker(server, port, tls_port, wd / "certs/ca.crt")
    finally:
        shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture(scope="module")
def broker() -> Iterator[DeployedBroker]:
    """The deployed broker, shared by a module's tests."""
    with deployed_broker() as server:
        yield server


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> embedded.ServerProcess:
    """redis-server running deploy/redis/redis.conf with the ACL from make-acl.sh."""
    wd = tmp_path_factory.mktemp("deploy-redis")
    _generate("redis/make-acl.sh", wd / "users.acl")
    port = embedded.free_port()
    conf = (DEPLOY / "redis/redis.conf").read_text()
    conf = re.sub(r"^bind .*$", "bind 127.0.0.1", conf, flags=re.M)
    conf = re.sub(r"^port .*$", f"port {port}", conf, flags=re.M)
    conf = re.sub(r"^dir .*$", f"dir {wd}", conf, flags=re.M)
    conf = conf.replace("/usr/local/etc/redis/users.acl", str(wd / "users.acl"))
    (wd / "redis.conf").write_text(conf)
    with embedded.ServerProcess("redis", ["redis-server", str(wd / "redis.conf")], port, wd) as s:
        yield s


def mqtt_url(broker: DeployedBroker, role: str, password: str | None = None) -> str:
    """A role's URL: the plain listener inside the compose network."""
    return f"mqtt://{role}:{password or MQTT_PW[role]}@127.0.0.1:{broker.port}"


def device_url(broker: DeployedBroker, device: str, password: str | None = None) -> str:
    """A device's URL: the TLS listener, by the name its certificate is for."""
    return f"mqtts://{device}:{password or MQTT_PW[device]}@localhost:{broker.tls_port}"


def redis_as(server: embedded.ServerProcess, role: str) -> redis_lib.Redis:
    return redis_lib.Redis(port=server.port, username=role, password=REDIS_PW[role])
