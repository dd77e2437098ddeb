"""Hostile input (issue 15): requests generated from the TIR schema (`tasmopt.tir.ops.VARIANTS`),
well-formed and not, and the size cases that used to buy minutes of CPU. Every answer is a 200
or a 4xx with a code and a message, never a 5xx, and every request is answered within the
compile deadline."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.core.config import Settings
from service.main import create_app
from tasmopt.tir.ops import VARIANTS

DEADLINE_S = 3.0


@pytest.fixture(scope="module")
def client(pg_url, tmp_path_factory):
    s = Settings(
        database_url=pg_url,
        spool_dir=tmp_path_factory.mktemp("spool"),
        admin_token="hostile-admin-token-0123456789",
        max_body_bytes=256 * 1024,
        compile_deadline_s=DEADLINE_S,
        search_budget_s=0.2,
    )
    with TestClient(create_app(s), raise_server_exceptions=False) as c:
        yield c


_SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 5, 15, 16, 2**32 - 1, 2**32, 2**64 - 2**32, 2**64]),
    st.text(max_size=12),
    st.sampled_from(["main", "__then__0", "@m__f", "a\nb", "", "x" * 300]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)


def _payload(kind: str, body: st.SearchStrategy) -> st.SearchStrategy:
    v = VARIANTS[kind]
    if v.payload == "unit":
        return st.just(kind)
    if v.payload != "struct":
        return _SCALARS.map(lambda x: {kind: x})
    fields = {}
    for name, fkind in v.fields:
        if fkind == "body":
            fields[name] = body
        elif fkind == "lines":
            fields[name] = st.lists(
                st.sampled_from(["push 1", "pop 1", "foo", "dup 99"]), max_size=3
            )
        else:
            fields[name] = _SCALARS
    return st.fixed_dictionaries(fields).map(lambda d: {kind: d})


def _ops(depth: int) -> st.SearchStrategy:
    body = st.just([]) if depth == 0 else st.lists(st.deferred(lambda: _op(depth - 1)), max_size=4)
    return body


def _op(depth: int) -> st.SearchStrategy:
    return st.sampled_from(sorted(VARIANTS)).flatmap(lambda k: _payload(k, _ops(depth)))


#: Programs shaped like the toolchain's (a function around random ops), and raw op lists.
TIR = st.one_of(
    st.lists(_op(2), max_size=12).map(lambda ops: [{"FnStart": "f"}, *ops, "Return", "FnEnd"]),
    st.lists(_op(2), max_size=12),
    _SCALARS,
)
OPTIONS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "witnesses": st.integers(-5, 100),
            "seed": _SCALARS,
            "isa": st.sampled_from(["release", "head", "x86"]),
            "sources": st.lists(st.sampled_from(["rules", "search", "model", "nope"]), max_size=3),
            "search_budget_s": st.floats(-1, 100),
        },
    ),
)
BASELINE = st.one_of(
    st.none(), st.just("foo bar baz"), st.just("__f:\n    return\n"), st.text(max_size=40)
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(tir=TIR, options=OPTIONS, baseline=BASELINE)
def test_generated_requests_get_200_or_a_clear_4xx(client, tir, options, baseline):
    body: dict = {"tir": tir}
    if options is not None:
        body["options"] = options
    if baseline is not None:
        body["baseline_tasm"] = baseline
    t = time.perf_counter()
    r = client.post(
        "/compile", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    elapsed = time.perf_counter() - t
    assert r.status_code == 200 or 400 <= r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code != 200:
        err = r.json()
        assert err["code"] and err["message"] and err["request_id"]
    assert elapsed < DEADLINE_S + 10, elapsed


SIZE_CASES = {
    # issue 15, found 1: each ran past 35 s
    "10k-push": [{"FnStart": "f"}, *[{"Push": 1}] * 10_000, {"Pop": 5}, "Return", "FnEnd"],
    "hint-pop-pairs": [{"FnStart": "f"}, *[{"Hint": 5}, {"Pop": 5}] * 2_000, "Return", "FnEnd"],
    "many-functions": [x for i in range(3_000) for x in ({"FnStart": f"f{i}"}, "Return", "FnEnd")],
    "huge-branch": [
        {"FnStart": "f"},
        {"IfElse": {"then_body": [{"Push": 1}, {"Pop": 1}] * 5_000, "else_body": []}},
        "Return",
        "FnEnd",
    ],
}


@pytest.mark.parametrize("name", sorted(SIZE_CASES))
def test_size_cases_are_bounded_by_the_deadline(client, name):
    t = time.perf_counter()
    r = client.post("/compile", json={"tir": SIZE_CASES[name]})
    elapsed = time.perf_counter() - t
    assert r.status_code == 200 or 400 <= r.status_code < 500, r.text[:300]
    # the deadline plus lowering, the baseline's measurement and persistence of the rows
    assert elapsed < DEADLINE_S + 20, f"{name}: {elapsed:.1f} s"
    print(f"\n[hostile] {name}: {r.status_code} in {elapsed:.2f} s")


def test_too_many_functions_get_a_422_naming_the_limit(make_client):
    """Size-aware admission: every function costs a lowering, a reference check and a
    measurement even when empty, so their number is limited before any of that."""
    http = make_client(max_tir_functions=100)
    tir = [x for i in range(101) for x in ({"FnStart": f"f{i}"}, "Return", "FnEnd")]
    r = http.post("/compile", json={"tir": tir})
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["code"] == "limit_exceeded" and "MAX_TIR_FUNCTIONS" in err["message"]
    assert err["path"] == "tir[300]"  # the 101st FnStart
    ok = http.post("/compile", json={"tir": tir[:300]})
    assert ok.status_code == 200


def test_a_huge_straight_line_block_gets_a_422_naming_the_limit(make_client):
    http = make_client(max_block_ops=50)
    block = [{"Push": 1}, {"Pop": 1}] * 26  # 52 ops with nothing between them
    tir = [{"FnStart": "f"}, {"IfOnly": {"then_body": block}}, "Return", "FnEnd"]
    r = http.post("/compile", json={"tir": tir})
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["code"] == "limit_exceeded" and "MAX_BLOCK_OPS" in err["message"]
    assert err["path"] == "tir[1].IfOnly.then_body[50]"
    # a call between them ends the block: the same ops in two blocks are fine
    split = [*block[:26], {"Call": "g"}, *block[26:]]
    g = [{"FnStart": "g"}, "Return", "FnEnd"]
    ok = [{"FnStart": "f"}, {"IfOnly": {"then_body": split}}, "Return", "FnEnd", *g]
    assert http.post("/compile", json={"tir": ok}).status_code == 200
