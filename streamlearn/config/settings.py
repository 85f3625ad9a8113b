"""The environment's connection and naming settings (`STREAMLEARN_*`), apart from the TOML.

Read once at start; a bad value fails with a message that names the variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core.core_schema import ValidatorFunctionWrapHandler
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamlearn.config import environment, runfile
from streamlearn.config.policies import ListenAddress, describe_error
from streamlearn.errors import ConfigError


class Settings(BaseSettings):
    """Connections and naming, from `STREAMLEARN_*` environment variables.

    An unset URL means "not given": `streamlearn up` then starts its own server, and a role
    run alone or a client tool uses the stack that `streamlearn up` recorded in its run file
    (`streamlearn.config.runfile`), else the local default. With neither URL given the file's
    prefixes are taken too, unless set: they name that stack's topics and keys.
    """

    model_config = SettingsConfigDict(env_prefix=environment.PREFIX, frozen=True, extra="ignore")

    mqtt_url: str | None = Field(
        None,
        description="the broker, mqtt://user:pass@host:1883 or mqtts://...; unset: the stack "
        "`streamlearn up` recorded, else mqtt://localhost:1883 (`up` starts its own broker)",
    )
    redis_url: str | None = Field(
        None,
        description="Redis, redis://user:pass@host:6379/0; unset: the recorded stack's, else "
        "redis://localhost:6379/0 (`up` starts its own)",
    )
    mqtt_ca_file: str | None = Field(None, description="CA bundle for mqtts:// (TLS)")
    topic_prefix: str = Field(
        "streamlearn",
        pattern=r"^[^#+$][^#+]*$",
        description="first level of every MQTT topic ({prefix}/{model}/...); no wildcards, "
        "not starting with $",
    )
    key_prefix: str = Field(
        "sl",
        pattern=r"^[^{}\s]+$",
        description="first part of every Redis key ({kp}:{model}:...); no braces or whitespace",
    )
    share_group: str = Field(
        "streamlearn",
        pattern=r"^[^/#+]+$",
        description="the roles' shared-subscription group ($share/{group}/...): processes of "
        "one group split the messages between them",
    )
    instance: str | None = Field(
        None, description="stable per-process id (client ids, presence); unset: the hostname"
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="serve Prometheus /metrics, /livez and /readyz on this port (0: any free); "
        "unset: off",
    )
    metrics_host: ListenAddress = Field(
        "127.0.0.1",
        description="the address /metrics, /livez and /readyz listen on: loopback unless "
        "another machine must scrape (compose: 0.0.0.0, inside its own network)",
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="a bearer token /metrics then requires (/livez and /readyz stay open, "
        "for probes); unset: none. `streamlearn up` sets one per run, in its run file",
    )
    http_token: SecretStr | None = Field(
        None,
        description="a bearer token the actors' HTTP door then requires on every route but "
        "/v2/health/live and /v2/health/ready; unset: no token",
    )
    http_token_file: Path | None = Field(
        None,
        description="a file holding that token (a Kubernetes Secret mounted as a file), "
        "read once at start; a missing or empty file fails the start",
    )

    _stack: runfile.StackRecord | None = PrivateAttr(None)
    _token: str | None = PrivateAttr(None)

    @field_validator("http_token", "metrics_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("the token is empty")
        return value

    @field_validator("http_token_file")
    @classmethod
    def _check_token_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        """Read now: a missing or empty Secret fails the start, not the first request."""
        if value is None:
            return None
        if info.data.get("http_token") is not None:
            raise ValueError("set this or STREAMLEARN_HTTP_TOKEN, not both")
        if not _read_token(value):
            raise ValueError(f"{value} holds no token")
        return value

    @model_validator(mode="after")
    def _keep_token(self) -> Settings:
        token = self.http_token.get_secret_value() if self.http_token else None
        self._token = _read_token(self.http_token_file) if self.http_token_file else token
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _from_stack(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Settings:
        """Neither URL given: the live stack of `streamlearn up`, read once, if there is one."""
        found = None
        if isinstance(data, dict) and not data.get("mqtt_url") and not data.get("redis_url"):
            found = runfile.live()
            if found is not None:
                data = {
                    "topic_prefix": found.topic_prefix,
                    "key_prefix": found.key_prefix,
                    **data,
                }
        settings = handler(data)
        settings._stack = found
        return settings

    @classmethod
    def variables(cls) -> list[environment.Variable]:
        """Each field as the environment variable that sets it (the reference's table)."""
        return [
            environment.Variable(
                f"{environment.PREFIX}{name.upper()}",
                "unset" if field.default is None else f"`{field.default}`",
                field.description or "",
                __name__,
            )
            for name, field in cls.model_fields.items()
        ]

    @property
    def bearer_token(self) -> str | None:
        """The token the HTTP door requires (`http_token` or `http_token_file`'s), if any."""
        return self._token

    @property
    def stack(self) -> runfile.StackRecord | None:
        """The recorded stack these settings fall back on (None: explicit URLs, or none)."""
        return self._stack

    def which_stack(self) -> str:
        """One line for a terminal: the broker these settings reach, and why that one."""
        return runfile.describe(self.mqtt_url, self._stack, self.mqtt, environment.MQTT_URL)

    def as_env(self) -> dict[str, str]:
        """The `STREAMLEARN_*` variables that give a child process these settings."""
        return {
            f"{environment.PREFIX}{name.upper()}": (
                value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            )
            for name, value in self.model_dump().items()
            if value is not None
        }

    @property
    def mqtt(self) -> str:
        """The given URL, else the recorded stack's, else the local default."""
        stacked = self._stack.mqtt_url if self._stack else None
        return self.mqtt_url or stacked or "mqtt://localhost:1883"

    @property
    def redis(self) -> str:
        stacked = self._stack.redis_url if self._stack else None
        return self.redis_url or stacked or "redis://localhost:6379/0"


def _read_token(path: Path) -> str:
    """The token in a file, without the newline a Secret's file often ends in."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read it: {exc}") from None


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(
            f"environment: {describe_error(exc, prefix=environment.PREFIX)}"
        ) from None
