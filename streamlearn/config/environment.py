"""Every environment variable streamlearn reads, named once, with the standard library alone
(the paho-only client and `streamlearn.cli.light` read some of them too).

A module that reads a variable uses its constant here. `Settings`' own variables
(`PREFIX` + a field's name: `STREAMLEARN_MQTT_URL`, ...) are documented by `Settings`' fields
(`streamlearn.config.settings.Settings.variables`); those that code without pydantic reads
are named here as well (`SETTINGS`). The rest are declared with their default and meaning
in `VARIABLES`, from which docs/gen_reference.py writes the reference page.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "STREAMLEARN_"  # `Settings`' env_prefix


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, its default (in words) and what it sets."""

    name: str
    default: str
    meaning: str
    read_by: str  # the module that reads it


VARIABLES: dict[str, Variable] = {}


def _declare(name: str, default: str, meaning: str, read_by: str) -> str:
    VARIABLES[name] = Variable(name, default, meaning, read_by)
    return name


# -- fields of `Settings`, read without it too --------------------------------------------
MQTT_URL = PREFIX + "MQTT_URL"
MQTT_CA_FILE = PREFIX + "MQTT_CA_FILE"
REDIS_URL = PREFIX + "REDIS_URL"
TOPIC_PREFIX = PREFIX + "TOPIC_PREFIX"
KEY_PREFIX = PREFIX + "KEY_PREFIX"
METRICS_PORT = PREFIX + "METRICS_PORT"
METRICS_TOKEN = PREFIX + "METRICS_TOKEN"
HTTP_TOKEN = PREFIX + "HTTP_TOKEN"
HTTP_TOKEN_FILE = PREFIX + "HTTP_TOKEN_FILE"
SETTINGS = (
    MQTT_URL,
    MQTT_CA_FILE,
    REDIS_URL,
    TOPIC_PREFIX,
    KEY_PREFIX,
    METRICS_PORT,
    METRICS_TOKEN,
    HTTP_TOKEN,
    HTTP_TOKEN_FILE,
)

# -- read outside `Settings` --------------------------------------------------------------
CONFIG = _declare(
    PREFIX + "CONFIG",
    "`./streamlearn.toml` if it exists, else the built-in demo model",
    "the `streamlearn.toml` a command or worker loads when no `--config` is given",
    "streamlearn.config.defaults",
)
STACK_FILE = _declare(
    PREFIX + "STACK_FILE",
    "`$XDG_RUNTIME_DIR/streamlearn/stack.json`, else `$XDG_STATE_HOME/streamlearn/stack.json`",
    "the run file where `streamlearn up` records its stack (URLs, prefixes), which tools and "
    "clients given no URL connect to",
    "streamlearn.config.runfile",
)
RUNS_DIR = _declare(
    PREFIX + "RUNS_DIR",
    "`$XDG_STATE_HOME/streamlearn/runs`",
    "where `streamlearn up` keeps its run directories of worker logs (`up --runs-dir`)",
    "streamlearn.stack.runlog",
)
LOG_LEVEL = _declare(
    PREFIX + "LOG_LEVEL",
    "`INFO` (`DEBUG` with `-v`)",
    "a worker's log level (DEBUG, INFO, WARNING, ERROR); another value fails the start",
    "streamlearn.runtime",
)
LOG_FORMAT = _declare(
    PREFIX + "LOG_FORMAT",
    "`text`",
    "a worker's log lines on stderr: `text`, or `json` (one object a line: time, level, role, "
    "model, logger, message, exc)",
    "streamlearn.runtime",
)
COLLECTIVE_TIMEOUT_S = _declare(
    PREFIX + "COLLECTIVE_TIMEOUT_S",
    "`60`",
    "multi-host learner: seconds a collective may wait for the other workers before this "
    "worker exits with `WorkerLost` (while the workers start, at least 300)",
    "streamlearn.config.tfconfig",
)
TF_PUBLIC_ADDRESSES = _declare(
    PREFIX + "TF_PUBLIC_ADDRESSES",
    "unset: a public address in `TF_CONFIG` is refused",
    "`allow`: accept public addresses in `TF_CONFIG` (TensorFlow's gRPC server runs any op "
    "for whoever reaches it: only behind a firewall or VPN)",
    "streamlearn.config.tfconfig",
)
CPU_QUOTA = _declare(
    PREFIX + "CPU_QUOTA",
    "unset: the cgroup's quota (`cpu.max`, or v1's `cpu.cfs_quota_us`), if any",
    "the CPUs a worker may use (a number, `1.5`: 2 threads), standing in for its cgroup's "
    "quota; threads (TensorFlow's pools, an actor's BLAS, the learner's prefetch) are "
    "sized to it",
    "streamlearn.config.cpus",
)
TF_CONFIG = _declare(
    "TF_CONFIG",
    "unset (required with `learner.distribute = 'multi_worker'`)",
    "multi-host learner: the cluster's workers and this one's index "
    '(`{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": i}}`)',
    "streamlearn.config.tfconfig",
)
XDG_RUNTIME_DIR = _declare(
    "XDG_RUNTIME_DIR",
    "unset",
    "where the run file goes (`streamlearn/stack.json` under it) unless "
    "`STREAMLEARN_STACK_FILE` is set",
    "streamlearn.config.runfile",
)
XDG_STATE_HOME = _declare(
    "XDG_STATE_HOME",
    "`~/.local/state`",
    "where the run file (without `XDG_RUNTIME_DIR`) and the run directories go",
    "streamlearn.config.runfile, streamlearn.stack.runlog",
)
