"""Every bad input is a 4xx whose message names the problem and where it is; never a 500."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.core.config import Settings
from service.main import create_app

P = 2**64 - 2**32 + 1
FN = [{"FnStart": "f"}, "Return", "FnEnd"]


def body(tir=None, **extra) -> bytes:
    return json.dumps({"tir": FN if tir is None else tir, **extra}).encode()


def nest(depth: int) -> list:
    tir: list = ["Add"]
    for _ in range(depth):
        tir = [{"IfOnly": {"then_body": tir}}]
    return [{"FnStart": "f"}, *tir, "Return", "FnEnd"]


@pytest.fixture(scope="module")
def client(pg_url, tmp_path_factory):
    settings = Settings(
        database_url=pg_url,
        spool_dir=tmp_path_factory.mktemp("spool"),
        admin_token="test-admin-token-0123456789",
        max_body_bytes=64 * 1024,
        max_tir_ops=1000,
        max_tir_depth=16,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


CASES = [
    # (id, body, status, code, substrings of the message, extra fields expected)
    (
        "malformed-json",
        b'{"tir": [\n  "Add",\n  }',
        400,
        "malformed_json",
        ["line 3 column 3"],
        {"line": 3, "column": 3},
    ),
    ("empty-body", b"", 400, "malformed_json", ["empty"], {}),
    ("not-utf8", b'{"tir": "\xff"}', 400, "malformed_json", ["UTF-8"], {}),
    (
        "json-too-deep",
        b"[" * 30_000 + b"]" * 30_000,
        400,
        "malformed_json",
        ["nested too deeply"],
        {},
    ),
    ("array-body", b"[]", 422, "invalid_request", ["must be a JSON object"], {}),
    ("missing-tir", b"{}", 422, "invalid_request", ["tir: required field missing"], {}),
    (
        "unknown-field",
        body(baseline="x"),
        422,
        "invalid_request",
        ["unknown field 'baseline'", "baseline_tasm"],
        {},
    ),
    ("tir-not-a-list", body(tir="Add"), 422, "invalid_request", ["tir: ", "list"], {}),
    (
        "unknown-op",
        body(
            [
                {"FnStart": "f"},
                {"IfElse": {"then_body": ["Add", "Foo"], "else_body": []}},
                "Return",
                "FnEnd",
            ]
        ),
        422,
        "invalid_tir",
        ["tir[1].IfElse.then_body[1]: unknown op 'Foo'"],
        {"path": "tir[1].IfElse.then_body[1]"},
    ),
    (
        "wrong-payload",
        body([{"FnStart": "f"}, {"Push": "5"}, "Return", "FnEnd"]),
        422,
        "invalid_tir",
        ["tir[1].Push", "must be an integer"],
        {},
    ),
    (
        "immediate-not-field-element",
        body([{"FnStart": "f"}, {"Push": P}, "Return", "FnEnd"]),
        422,
        "invalid_tir",
        ["tir[1].Push", "not a field element"],
        {},
    ),
    (
        "immediate-over-u64",
        body([{"FnStart": "f"}, {"Push": 2**64}, "Return", "FnEnd"]),
        422,
        "invalid_tir",
        ["does not fit u64"],
        {},
    ),
    (
        "unbalanced-function",
        body([{"FnStart": "f"}, "Add"]),
        422,
        "invalid_tir",
        ["tir[0]", "no matching FnEnd"],
        {},
    ),
    (
        "unlowerable-strict",
        body([{"FnStart": "f"}, {"Dup": 16}, "Return", "FnEnd"], options={"strict": True}),
        422,
        "invalid_tir",
        ["tir[1]"],
        {},
    ),
    (
        "baseline-unparsable",
        body(baseline_tasm="__f:\n    return\n    push\n"),
        422,
        "invalid_baseline_tasm",
        ["baseline_tasm:3:9", "needs an argument"],
        {"line": 3, "column": 9},
    ),
    ("baseline-not-a-string", body(baseline_tasm=5), 422, "invalid_request", ["baseline_tasm"], {}),
    (
        "unknown-option",
        body(options={"fast": True}),
        422,
        "invalid_request",
        ["unknown option 'fast'", "witnesses"],
        {},
    ),
    (
        "option-out-of-range",
        body(options={"witnesses": 3}),
        422,
        "invalid_request",
        ["options.witnesses", "16"],
        {},
    ),
    (
        "option-wrong-type",
        body(options={"seed": "1"}),
        422,
        "invalid_request",
        ["options.seed"],
        {},
    ),
    ("option-bad-isa", body(options={"isa": "arm"}), 422, "invalid_request", ["options.isa"], {}),
    (
        "search-budget-over-limit",
        body(options={"search_budget_s": 1e6}),
        422,
        "invalid_request",
        ["search_budget_s", "limit"],
        {},
    ),
    (
        "too-many-ops",
        body([{"FnStart": "f"}, *["Add"] * 1000, "Return", "FnEnd"]),
        422,
        "limit_exceeded",
        ["tir[1000]", "more than 1000 ops"],
        {"path": "tir[1000]"},
    ),
    ("too-deep", body(nest(17)), 422, "limit_exceeded", ["nested deeper than 16"], {}),
    (
        "payload-too-deep",
        body([{"FnStart": "f"}, {"Push": [[[[[[[[[[1]]]]]]]]]]}, "FnEnd"]),
        422,
        "limit_exceeded",
        ["tir[1].Push", "JSON nested deeper"],
        {},
    ),
    (
        "integer-over-4300-digits",
        b'{"tir": [{"FnStart": "f"}, {"Push": ' + b"9" * 5000 + b'}, "Return", "FnEnd"]}',
        400,
        "malformed_json",
        ["malformed JSON", "4300"],
        {},
    ),
    (
        "baseline-garbage",
        body(baseline_tasm="foo bar baz"),
        422,
        "invalid_baseline_tasm",
        ["defines none of this TIR's functions", "f"],
        {},
    ),
    (
        "baseline-of-another-module",
        body(baseline_tasm="__g:\n    push 1\n    pop 1\n    return\n"),
        422,
        "invalid_baseline_tasm",
        ["defines none of this TIR's functions"],
        {},
    ),
    (
        "baseline-garbage-outside-functions",
        body(baseline_tasm="    call __f\n    halt\n    foo bar\n__f:\n    return\n"),
        422,
        "invalid_baseline_tasm",
        ["baseline_tasm:3:5", "unknown instruction 'foo'"],
        {"line": 3, "column": 5},
    ),
    (
        "body-too-large",
        body([{"FnStart": "f"}, {"Comment": "x" * 70_000}, "FnEnd"]),
        413,
        "body_too_large",
        ["65536 bytes"],
        {},
    ),
]


@pytest.mark.parametrize(
    ("raw", "status", "code", "parts", "fields"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_bad_input(client, raw, status, code, parts, fields):
    r = client.post("/compile", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()
    assert err["code"] == code
    for part in parts:
        assert part in err["message"], err
    for key, value in fields.items():
        assert err[key] == value
    assert err["request_id"] == r.headers["x-request-id"]


def test_deep_but_allowed_nesting_compiles(client):
    r = client.post("/compile", content=body(nest(16)))
    assert r.status_code == 200, r.text


def test_unknown_route_and_method_are_4xx(client):
    assert client.get("/nope").json()["code"] == "not_found"
    r = client.get("/compile")
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"


def test_streamed_body_over_the_limit_is_413(client):
    chunks = iter([b'{"tir": ["' + b"x" * 40_000, b"y" * 40_000 + b'"]}'])  # no Content-Length
    r = client.post("/compile", content=chunks, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "body_too_large"


def test_text_plain_body_is_415(client):
    for media in ("text/plain", "application/x-www-form-urlencoded", "text/json"):
        r = client.post("/compile", content=body(), headers={"content-type": media})
        assert r.status_code == 415, (media, r.text)
        assert r.json()["code"] == "unsupported_media_type" and "application/json" in r.text
    for media in ("application/json; charset=utf-8", "application/vnd.api+json"):
        assert (
            client.post("/compile", content=body(), headers={"content-type": media}).status_code
            == 200
        )
    r = client.post("/compile/jobs", content=body(), headers={"content-type": "text/plain"})
    assert r.status_code == 415


def test_unlowerable_tir_is_a_documented_fallback(client):
    tir = [{"FnStart": "f"}, {"Pop": 0}, "Return", "FnEnd"]
    r = client.post("/compile", content=body(tir), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["fallback"] is True
    assert "cannot be lowered" in data["fallback_reason"] and "(f)" in data["fallback_reason"]
    assert data["functions"][0]["fallback"] and data["functions"][0]["unlowerable"]


def test_limits_come_from_the_settings_only(tmp_path):
    # MAX_TIR_OPS / MAX_TIR_DEPTH are the only limits: the optimizer's own validation uses
    # them too (it used a hard-coded 100000 while the service said 200000)
    from service.core.compiling import make_options
    from tasmopt.errors import TirError
    from tasmopt.lower.validate import MAX_OPS, validate
    from tasmopt.tir.codec import decode

    settings = Settings(spool_dir=tmp_path, max_tir_ops=MAX_OPS + 50, max_tir_depth=70)
    opts = make_options(None, settings)
    assert (opts.max_ops, opts.max_nesting) == (MAX_OPS + 50, 70)
    ops = decode([{"FnStart": "f"}, *["Add"] * (MAX_OPS + 10), "Return", "FnEnd"])
    with pytest.raises(TirError, match=f"more than {MAX_OPS}"):
        validate(ops)
    validate(ops, max_ops=opts.max_ops)  # the service's limit is the one that counts
    assert Settings().max_tir_ops == MAX_OPS  # one default
