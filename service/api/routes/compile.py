"""`POST /compile`: TIR in, the cheapest verified TASM out (the baseline if nothing beats it)."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request

from service.api.deps import (
    BaselineDep,
    BreakerDep,
    CompileBody,
    CompilerDep,
    SessionDep,
    SettingsDep,
    SlotsDep,
    SpoolDep,
    VerifierDep,
)
from service.core import compiling
from service.core.metrics import observe_compile
from service.core.schemas import CompileResponse
from service.errors import ERROR_RESPONSES

router = APIRouter(tags=["compile"])

BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/CompileRequest"}}
        },
    }
}


@router.post(
    "/compile", response_model=CompileResponse, responses=ERROR_RESPONSES, openapi_extra=BODY_DOC
)
def compile_tir(
    request: Request,
    body: CompileBody,
    settings: SettingsDep,
    compiler: CompilerDep,
    verify: VerifierDep,
    baseline: BaselineDep,
    session: SessionDep,
    spool: SpoolDep,
    breaker: BreakerDep,
    slots: SlotsDep,
) -> CompileResponse:
    """Optimize a TIR program or module.

    The response's `build_result_ids` name the stored BuildResult rows (also when they were
    spooled because the database was down: the same ids reach the database later).
    """
    request_id: uuid.UUID = request.state.request_id
    served = compiling.serve(
        body,
        request_id=request_id,
        compiler=compiler,
        verify=verify,
        settings=settings,
        baseline=baseline,
        slots=slots,
    )
    t0 = time.perf_counter()
    stored = compiling.persist(served.rows, session=session, spool=spool, breaker=breaker)
    served.timings["persist"] = time.perf_counter() - t0
    observe_compile(
        result=served.result,
        timings=served.timings,
        rows=len(served.rows),
        stored=stored,
        mode="sync",
    )
    return compiling.to_response(served, stored)
