"""Request and response bodies of the HTTP API, split by role (request, public result, error).

`CompileOptionsIn` mirrors the user-settable fields of `tasmopt.report.CompileOptions`; a test
keeps the two in step. Report shapes mirror `tasmopt.report` (`to_dict()` output).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "CompileOptionsIn",
    "CompileRequest",
    "CandidateStatsOut",
    "BlockOut",
    "MismatchOut",
    "FunctionOut",
    "CompileResponse",
    "ErrorResponse",
    "CheckOut",
    "ReadyResponse",
    "HealthResponse",
    "JobAccepted",
    "JobStatusOut",
    "ReasonIn",
    "RegisterIn",
    "CheckpointPublic",
    "PromotionOut",
    "AdminActionPublic",
    "FinetuneRunPublic",
    "FinetuneAccepted",
    "PhaseOut",
]

Source = Literal["compiler", "rules", "search", "model", "client"]


class CompileOptionsIn(BaseModel):
    """Per-request knobs; omitted ones take the server's defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    isa: Literal["release", "head"] | None = Field(
        None, description="`release` (dot steps, what Trident targets) or `head` (horner steps)."
    )
    witnesses: int | None = Field(
        None, ge=16, le=1024, description="Differential witnesses per check."
    )
    seed: int | None = Field(None, ge=0, lt=2**63, description="Witness seed (deterministic).")
    sources: list[Literal["rules", "search", "model"]] | None = Field(
        None, description="Candidate sources to consult; `[]` returns the baseline."
    )
    search_budget_s: float | None = Field(None, ge=0, description="Block-search budget, seconds.")
    strict: bool | None = Field(None, description="Reject TIR with ops that cannot be lowered.")
    deadline_ms: int | None = Field(
        None,
        ge=1,
        description="Milliseconds the synchronous answer may take (default DEFAULT_DEADLINE_MS, "
        "at most COMPILE_DEADLINE_S): each function gets what is verified by then, at worst its "
        "baseline; functions cut short are deepened in the background (`status: improving`).",
    )
    use_cache: bool | None = Field(
        None,
        description="Answer from, and store into, the per-function result cache (default "
        "true); false computes every function afresh.",
    )
    inline: bool | None = Field(
        None,
        description="Run the function-level inline pass with the rules (default true): small "
        "callees inlined where proven and cheaper.",
    )


