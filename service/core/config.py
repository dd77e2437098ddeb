"""Service settings: the one place that reads the environment (and an optional ``.env``).

Every other module receives a `Settings` instance; nothing else calls ``os.environ``.

**Embedded mode** (`Settings.embedded`): ``DATABASE_URL`` is a SQLite URL and ``REDIS_URL``
is unset, i.e. one process on one machine (the zero-configuration default). Anything else
(PostgreSQL, or a Redis worker pool) is a deployment, and the API refuses to start there
without an ``ADMIN_TOKEN`` (`Settings.check_deployable`).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tasmopt.lower.validate import MAX_NESTING, MAX_OPS
from tasmopt.model.config import SERVICE_BEAMS
from tasmopt.tir.codec import MAX_DECODE_DEPTH

__all__ = ["Settings"]

#: ADMIN_TOKEN values refused outright (template placeholders).
_UNSAFE_TOKENS = frozenset({"changethis", "changeme", "admin", "secret", "token"})
#: Least estimated entropy of ADMIN_TOKEN, bits (length x the empirical entropy per character:
#: ``aaaa…`` has none, ``abab…`` one bit per character, token_urlsafe(32) about 230).
MIN_TOKEN_BITS = 64


def default_home() -> Path:
    """Where the embedded defaults live when TASMOPT_HOME is unset: the source checkout the
    package runs from (an editable install: the directory holding ``pyproject.toml`` and
    ``model_store/``), else the user data directory (``~/.local/share/tasmopt`` on Linux,
    platformdirs). The same wherever the process starts: never the working directory."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "tasmopt").is_dir():
        return checkout
    return Path(platformdirs.user_data_dir("tasmopt", appauthor=False))


def _home(data: dict[str, Any]) -> Path:
    return Path(data.get("tasmopt_home") or default_home())


def token_bits(raw: str) -> float:
    """Estimated entropy of a token, bits: its length times the Shannon entropy of its
    character frequencies."""
    counts = Counter(raw)
    n = len(raw)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) * n if n else 0.0


