"""TIR wire format (spec/tir.md §2): lossless round trip on real data, every decode error with
the exact path of the offending op."""

from __future__ import annotations

import json

import pytest

from tasmopt.errors import TirError
from tasmopt.tir.codec import MAX_DECODE_DEPTH, decode, dumps, encode, loads, tir_hash
from tasmopt.tir.ops import Op


def test_round_trip_all_real_data(trident_std):
    for name, module in trident_std.items():
        ops = decode(module["tir"])
        assert encode(ops) == module["tir"], name
        assert loads(dumps(ops)) == ops, name
        assert tir_hash(ops) == tir_hash(decode(json.loads(json.dumps(module["tir"])))), name


def test_big_integers_and_negative_effect_survive():
    obj = [
        {"Push": 2**64 - 1},
        {"Asm": {"lines": ["pop 1"], "effect": -(2**31)}},
        {"Reveal": {"name": "E", "tag": 2**64 - 1, "field_count": 2**32 - 1}},
    ]
    text = json.dumps(obj)
    assert encode(loads(text)) == obj
    assert loads(text)[0] == Op("Push", 2**64 - 1)


def _nest(depth: int, inner: list) -> list:
    obj = inner
    for _ in range(depth):
        obj = [{"IfOnly": {"then_body": obj}}]
    return obj


WIRE_ERRORS = [
    # (JSON value, expected path, fragment of the reason)
    (["Nope"], "tir[0]", "unknown op 'Nope'"),
    ([{"Nope": 1}], "tir[0]", "unknown op 'Nope'"),
    (["add"], "tir[0]", "unknown op 'add'"),  # case-sensitive
    (["Push"], "tir[0]", "needs a payload"),
    ([{"Add": None}], "tir[0]", "takes no payload"),
    ([5], "tir[0]", "string or a one-key object"),
    ([None], "tir[0]", "string or a one-key object"),
    ([{"Push": 1, "Pop": 1}], "tir[0]", "exactly one key"),
    ([{}], "tir[0]", "exactly one key"),
    ([{"Push": True}], "tir[0].Push", "must be an integer"),
    ([{"Push": 1.0}], "tir[0].Push", "must be an integer"),
    ([{"Push": "5"}], "tir[0].Push", "must be an integer"),
    ([{"Push": -1}], "tir[0].Push", "does not fit u64"),
    ([{"Push": 2**64}], "tir[0].Push", "does not fit u64"),
    ([{"Dup": 2**32}], "tir[0].Dup", "does not fit u32"),
    ([{"Pop": -3}], "tir[0].Pop", "does not fit u32"),
    ([{"Call": 5}], "tir[0].Call", "must be a string"),
    ([{"FnStart": None}], "tir[0].FnStart", "must be a string"),
    ([{"IfElse": [[], []]}], "tir[0].IfElse", "must be an object"),
    ([{"IfElse": {"then_body": []}}], "tir[0].IfElse", "missing field(s) ['else_body']"),
    (
        [{"IfElse": {"then_body": [], "else_body": [], "x": 1}}],
        "tir[0].IfElse",
        "unknown field(s) ['x']",
    ),
    ([{"IfOnly": {"then_body": "Add"}}], "tir[0].IfOnly.then_body", "must be a list of ops"),
    (
        ["Add", {"IfElse": {"then_body": ["Add", {"Push": -5}], "else_body": []}}],
        "tir[1].IfElse.then_body[1].Push",
        "does not fit u64",
    ),
    (
        [{"IfElse": {"then_body": [], "else_body": ["Add", "Frob"]}}],
        "tir[0].IfElse.else_body[1]",
        "unknown op 'Frob'",
    ),
    ([{"Loop": {"label": 5, "body": []}}], "tir[0].Loop.label", "must be a string"),
    (
        [
            {
                "Loop": {
                    "label": "l",
                    "body": [{"ProofBlock": {"program_hash": "h", "body": [{"Swap": False}]}}],
                }
            }
        ],
        "tir[0].Loop.body[0].ProofBlock.body[0].Swap",
        "must be an integer",
    ),
    ([{"Asm": {"lines": ["nop", 3], "effect": 0}}], "tir[0].Asm.lines", "list of strings"),
    ([{"Asm": {"lines": [], "effect": 2**31}}], "tir[0].Asm.effect", "does not fit i32"),
    ([{"Asm": {"lines": [], "effect": True}}], "tir[0].Asm.effect", "must be an integer"),
    ([{"Hash": {"width": True}}], "tir[0].Hash.width", "must be an integer"),
    (
        [{"Reveal": {"name": "E", "tag": -1, "field_count": 1}}],
        "tir[0].Reveal.tag",
        "does not fit u64",
    ),
    ([{"Seal": {"name": 3, "tag": 0, "field_count": 1}}], "tir[0].Seal.name", "must be a string"),
    ({"Push": 1}, "tir", "must be a JSON array"),
    (
        _nest(MAX_DECODE_DEPTH + 2, ["Add"]),
        "tir[0]" + ".IfOnly.then_body[0]" * (MAX_DECODE_DEPTH + 1),
        "nested too deep",
    ),
]


@pytest.mark.parametrize(
    "obj, path, reason", WIRE_ERRORS, ids=[f"{i}-{e[1][:30]}" for i, e in enumerate(WIRE_ERRORS)]
)
def test_wire_format_errors_name_the_path(obj, path, reason):
    with pytest.raises(TirError) as info:
        decode(obj)
    assert info.value.path == path
    assert reason in info.value.reason
    assert str(info.value) == f"{path}: {info.value.reason}"


@pytest.mark.parametrize(
    "text, reason",
    [
        ('["Add", ', "malformed JSON"),
        ("[" * 100_000, "nested too deep"),
    ],
)
def test_malformed_json_text(text, reason):
    with pytest.raises(TirError) as info:
        loads(text)
    assert info.value.path == "tir"
    assert reason in info.value.reason
