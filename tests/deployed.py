"""Servers run with the deploy/ files (auth, ACLs) and clients logged in as each role.

A pytest plugin (`pytest_plugins` in conftest.py), so that any test module can use the
`broker` and `acl_redis` fixtures.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import redis as redis_lib

from streamlearn import embedded

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ROLES = ("ingest", "actor", "learner", "device")
MQTT_PW = {role: f"mqtt-{role}-{uuid.uuid4().hex}" for role in ROLES}
REDIS_PW = {role: f"redis-{role}-{uuid.uuid4().hex}" for role in ("ingest", "learner", "actor")}


def _secrets_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({f"MQTT_{r.upper()}_PASSWORD": pw for r, pw in MQTT_PW.items()})
    env.update({f"REDIS_{r.upper()}_PASSWORD": pw for r, pw in REDIS_PW.items()})
    return env


def _generate(script: str, out: Path) -> None:
    """Run a deploy/ generator script (passwords, ACLs) with this session's secrets."""
    cmd = ["sh", str(DEPLOY / script), str(out)]
    subprocess.run(cmd, env=_secrets_env(), check=True, cwd=out.parent, capture_output=True)


@pytest.fixture(scope="module")
def broker() -> embedded.ServerProcess:
    """mosquitto running deploy/mosquitto/* with a password file from make-passwd.sh."""
    # mosquitto started as root reads its password file as the `mosquitto` user, and
    # pytest's temporary directories are private: use a world-readable one.
    wd = Path(tempfile.mkdtemp(prefix="sl-deploy-mosquitto-"))
    wd.chmod(0o777)
    _generate("mosquitto/make-passwd.sh", wd / "passwd")
    port = embedded.free_port()
    conf = (DEPLOY / "mosquitto/mosquitto.conf").read_text()
    conf = re.sub(r"^listener 1883$", f"listener {port} 127.0.0.1", conf, flags=re.M)
    conf = conf.replace("/mosquitto/config/passwd", str(wd / "passwd"))
    conf = conf.replace("/mosquitto/config/acl", str(DEPLOY / "mosquitto/acl"))
    conf = conf.replace("/mosquitto/data/", f"{wd}/")
    (wd / "mosquitto.conf").write_text(conf)
    server = embedded.ServerProcess(
        "mosquitto", ["mosquitto", "-c", str(wd / "mosquitto.conf")], port, wd
    )
    with server:
        yield server
    shutil.rmtree(wd, ignore_errors=True)


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


@pytest.fixture
def public_dir() -> Path:
    """A directory mosquitto can read after dropping root (pytest's tmp dirs are private)."""
    path = Path(tempfile.mkdtemp(prefix="sl-deploy-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def mqtt_url(broker: embedded.ServerProcess, role: str, password: str | None = None) -> str:
    return f"mqtt://{role}:{password or MQTT_PW[role]}@127.0.0.1:{broker.port}"


def redis_as(server: embedded.ServerProcess, role: str) -> redis_lib.Redis:
    return redis_lib.Redis(port=server.port, username=role, password=REDIS_PW[role])
