"""Async compiles: `POST /compile/jobs` (202 and an id), `GET /compile/jobs/{id}` (status and,
once finished, the same response as `POST /compile`)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from service import runners
from service.api.deps import (
    BaselineDep,
    BreakerDep,
    CompileBody,
    CompilerDep,
    FactoryDep,
    FollowupDep,
    RunnerDep,
    SettingsDep,
    SlotsDep,
    SpoolDep,
    VerifierDep,
)
from service.api.routes.compile import BODY_DOC
from service.core import compiling
from service.core.schemas import CompileResponse, ErrorResponse, JobAccepted, JobStatusOut
from service.errors import ERROR_RESPONSES, JobNotFound
from worker.compile import JobContext

router = APIRouter(tags=["compile"])


@router.post(
    "/compile/jobs",
    status_code=202,
    response_model=JobAccepted,
    responses=ERROR_RESPONSES,
    openapi_extra=BODY_DOC,
)
def submit_compile_job(
    request: Request,
    response: Response,
    body: CompileBody,
    settings: SettingsDep,
    factory: FactoryDep,
    spool: SpoolDep,
    breaker: BreakerDep,
    compiler: CompilerDep,
    verify: VerifierDep,
    baseline: BaselineDep,
    runner: RunnerDep,
    slots: SlotsDep,
    followup: FollowupDep,
) -> JobAccepted:
    """Queue a compile; poll `status_url` for the result.

    The request is checked now (the same 4xx as `POST /compile` for malformed JSON, invalid
    TIR or limits); problems only the compile finds (an unparsable `baseline_tasm`) end the
    job `failed` with the error. The job id is also this request's `X-Request-ID`.
    """
    compiling.precheck(body, settings)
    job_id: uuid.UUID = request.state.request_id
    ctx = JobContext(
        settings=settings,
        session_factory=factory,
        spool=spool,
        breaker=breaker,
        compiler=compiler,
        verify=verify,
        baseline=baseline,
        slots=slots,
        followup=followup,
    )
    backend = runners.submit(job_id, body.model_dump(mode="json", exclude_unset=True), ctx, runner)
    url = request.url_for("get_compile_job", job_id=str(job_id)).path
    response.headers["Location"] = url
    return JobAccepted(id=job_id, status="queued", backend=backend, status_url=url)


@router.get(
    "/compile/jobs/{job_id}",
    response_model=JobStatusOut,
    responses={
        404: {"model": ErrorResponse, "description": "No such job."},
        503: {"model": ErrorResponse, "description": "Job store unreachable."},
    },
)
def get_compile_job(job_id: uuid.UUID, factory: FactoryDep, runner: RunnerDep) -> JobStatusOut:
    """Status of an async compile: `queued`, `started`, `finished` (with `result`) or
    `failed` (with `error`)."""
    view = runners.lookup(job_id, session_factory=factory, runner=runner)
    if view is None:
        raise JobNotFound(f"no compile job {job_id}")
    result = CompileResponse.model_validate(view.response) if view.response else None
    return JobStatusOut(
        id=view.id,
        status=view.status,
        backend=view.backend,
        created_at=view.created_at,
        started_at=view.started_at,
        finished_at=view.finished_at,
        result=result,
        error=view.error,
    )
