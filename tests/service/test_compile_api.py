"""`POST /compile` end to end on PostgreSQL: responses, stored rows, options, RQ verification,
the embedded SQLite default, and the baseline served when the optimizer itself fails."""

from __future__ import annotations

import dataclasses
import uuid

from rq.registry import FinishedJobRegistry
from sqlalchemy import create_engine, func, select

from service.api.deps import get_baseline, get_compiler
from service.core.schemas import CompileOptionsIn
from tasmopt.lower.triton import lower
from tasmopt.report import CompileOptions
from tasmopt.store import BuildResult, count_build_results, list_build_results
from tasmopt.tir.codec import decode
from worker.queue import verify_queue


def test_example_is_served_and_stored(client, example_request, pg_session):
    r = client.post("/compile", json=example_request)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["request_id"] == r.headers["x-request-id"]
    assert out["stored"] == "database" and not out["fallback"]
    assert out["tasm"].startswith("    call __main")
    [main] = out["functions"]
    assert main["name"] == "main" and main["cycles"] <= main["baseline_cycles"]
    rid = uuid.UUID(out["request_id"])
    rows = list_build_results(pg_session, request_id=rid)
    assert {str(r.id) for r in rows} == set(out["build_result_ids"])
    assert len(rows) == 1 + len(main["blocks"])
    fn_row = next(r for r in rows if r.block_index is None)
    assert str(fn_row.id) == main["build_result_id"]
    assert fn_row.tasm.startswith("__main:") and fn_row.tir_hash == main["tir_hash"]
    assert main["tir_hash"] != out["tir_hash"]  # the function's own TIR, not the request's
    assert (
        fn_row.clock_cycles == main["cycles"] and fn_row.compiler_cycles == main["baseline_cycles"]
    )
    assert fn_row.table_heights == main["heights"] and fn_row.padded_height == main["padded_height"]


def test_verified_saving_is_served(client, timelock_request, pg_session):
    out = client.post("/compile", json=timelock_request).json()
    assert out["cycles"] < out["baseline_cycles"]
    source = out["functions"][0]["source"]
    assert source in ("rules", "search")
    rid = uuid.UUID(out["request_id"])
    assert count_build_results(pg_session, request_id=rid, source=source) >= 1
    assert count_build_results(pg_session, request_id=rid) == len(out["build_result_ids"])


def test_options_reach_the_optimizer(client, timelock_request):
    out = client.post("/compile", json={**timelock_request, "options": {"sources": []}}).json()
    assert out["cycles"] == out["baseline_cycles"]
    assert {f["source"] for f in out["functions"]} == {"compiler"}


def test_option_schema_mirrors_compile_options():
    # deadline_ms is the service's: it becomes the request's `Deadline` (compiling.deadline_s)
    assert set(CompileOptionsIn.model_fields) - {"deadline_ms"} <= {
        f.name for f in dataclasses.fields(CompileOptions)
    }


def test_verification_on_a_real_rq_worker(
    make_client, client, redis_url, redis_conn, rq_worker, timelock_request
):
    # the API does not help (VERIFY_HELP off): every check goes through the worker
    with_rq = make_client(
        redis_url=redis_url, verify_deadline_s=20, verify_hard_deadline_s=30, verify_help=False
    )
    out = with_rq.post("/compile", json=timelock_request).json()
    assert out["cycles"] < out["baseline_cycles"]
    assert FinishedJobRegistry(queue=verify_queue(redis_conn)).count >= 1
    local = client.post("/compile", json=timelock_request).json()
    assert out["tasm"] == local["tasm"]  # same seed, same verdicts, wherever they were made


def test_hard_deadline_without_workers_serves_the_baseline(
    make_client, redis_url, redis_conn, timelock_request
):
    # Nobody consumes the queue (the API does not help) and the hard deadline is immediate:
    # every check is unverified.
    c = make_client(
        redis_url=redis_url,
        verify_deadline_s=0.05,
        verify_hard_deadline_s=0.05,
        verify_help=False,
    )
    out = c.post("/compile", json=timelock_request).json()
    assert out["cycles"] == out["baseline_cycles"]
    assert out["tasm"].rstrip() == timelock_request["baseline_tasm"].rstrip()
    assert verify_queue(redis_conn).count == 0  # the jobs were cancelled


def test_without_workers_the_api_checks_its_queued_jobs_itself(
    make_client, redis_url, redis_conn, timelock_request
):
    """VERIFY_HELP (default): no worker runs, the request's checks are still verified (by
    the API, from the back of the queue) and the answer improves; nothing is left queued."""
    c = make_client(redis_url=redis_url, verify_deadline_s=10, verify_hard_deadline_s=20)
    out = c.post("/compile", json={**timelock_request, "options": {"use_cache": False}}).json()
    assert out["cycles"] < out["baseline_cycles"]
    assert verify_queue(redis_conn).count == 0


