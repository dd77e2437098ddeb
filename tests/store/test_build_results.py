"""`build_records` turns a CompileResult into rows; the queries store them idempotently."""

from __future__ import annotations

import json
import uuid

from tasmopt.report import BaselineMismatch, BlockReport, CompileResult, FunctionReport
from tasmopt.store import (
    BuildResult,
    build_records,
    count_build_results,
    insert_build_results,
    list_build_results,
)
from tasmopt.store.records import function_tasm, rows_from_json, rows_to_json

MODULE_TASM = "\n".join(
    [
        "    call __main",
        "    halt",
        "",
        "__main:",
        "    push 1",
        "    call __helper",
        "    return",
        "    ",
        "__helper:",
        "    push 2",
        "    skiz",
        "    call __then__1",
        "    return",
        "    ",
        "__then__1:",
        "    push 3",
        "    pop 1",
        "    return",
        "",
    ]
)


def make_result() -> CompileResult:
    main = FunctionReport(
        name="main",
        source="rules",
        cycles=5,
        baseline_cycles=7,
        heights={"processor": 5, "op_stack": 3},
        padded_height=256,
        fallback=False,
        tir_hash="a" * 64,
        latency_s=0.010,
        blocks=[
            BlockReport(
                index=0,
                path="tir[2]",
                source="rules",
                tasm=["push 1"],
                baseline_tasm=["push 1", "push 0", "add"],
                cycles=1,
                baseline_cycles=3,
                tir_hash="b" * 64,
                verified_by="symbolic",
                latency_s=0.002,
            )
        ],
    )
    helper = FunctionReport(
        name="helper",
        source="client",
        cycles=9,
        baseline_cycles=9,
        fallback=True,
        reason="client baseline disagrees",
        mismatch=BaselineMismatch("stack differs", 3),
        blocks=[
            BlockReport(
                index=0,
                path="tir[8]",
                source="compiler",
                tasm=["push 2"],
                baseline_tasm=["push 2"],
                cycles=1,
                baseline_cycles=1,
            )
        ],
    )
    return CompileResult(
        tasm=MODULE_TASM,
        functions=[main, helper],
        tir_hash="c" * 64,
        baseline_tasm=MODULE_TASM,
        timings={"verify": 0.01},
        model_version=None,
    )


def test_one_row_per_function_and_block():
    result = make_result()
    rid = uuid.uuid4()
    rows = build_records(result, rid, total_latency_s=0.5)
    assert [(r["function"], r["block_index"]) for r in rows] == [
        ("main", None),
        ("main", 0),
        ("helper", None),
        ("helper", 0),
    ]
    assert len({r["id"] for r in rows}) == 4 and all(r["request_id"] == rid for r in rows)
    main, main_b0, helper, helper_b0 = rows
    assert main["tasm"] == "__main:\n    push 1\n    call __helper\n    return\n    "
    assert helper["tasm"].startswith("__helper:") and "__then__1:" in helper["tasm"]
    assert (main["clock_cycles"], main["compiler_cycles"]) == (5, 7)
    assert main["table_heights"] == {"processor": 5, "op_stack": 3}
    assert main["padded_height"] == 256 and helper["padded_height"] is None
    assert main["valid"] and not main["fallback_used"] and main["source"] == "rules"
    assert main["latency_ms"] == 10.0 and helper["latency_ms"] == 500.0  # request total
    assert main["tir_hash"] == "a" * 64 and helper["tir_hash"] == "c" * 64  # module hash
    assert not helper["valid"] and helper["fallback_used"] and helper["source"] == "client"
    assert main_b0["tasm"] == "push 1" and main_b0["valid"] and not main_b0["fallback_used"]
    assert main_b0["tir_hash"] == "b" * 64 and main_b0["latency_ms"] == 2.0
    assert helper_b0["valid"] and helper_b0["fallback_used"]


def test_function_tasm_prefers_the_reports_own_text():
    result = make_result()
    fn = result.functions[0]
    fn.tasm = ["__main:", "    nop"]  # what the optimizer gives: the function's own lines
    assert function_tasm(result, fn) == "__main:\n    nop"


def test_rows_survive_json():
    rows = build_records(make_result(), uuid.uuid4())
    text = json.dumps(rows_to_json(rows))
    assert rows_from_json(json.loads(text)) == rows


def test_insert_is_idempotent(pg_session):
    rid = uuid.uuid4()
    rows = build_records(make_result(), rid)
    with pg_session.begin():
        assert insert_build_results(pg_session, rows=rows) == 4
    with pg_session.begin():
        assert insert_build_results(pg_session, rows=rows) == 0
    assert count_build_results(pg_session, request_id=rid) == 4
    stored = list_build_results(pg_session, request_id=rid)
    assert {r.id for r in stored} == {r["id"] for r in rows}
    fn_row = pg_session.get(BuildResult, rows[0]["id"])
    assert fn_row.table_heights == {"processor": 5, "op_stack": 3}
    assert fn_row.created_at.tzinfo is not None
    assert count_build_results(pg_session, request_id=rid, source="client") == 1