class CompileRequest(BaseModel):
    """`POST /compile` body: TIR in the wire format of spec/tir.md §2."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "tir": [
                        {"FnStart": "add_mul"},
                        {"Dup": 1},
                        {"Dup": 1},
                        "Add",
                        {"Dup": 0},
                        {"Dup": 3},
                        "Mul",
                        {"Swap": 3},
                        {"Pop": 3},
                        "Return",
                        "FnEnd",
                    ],
                }
            ]
        },
    )

    tir: list[Any] = Field(description="Ops, with FnStart/FnEnd around each function.")
    baseline_tasm: str | None = Field(
        None,
        description="The compiler's TASM for the same TIR: what to beat and to fall back "
        "to. Omitted: our own lowering is the baseline.",
    )
    options: CompileOptionsIn | None = None


class CandidateStatsOut(BaseModel):
    generated: int = 0
    valid: int = 0


class BlockOut(BaseModel):
    """One straight-line block (see `tasmopt.report.BlockReport`)."""

    index: int
    path: str
    source: Source
    tasm: list[str]
    baseline_tasm: list[str]
    cycles: int = Field(description="Clock cycles of one pass through the block.")
    baseline_cycles: int
    verified_by: str | None = None
    candidates: dict[str, CandidateStatsOut] = {}
    build_result_id: uuid.UUID | None = None


class MismatchOut(BaseModel):
    cause: str
    witness: int = -1
    known_bug: str | None = None


class FunctionOut(BaseModel):
    """One function (see `tasmopt.report.FunctionReport`)."""

    name: str
    source: Source
    cycles: int | None = Field(
        description="Clock cycles of a call, max over witnesses; null if not measured "
        "(`measured` false, `reason` says why)."
    )
    baseline_cycles: int | None = Field(description="The baseline's; null if not measured.")
    cycle_reduction: float | None = Field(
        description="(baseline - cycles) / baseline; null if not measured."
    )
    measured: bool = Field(
        True,
        description="False when the function was returned unchanged without running it "
        "(the request's deadline cut it first, or it was outside `only`): its costs and "
        "heights are null, never 0.",
    )
    heights: dict[str, int] | None = Field({}, description="AET table heights, rows.")
    baseline_heights: dict[str, int] | None = {}
    padded_height: int | None = 0
    baseline_padded_height: int | None = 0
    halted: int = Field(
        0,
        description="Witnesses on which the baseline returned normally; "
        "0 means cycles were measured on failing runs.",
    )
    fallback: bool
    reason: str | None = None
    mismatch: MismatchOut | None = None
    unlowerable: list[str] = []
    own_cycles: int | None = Field(
        None,
        description="Cycles with the callees' baseline "
        "code (the function's own saving; where the inline pass rewrote it, its saving "
        "before inlining plus what inlining gained); null if no callee was improved.",
    )
    notes: list[str] = Field([], description="What was left alone and why.")
    rewrites: list[str] = Field(
        [],
        description="Function-level passes whose rewrite was kept, in the order they ran "
        "(inline, loops, dots, ...).",
    )
    rejections: dict[str, int] = Field(
        {},
        description="Verifier rejections of candidates by "
        "reason class (guards, degree, different, unprovable, "
        "function).",
    )
    blocks: list[BlockOut] = []
    tir_hash: str = Field("", description="sha256 of the function's canonical TIR JSON.")
    status: Literal["final", "improving"] = Field(
        "final",
        description="`improving`: cut by the deadline or searched briefly; a better program "
        "may be served for the same function later (background deepening).",
    )
    cache: Literal["hit", "miss", "off"] = Field(
        "off", description="Served from the per-function result cache (`hit`) or computed."
    )
    build_result_id: uuid.UUID | None = None


class CompileResponse(BaseModel):
    """The cheapest verified TASM (or the baseline, unchanged) and how it was obtained."""

    request_id: uuid.UUID
    tasm: str
    tir_hash: str
    functions: list[FunctionOut]
    cycles: int | None = Field(
        description="Sum over the measured functions; null if the optimizer failed "
        "(fallback) or no function was measured."
    )
    baseline_cycles: int | None = Field(
        description="The baseline's clock cycles over the same measured functions."
    )
    unmeasured: int = Field(
        0,
        description="Functions left out of `cycles` and `baseline_cycles` because they were "
        "not measured (their `cycles` are null).",
    )
    model_version: str | None = None
    timings: dict[str, float] = Field(
        description="Seconds per stage, `total` (the compile) and `persist` (the rows)."
    )
    fallback: bool = Field(
        description="The optimizer failed and the baseline was served as is, or the TIR of "
        "some function cannot be lowered to valid TASM: that function is returned as the "
        "toolchain emits it (it does not assemble). `fallback_reason` says which."
    )
    fallback_reason: str | None = None
    build_result_ids: list[uuid.UUID] = Field(
        description="Stored rows: function rows each followed by its block rows."
    )
    stored: Literal["database", "spool", "lost"] = Field(
        description="Where the rows went: `spool` rows reach the database when it is back."
    )


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body."""

    code: str = Field(description="Stable machine-readable kind, e.g. `invalid_tir`.")
    message: str = Field(description="One line naming the problem and where it is.")
    path: str | None = Field(None, description="TIR path of the offending op.")
    line: int | None = Field(None, description="1-based line (JSON body or baseline_tasm).")
    column: int | None = None
    errors: list[str] | None = Field(None, description="Every problem found, when several.")
    request_id: uuid.UUID | None = None


