"""`POST /compile`: TIR in, the cheapest verified TASM out (the baseline if nothing beats it)."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request, Response

from service.api.deps import (
    AdmissionDep,
    BaselineDep,
    BreakerDep,
    CompileBody,
    CompilerDep,
    FollowupDep,
    SessionDep,
    SettingsDep,
    SlotsDep,
    SpoolDep,
    VerifierDep,
)
from service.core import compiling
from service.core.admission import run_watched
from service.core.metrics import observe_compile
from service.core.schemas import CompileResponse
from service.errors import ERROR_RESPONSES
from tasmopt.deadline import Deadline

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
async def compile_tir(
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
    admission: AdmissionDep,
    followup: FollowupDep,
) -> Response:
    """Optimize a TIR program or module.

    The response's `build_result_ids` name the stored BuildResult rows (also when they were
    spooled because the database was down: the same ids reach the database later). Refused
    with 503 and Retry-After when the process already holds COMPILE_SLOTS + COMPILE_QUEUE
    compiles; bounded by `options.deadline_ms` (default DEFAULT_DEADLINE_MS, at most
    COMPILE_DEADLINE_S): functions cut short are answered `status: improving` and deepened in
    the background; cancelled when the client disconnects. Functions answered before in the
    same context come from the per-function result cache (`cache: hit`).
    """
    request_id: uuid.UUID = request.state.request_id
    total_s = compiling.deadline_s(body.options, settings)
    deadline = Deadline(total_s)
    # the compile ends early enough to store its rows and encode the answer in time
    compile_by = compiling.compile_deadline(deadline, total_s)

    def work() -> tuple[compiling.Served, str, bytes]:
        served = compiling.serve(
            body,
            request_id=request_id,
            compiler=compiler,
            verify=verify,
            settings=settings,
            baseline=baseline,
            slots=slots,
            deadline=compile_by,
        )
        t0 = time.perf_counter()
        stored = compiling.persist(served.rows, session=session, spool=spool, breaker=breaker)
        served.timings["persist"] = time.perf_counter() - t0
        if followup is not None:  # cache writes and deepening, after the response
            followup.after_compile(body, served.result)
        # serialized here, on the compile thread: a large response would hold the event loop
        return served, stored, compiling.to_response(served, stored).model_dump_json().encode()

    client = request.client.host if request.client is not None else ""
    admission.enter(client)
    try:
        served, stored, payload = await run_watched(
            work,
            deadline=deadline,
            disconnected=request.is_disconnected,
            limiter=admission.thread_limiter(),
        )
    finally:
        admission.leave(client)
    observe_compile(
        result=served.result,
        timings=served.timings,
        rows=len(served.rows),
        stored=stored,
        mode="sync",
    )
    return Response(payload, media_type="application/json")  # a `CompileResponse`