def test_embedded_sqlite_default(make_client, tmp_path, timelock_request):
    db = tmp_path / "var" / "tasmopt.db"
    c = make_client(database_url=f"sqlite:///{db}")
    out = c.post("/compile", json=timelock_request).json()
    assert out["stored"] == "database"
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        n = conn.scalar(select(func.count()).select_from(BuildResult))
    engine.dispose()
    assert n == len(out["build_result_ids"])
    assert c.get("/readyz").json()["ready"]


def test_optimizer_failure_serves_the_baseline(client, add_mul_tir, pg_session):
    def broken(*_a, **_k):
        raise RuntimeError("bug in the optimizer")

    client.app.dependency_overrides[get_compiler] = lambda: broken
    try:
        r = client.post("/compile", json={"tir": add_mul_tir})
    finally:
        client.app.dependency_overrides.clear()
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["fallback"] and "RuntimeError" in out["fallback_reason"]
    assert out["tasm"] == lower(decode(add_mul_tir)).text()
    assert out["functions"] == [] and out["cycles"] is None
    [row] = list_build_results(pg_session, request_id=uuid.UUID(out["request_id"]))
    assert row.fallback_used and row.source == "compiler" and row.tasm == out["tasm"]
    assert row.tir_hash == client.post("/compile", json={"tir": add_mul_tir}).json()["tir_hash"]


def test_optimizer_failure_returns_the_clients_baseline(client, example_request):
    client.app.dependency_overrides[get_compiler] = lambda: _raise
    try:
        out = client.post("/compile", json=example_request).json()
    finally:
        client.app.dependency_overrides.clear()
    assert out["fallback"] and out["tasm"] == example_request["baseline_tasm"]


def test_bad_tir_is_still_a_4xx_when_the_optimizer_fails(client):
    client.app.dependency_overrides[get_compiler] = lambda: _raise
    try:
        r = client.post("/compile", json={"tir": ["Foo"]})
    finally:
        client.app.dependency_overrides.clear()
    assert r.status_code == 422 and "unknown op 'Foo'" in r.json()["message"]


def test_500_only_when_not_even_the_baseline_can_be_served(client, add_mul_tir):
    client.app.dependency_overrides[get_compiler] = lambda: _raise
    client.app.dependency_overrides[get_baseline] = lambda: _raise
    try:
        r = client.post("/compile", json={"tir": add_mul_tir})
    finally:
        client.app.dependency_overrides.clear()
    assert r.status_code == 500
    assert r.json()["code"] == "internal_error" and r.json()["request_id"]


def test_openapi_documents_the_compile_body(client):
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/compile"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/CompileRequest"
    schemas = spec["components"]["schemas"]
    assert {"CompileRequest", "CompileOptionsIn", "CompileResponse", "ErrorResponse"} <= set(
        schemas
    )
    assert client.get("/docs").status_code == 200


def _raise(*_a, **_k):
    raise RuntimeError("boom")


def test_the_inline_pass_is_an_option(client):
    # g(x, y) = x * y + 3, called once from main: inlined by default, not with inline false
    tir = [
        {"Entry": "main"},
        {"FnStart": "g"},
        "Mul",
        {"Push": 3},
        "Add",
        "Return",
        "FnEnd",
        {"FnStart": "main"},
        {"ReadIo": 1},
        {"ReadIo": 1},
        {"Call": "g"},
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    texts = {}
    for inline in (True, False):
        body = {"tir": tir, "options": {"sources": ["rules"], "inline": inline}}
        r = client.post("/compile", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        main = next(f for f in out["functions"] if f["name"] == "main")
        texts[inline] = out["tasm"]  # g stays in the module; only main calls it
        assert main["cycles"] <= main["baseline_cycles"]
    assert "call __g" not in texts[True]
    assert "call __g" in texts[False]


def test_the_compile_ends_early_enough_to_store_and_encode_the_answer():
    """`compiling.compile_deadline`: a quarter of a short deadline, at most 100 ms of a long
    one, is kept for persisting the rows and encoding the response; cancelling the request
    (the client left) cancels the compile."""
    from service.core.compiling import compile_deadline
    from tasmopt.deadline import Deadline

    short = Deadline(0.2)
    assert 0.12 < compile_deadline(short, 0.2).remaining() <= 0.15
    long = Deadline(5.0)
    assert 4.8 < compile_deadline(long, 5.0).remaining() <= 4.9
    req = Deadline(1.0)
    inner = compile_deadline(req, 1.0)
    req.cancel("client disconnected")
    assert inner.cancelled and inner.expired and "client disconnected" in inner.why()