class Settings(BaseSettings):
    """Configuration of one service process. Environment names are the field names upper-cased
    (``DATABASE_URL``, ``REDIS_URL``, ...); defaults give the embedded mode: SQLite under
    TASMOPT_HOME/var (`default_home`), verification in-process, no Redis.
    """

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    tasmopt_home: Path = Field(
        default_factory=default_home,
        description="TASMOPT_HOME: where the embedded defaults live (database and spool under "
        "``var/``, checkpoints under ``model_store/``); default `default_home()`.",
    )
    database_url: str = Field(
        default_factory=lambda data: f"sqlite:///{_home(data) / 'var' / 'tasmopt.db'}",
        description="SQLAlchemy URL of the replay buffer and result cache (default: SQLite at "
        "TASMOPT_HOME/var/tasmopt.db).",
    )
    redis_url: str | None = Field(
        None,
        description="Redis for the RQ verify queue; unset: verification runs in the API process.",
    )
    model_store: Path = Field(
        default_factory=lambda data: _home(data) / "model_store",
        description="Checkpoint directory (default TASMOPT_HOME/model_store).",
    )
    admin_token: SecretStr | None = Field(
        None,
        description="Bearer token of the admin "
        "endpoints; unset disables them (embedded mode "
        "only: required elsewhere).",
    )
    admin_name: str = Field(
        "admin",
        min_length=1,
        max_length=64,
        pattern=r"^[\w.@-]+$",
        description="Who the admin token stands for, as recorded in the admin audit log.",
    )
    model_device: str = Field(
        "cpu", description="Torch device of the model source (``cpu``, ``cuda``, ``cuda:1``)."
    )
    model_beams: int = Field(
        SERVICE_BEAMS,
        ge=1,
        le=256,
        description="Beams per block the model source decodes (its cost grows about "
        "linearly with them). 1: greedy decoding that checks the baseline as a draft, several "
        "tokens per forward pass (tasmopt.model.speculative).",
    )
    model_samples: int = Field(
        0,
        ge=0,
        le=256,
        description="Hypotheses per block the model source draws by temperature sampling "
        "after its MODEL_BEAMS beams (diversity; seeded by the request's seed, so a compile "
        "repeats). 0: beam search only.",
    )
    model_temperature: float = Field(
        1.0, gt=0, le=4.0, description="Sampling temperature of MODEL_SAMPLES."
    )
    model_min_instrs: int = Field(
        0,
        ge=0,
        description="The model source decodes only blocks whose baseline has at least this "
        "many instructions (shorter ones are left to rules and search; each skipped block "
        "saves a beam search). 0: every block.",
    )
    model_precision: Literal["float32", "int8"] = Field(
        "float32",
        description="Weights the model source decodes with: float32, or int8 (dynamically "
        "quantized linear layers, CPU only: about 1.6x faster on 2 cores, and the greedy "
        "candidates differ from float32's on 23 of the real modules' 1,004 blocks; "
        "benchmarks/model.py --per-module --precision float32 int8).",
    )
    model_poll_s: float = Field(
        5.0,
        gt=0,
        description="Seconds between two looks at the "
        "production checkpoint pointer (promotions are picked up "
        "without a restart).",
    )
    phase_refresh_s: float = Field(
        60.0,
        gt=0,
        description="Seconds between two counts of the replay buffer for the phase metric.",
    )

    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Largest request body, bytes."
    )
    max_tir_ops: int = Field(
        MAX_OPS, ge=1, description="Most TIR ops (nested ones included) per request."
    )
    max_tir_functions: int = Field(
        4096,
        ge=1,
        description="Most functions per request (each is lowered, checked and measured even "
        "when empty); beyond: 422 naming the limit.",
    )
    max_block_ops: int = Field(
        5000,
        ge=1,
        description="Most TIR ops in one straight-line block (the largest in the Trident "
        "standard library has 109); beyond: 422 naming the limit.",
    )
    max_tir_depth: int = Field(
        MAX_NESTING,
        ge=1,
        lt=MAX_DECODE_DEPTH,
        description="Deepest nesting of op bodies (IfElse/IfOnly/Loop/ProofBlock).",
    )

    verify_deadline_s: float = Field(
        5.0,
        gt=0,
        description="Seconds to wait for the worker "
        "pool per verify call before checking in-process.",
    )
    verify_hard_deadline_s: float = Field(
        30.0,
        gt=0,
        description="Seconds after which checks "
        "still pending are reported unverified (baseline kept).",
    )
    verify_max_jobs: int = Field(
        8,
        ge=1,
        description="Most RQ jobs one verify call is split "
        "into (about twice the number of workers).",
    )
    verify_help: bool = Field(
        True,
        description="While a compile waits for its verify jobs, the API process checks the "
        "last ones still queued itself (the workers take the queue from the front): a request "
        "under a short deadline gets its checks done even when every worker is deepening.",
    )
    search_budget_s: float = Field(
        0.5, ge=0, description="Default block-search budget per request, seconds."
    )
    max_search_budget_s: float = Field(
        10.0, ge=0, description="Largest budget a request may ask for, seconds."
    )
    witnesses: int = Field(
        16, ge=16, le=1024, description="Default differential witnesses per check."
    )
    sync_sources: list[Literal["rules", "search", "model"]] = Field(
        ["rules", "search"],
        description="Candidate sources of a synchronous compile whose request names none. "
        "The model is left out by default: on this 2-core machine it adds little at equal "
        "budget (issue 12's marginal-contribution table) and costs seconds per module; it "
        "works where time is cheap: offline, and in background deepening where it pays "
        "(DEEPEN_SOURCES). A request may still ask for it (options.sources).",
    )

    spool_dir: Path = Field(
        default_factory=lambda data: _home(data) / "var" / "spool",
        description="Where results wait while the database is down (default "
        "TASMOPT_HOME/var/spool).",
    )
    spool_retry_s: float = Field(5.0, gt=0, description="Seconds between spool drain attempts.")
    db_connect_timeout_s: int = Field(3, ge=1, description="PostgreSQL connect timeout, seconds.")
    migrate_on_start: bool = Field(True, description="Run `alembic upgrade head` at start-up.")
    compile_slots: int = Field(
        0,
        ge=0,
        le=256,
        description="Compiles one API process runs "
        "at once; more wait their turn, first come first served "
        "(0: the number of CPUs). Compiles are CPU-bound: time-slicing "
        "many at once only stretches every one of them.",
    )
    compile_processes: int = Field(
        -1,
        ge=-1,
        le=64,
        description="Processes that run synchronous compiles in the embedded mode (a request's "
        "independent functions in parallel; the API process keeps the GIL for health and "
        "metrics). -1: auto: CPUs - 1 on a machine with 4 or more CPUs in the embedded mode, "
        "else none (on 2 CPUs the pool, the API and the deepening process contend: "
        "benchmarks/latency.py measured P90 cold 443 ms and warm 54 ms with 2 processes, 280 "
        "and 23 ms without); 0: compiles run on the API's threads.",
    )
    compile_queue: int = Field(
        64,
        ge=0,
        le=4096,
        description="Compiles that may wait for a slot; beyond that `POST /compile` answers "
        "503 with Retry-After at once instead of queueing without bound.",
    )
    compile_deadline_s: float = Field(
        30.0,
        gt=0,
        description="Wall-clock budget of one synchronous compile, seconds: past it every "
        "stage returns what is proven (at worst the baseline, unchanged).",
    )
    default_deadline_ms: int = Field(
        200,
        ge=1,
        description="Deadline of a synchronous compile whose request sets no "
        "`options.deadline_ms`, milliseconds: past it each function gets what is verified, at "
        "worst its baseline, and is deepened in the background. Chosen so that P90 per request "
        "stays under 300 ms on the real modules (benchmarks/latency.py).",
    )
    result_cache: bool = Field(
        True, description="Serve and store per-function results (table function_results)."
    )
    cache_spot_check: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Share of cache hits proven again on fresh witnesses in the background "
        "(a failure deletes the entry and logs an error).",
    )
    deepen: bool = Field(
        True,
        description="Deepen functions answered before their search was complete: in the "
        "background (RQ queue `deepen` with REDIS_URL, else one thread of this process).",
    )
    deepen_budget_s: float = Field(
        1.0,
        gt=0,
        description="Search budget per function of a deepening run, seconds; a complete run at "
        "this budget makes a function `final` (not deepened again). 1 s: the 30 real modules "
        "deepen in 135 s of one core for 58,390 cycles, against 240 s for 58,364 at 2 s and "
        "79 s for 58,423 at 0.5 s (issue 34).",
    )
    deepen_sources: list[Literal["rules", "search", "model"]] = Field(
        ["rules", "search"],
        description="Candidate sources of a deepening run. The model joins where it pays "
        "(`benchmarks/model.py --marginal`, issue 35): the shipped checkpoint found no "
        "cycle more on coin, keccak256 and sha256 and made their deepening 2.5x slower "
        "(54 s -> 136 s of one core).",
    )
    deepen_timeout_s: float = Field(
        120.0, gt=0, description="Deadline of one deepening run, seconds."
    )
    deepen_queue: int = Field(
        256,
        ge=1,
        description="Deepening runs that may wait; beyond that new ones are dropped (counted).",
    )
    deepen_claim_s: int = Field(
        3600,
        ge=1,
        description="Seconds a function stays claimed by a deepening run (no duplicate run "
        "meanwhile; a run that failed is retried after this).",
    )
    retry_after_s: int = Field(
        2, ge=1, description="Retry-After of a 503 (overload) or 429 (per client), seconds."
    )
    compile_per_client: int = Field(
        0,
        ge=0,
        description="Compiles one client address may hold at once in one API process "
        "(0: no limit); beyond: 429 with Retry-After.",
    )
    gil_switch_interval_s: float = Field(
        0.001,
        gt=0,
        le=0.1,
        description="sys.setswitchinterval of the API process: how soon the event loop gets "
        "the GIL back from compile threads (Python's default is 0.005).",
    )
    async_threads: int = Field(
        2,
        ge=1,
        le=64,
        description="Threads running `POST /compile/jobs` in-process when REDIS_URL is unset.",
    )
    compile_job_timeout_s: int = Field(
        300,
        ge=1,
        description="Longest an async compile job may run on a worker, seconds (RQ job timeout).",
    )
    compile_job_retries: int = Field(
        1, ge=0, le=10, description="Times an async compile job is retried after its worker died."
    )
    job_result_ttl_s: int = Field(
        86400,
        ge=60,
        description="Seconds RQ keeps a job's result (the database keeps it for good).",
    )
    worker_metrics_port: int = Field(
        9100, ge=0, le=65535, description="Port of a worker's Prometheus endpoint; 0 disables it."
    )
    finetune_cron: str = Field(
        "*/15 * * * *",
        description="When the scheduler enqueues the finetune check (cron syntax, local time).",
    )
    finetune_min_results: int = Field(
        50,
        ge=1,
        description="New replay-buffer results that trigger a micro-finetune (design §4 Stage 3).",
    )
    finetune_max_age_h: float = Field(
        24.0, gt=0, description="Hours after which any new result triggers a micro-finetune."
    )
    finetune_steps: int = Field(
        200, ge=1, description="Optimizer steps of one micro-finetune (design §4 Stage 3)."
    )
    auto_promote: bool = Field(
        False,
        description="Promote a micro-finetuned checkpoint that passes the regression guard "
        "(else it waits as a candidate for POST /admin/checkpoints/{version}/promote).",
    )
    finetune_device: str | None = Field(
        None, description="Torch device of micro-finetunes (default: cuda if available)."
    )
    corpus_dir: Path | None = Field(
        default_factory=lambda data: _home(data) / "corpus",
        description="The learning corpus; its holdout modules (corpus/holdout.txt) are the "
        "regression guard's holdout (default TASMOPT_HOME/corpus; missing: the guard uses the "
        "labeled online results only).",
    )
    guard_blocks: int = Field(
        200, ge=1, description="Most holdout blocks the regression guard decodes."
    )
    log_level: str = Field("INFO", description="Root log level.")

    @field_validator("admin_token")
    @classmethod
    def _refuse_weak_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None:
            return v
        raw = v.get_secret_value()
        if raw.lower() in _UNSAFE_TOKENS or len(raw) < 16 or token_bits(raw) < MIN_TOKEN_BITS:
            raise ValueError(
                "ADMIN_TOKEN must be at least 16 characters, not a placeholder, and not "
                f"guessable (estimated {token_bits(raw):.0f} bits of entropy, need "
                f"{MIN_TOKEN_BITS}; try: python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        return v

    @field_validator("redis_url")
    @classmethod
    def _blank_is_none(cls, v: str | None) -> str | None:
        return v or None

    @property
    def compile_pool_size(self) -> int:
        """Processes of the compile pool (`compile_processes` resolved; 0: no pool)."""
        if self.compile_processes >= 0:
            return self.compile_processes
        cpus = os.cpu_count() or 1
        return cpus - 1 if self.embedded and cpus >= 4 else 0

    @property
    def embedded(self) -> bool:
        """True in the zero-configuration mode: SQLite database and no Redis."""
        return self.database_url.startswith("sqlite") and self.redis_url is None

    def check_deployable(self) -> None:
        """Refuse a deployment without an admin token.

        Raises:
            ValueError: not `embedded` and ``ADMIN_TOKEN`` is unset.
        """
        if not self.embedded and self.admin_token is None:
            raise ValueError(
                "ADMIN_TOKEN is required outside the embedded mode (DATABASE_URL is not SQLite "
                "or REDIS_URL is set); generate one with: python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'"
            )

    @model_validator(mode="after")
    def _deadlines_ordered(self) -> Settings:
        if self.verify_hard_deadline_s < self.verify_deadline_s:
            raise ValueError("VERIFY_HARD_DEADLINE_S must be >= VERIFY_DEADLINE_S")
        if self.max_search_budget_s < self.search_budget_s:
            raise ValueError("MAX_SEARCH_BUDGET_S must be >= SEARCH_BUDGET_S")
        if self.default_deadline_ms > self.compile_deadline_s * 1000:
            raise ValueError("DEFAULT_DEADLINE_MS must be <= COMPILE_DEADLINE_S * 1000")
        return self