class CheckOut(BaseModel):
    ok: bool
    detail: str | None = None


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    ready: bool
    database: CheckOut
    schema_revision: str | None = None
    schema_head: str | None = None
    redis: CheckOut | None = Field(None, description="Null when REDIS_URL is not set.")
    spooled_rows: int = Field(0, description="Rows waiting for the database.")


# -- async compile jobs ------------------------------------------------------------------------

JobStatus = Literal["queued", "started", "finished", "failed"]


class JobAccepted(BaseModel):
    """`POST /compile/jobs` answer (202): poll `status_url`."""

    id: uuid.UUID = Field(
        description="Job id (also the RQ job id and the request id of its BuildResult rows)."
    )
    status: JobStatus = "queued"
    backend: Literal["rq", "thread"] = Field(
        description="`rq`: the worker pool; `thread`: the API process (no Redis)."
    )
    status_url: str


class JobStatusOut(BaseModel):
    """`GET /compile/jobs/{id}`: where the job is, and its result once finished."""

    id: uuid.UUID
    status: JobStatus
    backend: Literal["rq", "thread"] | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: CompileResponse | None = Field(None, description="Set when finished.")
    error: str | None = Field(None, description="`code: message` when failed.")


# -- admin -------------------------------------------------------------------------------------


class ReasonIn(BaseModel):
    """Why: recorded in the audit log with who and when."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=3, max_length=2000, description="Why this is done.")

    @field_validator("reason", "path", check_fields=False)
    @classmethod
    def _no_nul(cls, v: str) -> str:
        if "\x00" in v:  # no database stores it in a text column
            raise ValueError("must not contain NUL characters")
        return v


class RegisterIn(ReasonIn):
    """Register a checkpoint directory inside MODEL_STORE."""

    path: str = Field(
        min_length=1,
        max_length=1024,
        description="Directory, relative to MODEL_STORE (e.g. `v3`) or absolute inside it.",
    )
    promote: bool = Field(False, description="Promote it right away.")


class CheckpointPublic(BaseModel):
    """A registered checkpoint."""

    model_config = ConfigDict(from_attributes=True)

    version: str
    parent: str | None
    stage: str
    status: Literal["candidate", "production", "archived", "rejected"]
    metrics: dict[str, Any]
    sha256: str
    path: str
    created_at: datetime | None
    promoted_at: datetime | None


class PromotionOut(BaseModel):
    """Result of a promote or a roll-back."""

    production: CheckpointPublic
    previous: CheckpointPublic | None = Field(
        None, description="Archived (promote) or rejected (rollback)."
    )
    action_id: int = Field(description="Audit log entry.")


class AdminActionPublic(BaseModel):
    """One audit log entry."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    reason: str
    detail: dict[str, Any]


class FinetuneRunPublic(BaseModel):
    """One run of the finetune check."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    started_at: datetime
    finished_at: datetime | None
    trigger: str
    outcome: str
    new_results: int
    checkpoint_version: str | None
    job_id: str | None
    detail: dict[str, Any]


class FinetuneAccepted(BaseModel):
    """`POST /admin/finetune` answer (202)."""

    job_id: str
    backend: Literal["rq", "thread"]
    action_id: int


class PhaseOut(BaseModel):
    """Learning phase (design §4), replay-buffer counts and the production checkpoint."""

    phase: Literal["A", "B"]
    detail: dict[str, Any]
    buffer: dict[str, Any] = Field(
        description="rows, functions, blocks, online (model-proposed, valid, non-fallback blocks "
        "cheaper than the baseline), by_source, fallback, the model's judged candidates."
    )
    production: CheckpointPublic | None
    model_loaded: str | None = Field(
        description="Version whose model source this API process serves (null: none loaded)."
    )
    last_finetune: FinetuneRunPublic | None
