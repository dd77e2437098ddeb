"""Service settings: the one place that reads the environment (and an optional ``.env``).

Every other module receives a `Settings` instance; nothing else calls ``os.environ``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]

#: ADMIN_TOKEN values refused outright (template placeholders).
_UNSAFE_TOKENS = frozenset({"changethis", "changeme", "admin", "secret", "token"})


class Settings(BaseSettings):
    """Configuration of one service process. Environment names are the field names upper-cased
    (``DATABASE_URL``, ``REDIS_URL``, ...); defaults give the embedded mode: SQLite under
    ``var/``, verification in-process, no Redis.
    """

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", frozen=True)

    database_url: str = Field("sqlite:///var/tasmopt.db",
                              description="SQLAlchemy URL of the replay buffer.")
    redis_url: str | None = Field(None, description="Redis for the RQ verify queue; unset: "
                                  "verification runs in the API process.")
    model_store: Path = Field(Path("model_store"), description="Checkpoint directory.")
    admin_token: SecretStr | None = Field(None, description="Bearer token of the admin "
                                          "endpoints; unset disables them.")

    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Largest request body, bytes.")
    max_tir_ops: int = Field(200_000, ge=1, description="Most TIR ops (nested ones included) per request.")
    max_tir_depth: int = Field(64, ge=1, description="Deepest nesting of op bodies (IfElse/IfOnly/Loop/ProofBlock).")

    verify_deadline_s: float = Field(5.0, gt=0, description="Seconds to wait for the worker "
                                     "pool per verify call before checking in-process.")
    verify_hard_deadline_s: float = Field(30.0, gt=0, description="Seconds after which checks "
                                          "still pending are reported unverified (baseline kept).")
    verify_max_jobs: int = Field(8, ge=1, description="Most RQ jobs one verify call is split "
                                 "into (about twice the number of workers).")
    search_budget_s: float = Field(2.0, ge=0, description="Default block-search budget per request, seconds.")
    max_search_budget_s: float = Field(10.0, ge=0, description="Largest budget a request may ask for, seconds.")
    witnesses: int = Field(16, ge=16, le=1024, description="Default differential witnesses per check.")

    spool_dir: Path = Field(Path("var/spool"), description="Where results wait while the database is down.")
    spool_retry_s: float = Field(5.0, gt=0, description="Seconds between spool drain attempts.")
    db_connect_timeout_s: int = Field(3, ge=1, description="PostgreSQL connect timeout, seconds.")
    migrate_on_start: bool = Field(True, description="Run `alembic upgrade head` at start-up.")
    log_level: str = Field("INFO", description="Root log level.")

    @field_validator("admin_token")
    @classmethod
    def _refuse_weak_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None:
            return v
        raw = v.get_secret_value()
        if raw.lower() in _UNSAFE_TOKENS or len(raw) < 16:
            raise ValueError("ADMIN_TOKEN must be at least 16 characters and not a placeholder "
                             "(try: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        return v

    @field_validator("redis_url")
    @classmethod
    def _blank_is_none(cls, v: str | None) -> str | None:
        return v or None

    @model_validator(mode="after")
    def _deadlines_ordered(self) -> Settings:
        if self.verify_hard_deadline_s < self.verify_deadline_s:
            raise ValueError("VERIFY_HARD_DEADLINE_S must be >= VERIFY_DEADLINE_S")
        if self.max_search_budget_s < self.search_budget_s:
            raise ValueError("MAX_SEARCH_BUDGET_S must be >= SEARCH_BUDGET_S")
        return self
