"""Semantic validation (design §2) and the unlowerable-op finder (spec/tir.md §1 domains)."""

from __future__ import annotations

import pytest

from tasmopt.errors import TasmSyntaxError, TirError
from tasmopt.isa import P
from tasmopt.lower import validate as V
from tasmopt.lower.triton import lower
from tasmopt.lower.validate import find_unlowerable, is_tasm_label, validate
from tasmopt.tasm.parser import parse
from tasmopt.tir.codec import decode


def fn(name: str, *body) -> list:
    """A function in wire form."""
    return [{"FnStart": name}, *body, "Return", "FnEnd"]


def test_real_data_is_valid(trident_std):
    for name, module in trident_std.items():
        validate(decode(module["tir"]))
        for chunk_fn in module["functions"]:
            assert is_tasm_label("__" + chunk_fn), (name, chunk_fn)


def _nest(depth: int, inner: list) -> list:
    obj = inner
    for _ in range(depth):
        obj = [{"IfOnly": {"then_body": obj}}]
    return obj


INVALID = [
    # (wire TIR, path, fragment of the reason)
    (fn("f", {"Push": P}), "tir[1].Push", "not a field element"),
    (fn("f", {"Push": 2**64 - 1}), "tir[1].Push", "0 <= v < p"),
    (
        [{"Reveal": {"name": "E", "tag": P, "field_count": 1}}],
        "tir[0].Reveal.tag",
        "not a field element",
    ),
    (
        [{"Seal": {"name": "E", "tag": 2**64 - 1, "field_count": 1}}],
        "tir[0].Seal.tag",
        "not a field element",
    ),
    (
        _nest(V.MAX_NESTING + 1, ["Add"]),
        "tir[0]" + ".IfOnly.then_body[0]" * (V.MAX_NESTING + 1),
        "nested too deep",
    ),
    (fn("a b"), "tir[0]", "does not make a TASM label"),
    (fn(""), "tir[0]", "name is empty"),
    (fn("x" * (V.MAX_LABEL_CHARS + 1)), "tir[0]", "characters (max 256)"),
    (fn("f:g"), "tir[0]", "does not make a TASM label"),
    (fn("f", {"Call": "m.f"}), "tir[1]", "does not make a TASM label"),
    (fn("f", {"Call": "@nomodule"}), "tir[1]", "@module__function"),
    (fn("f", {"Call": "@a b__c"}), "tir[1]", "@module__function"),
    (
        fn("f", {"Loop": {"label": "l 1", "body": []}}),
        "tir[1].Loop.label",
        "does not make a TASM label",
    ),
    ([{"Entry": "ma/in"}], "tir[0]", "does not make a TASM label"),
    (["FnEnd"], "tir[0]", "FnEnd without a matching FnStart"),
    (fn("f") + ["FnEnd"], "tir[3]", "FnEnd without a matching FnStart"),
    ([{"FnStart": "f"}, "Add", "Return"], "tir[0]", "no matching FnEnd"),
    ([{"FnStart": "f"}, {"FnStart": "g"}, {"FnStart": "h"}], "tir[2]", "at most one level"),
    (
        fn("f", {"IfElse": {"then_body": [{"FnStart": "g"}], "else_body": []}}),
        "tir[1].IfElse.then_body[0]",
        "FnStart inside a body",
    ),
    (
        fn("f", {"IfOnly": {"then_body": ["FnEnd"]}}),
        "tir[1].IfOnly.then_body[0]",
        "FnEnd inside a body",
    ),
    (fn("f") + fn("f"), "tir[3]", "duplicate label __f"),
    (fn("f") + fn("__f"), "tir[3]", "duplicate label __f"),
    (fn("f", {"Loop": {"label": "f", "body": []}}), "tir[1].Loop.label", "duplicate label"),
    (
        fn("f", {"Loop": {"label": "l", "body": []}}, {"Loop": {"label": "__l", "body": []}}),
        "tir[2].Loop.label",
        "duplicate label __l",
    ),
    (fn("then__3"), "tir[0]", "generated label __then__3"),
    (fn("f", {"Loop": {"label": "else__1", "body": []}}), "tir[1].Loop.label", "generated label"),
    (fn("f", {"Comment": "a\n    halt"}), "tir[1]", "line break"),
    (fn("f", {"Comment": "a\u2028b"}), "tir[1]", "line break"),
    (fn("f", {"Comment": "x" * (V.MAX_TEXT_CHARS + 1)}), "tir[1]", "characters"),
    (
        fn("f", {"Asm": {"lines": ["nop", "pop 1\npush 2"], "effect": 0}}),
        "tir[1].Asm.lines[1]",
        "line break",
    ),
    (
        [{"ProofBlock": {"program_hash": "ab\rc", "body": []}}],
        "tir[0].ProofBlock.program_hash",
        "line break",
    ),
    (fn("main", {"Entry": "main"}), "tir[1]", "Entry inside function"),
    ([{"Entry": "main"}, {"Entry": "main"}], "tir[1]", "more than one Entry"),
    (
        fn("f", {"IfOnly": {"then_body": [{"Entry": "f"}]}}),
        "tir[1].IfOnly.then_body[0]",
        "Entry inside a body",
    ),
]


@pytest.mark.parametrize(
    "obj, path, reason", INVALID, ids=[f"{i}-{e[2][:24]}" for i, e in enumerate(INVALID)]
)
def test_validation_errors_name_the_path(obj, path, reason):
    ops = decode(obj)
    with pytest.raises(TirError) as info:
        validate(ops)
    assert info.value.path == path
    assert reason in info.value.reason
    assert str(info.value).startswith(f"{path}: ")


def test_too_many_ops_names_the_first_op_over_the_limit(monkeypatch):
    monkeypatch.setattr(V, "MAX_OPS", 4)
    ops = decode(fn("f", "Add", {"IfOnly": {"then_body": ["Add", "Mul"]}}))
    with pytest.raises(TirError) as info:
        validate(ops)
    assert info.value.path == "tir[2].IfOnly.then_body[1]"
    assert "more than 4" in info.value.reason


def test_limits_are_what_the_contract_says():
    assert V.MAX_OPS == 100_000 and V.MAX_NESTING == 64
    validate(decode(fn("f", *(["Add"] * 1000))))
    validate(decode(_nest(V.MAX_NESTING, ["Add"])))


VALID = [
    fn("f", {"Push": P - 1}, {"Push": 0}),
    fn("f", {"Call": "@std_crypto_merkle__verify"}, {"Call": "dot__N4"}, {"Call": "__g"}),
    fn("f-1", {"Loop": {"label": "loop__1", "body": []}}),
    fn("add"),  # a mnemonic as a name is fine: the label is __add
    [{"Comment": "sec ram"}, {"Entry": "main"}] + fn("main"),
    fn("f", {"Comment": ""}, {"Asm": {"lines": ["", "  nop  "], "effect": 0}}),
    # the builder's match pattern: one nested function inside the enclosing one
    [
        {"FnStart": "f"},
        {"Call": "match_wild__1"},
        {"Pop": 1},
        {"FnStart": "match_wild__1"},
        "Return",
        "FnEnd",
        "Return",
        "FnEnd",
    ],
    [],
]


@pytest.mark.parametrize("obj", VALID, ids=range(len(VALID)))
def test_valid(obj):
    validate(decode(obj))


def test_single_function():
    validate(decode(fn("f", "Add")), single_function=True)
    for obj, path in [
        (["Add"] + fn("f"), "tir[0]"),
        (fn("f") + ["Add"], "tir[3]"),
        (fn("f") + fn("g"), "tir[3]"),
    ]:
        with pytest.raises(TirError) as info:
            validate(decode(obj), single_function=True)
        assert info.value.path == path, obj
    with pytest.raises(TirError):
        validate((), single_function=True)


# -- unlowerable ops ------------------------------------------------------------------------

UNLOWERABLE = [
    # (op, isa, upstream_bugs, reason fragment or None when lowerable)
    ({"Dup": 15}, "release", False, None),
    ({"Dup": 16}, "release", False, "dup 16: stack index must be 0..15"),
    ({"Swap": 0}, "release", False, None),
    ({"Swap": 16}, "release", False, "swap 16"),
    ({"Pop": 0}, "release", False, "pop 0: argument must be 1..5"),
    ({"Pop": 6}, "release", False, "pop 6"),
    ({"Pop": 5}, "release", False, None),
    ({"Hint": 6}, "release", False, "divine 6"),
    ({"ReadIo": 0}, "release", False, "read_io 0"),
    ({"WriteIo": 6}, "release", False, "write_io 6"),
    ({"ReadMem": 6}, "release", False, "read_mem 6"),
    ({"WriteMem": 0}, "release", False, "write_mem 0"),
    ({"Assert": 1}, "release", False, None),
    ({"Assert": 5}, "release", False, None),
    ({"Assert": 3}, "release", False, "Assert(3) lowers to assert_vector"),
    ({"Assert": 0}, "release", False, "Assert(0)"),
    ({"Hash": {"width": 7}}, "release", False, None),
    ({"RamRead": {"width": 0}}, "release", False, "read_mem 0"),
    ({"RamWrite": {"width": 6}}, "release", False, "write_mem 6"),
    ({"Seal": {"name": "E", "tag": 1, "field_count": 9}}, "release", False, None),
    ({"Seal": {"name": "E", "tag": 1, "field_count": 10}}, "release", False, "10 fields"),
    ({"Reveal": {"name": "E", "tag": 1, "field_count": 12}}, "release", False, None),
    ("FoldExt", "release", False, None),
    ("FoldExt", "head", False, "xx_dot_step does not exist in the head ISA"),
    ("FoldBase", "head", False, "xb_dot_step"),
    ("Or", "release", False, None),
    ("Or", "release", True, "or is not a Triton VM instruction"),
    ("Shr", "release", True, None),
    ({"Asm": {"lines": ["push 1", "frobnicate"], "effect": 0}}, "release", False, "do not parse"),
    ({"Asm": {"lines": ["dup 16"], "effect": 1}}, "release", False, "do not parse"),
    ({"Asm": {"lines": ["call @m__g", "call __h"], "effect": 0}}, "release", False, None),
    ({"Asm": {"lines": ["b_horner_step"], "effect": 0}}, "head", False, None),
    ({"Asm": {"lines": ["b_horner_step"], "effect": 0}}, "release", False, "do not parse"),
]


@pytest.mark.parametrize(
    "op, isa, upstream, reason",
    UNLOWERABLE,
    ids=[f"{i}-{e[0]}"[:40] for i, e in enumerate(UNLOWERABLE)],
)
def test_find_unlowerable(op, isa, upstream, reason):
    ops = decode(fn("f", op))
    found = find_unlowerable(ops, isa=isa, upstream_bugs=upstream)
    if reason is None:
        assert found == []
    else:
        assert len(found) == 1
        assert found[0].function == "f" and found[0].path == "tir[1]"
        assert reason in found[0].reason
        assert str(found[0]) == f"tir[1]: {found[0].reason}"
        with pytest.raises(TirError) as info:
            find_unlowerable(ops, isa=isa, upstream_bugs=upstream, strict=True)
        assert info.value.path == "tir[1]"


@pytest.mark.parametrize(
    "op, isa, upstream, reason",
    UNLOWERABLE,
    ids=[f"{i}-{e[0]}"[:40] for i, e in enumerate(UNLOWERABLE)],
)
def test_lowerable_iff_the_lowered_text_parses(op, isa, upstream, reason):
    """Cross-check against the TASM parser: what we flag for syntax does not parse, the rest
    does. (Assert(n), Seal > 9 and head-only checks are semantic and parse either way.)"""
    text = lower(decode(fn("f", op)), isa=isa, upstream_bugs=upstream).text()
    semantic = reason is not None and ("Assert(" in reason or "fields" in reason)
    if "call __h" in text:  # a call into another function of the program
        text += "\n__h:\n    return"
    if reason is None or semantic:
        parse(text, isa)
    else:
        with pytest.raises(TasmSyntaxError):
            parse(text, isa)


def test_nested_function_reports_the_enclosing_one():
    ops = decode(
        [
            {"FnStart": "f"},
            {"Call": "match_wild__1"},
            {"Pop": 1},
            {"FnStart": "match_wild__1"},
            {"Dup": 20},
            "Return",
            "FnEnd",
            "Return",
            "FnEnd",
        ]
    )
    found = find_unlowerable(ops)
    assert [(u.function, u.path) for u in found] == [("f", "tir[3]"), ("match_wild__1", "tir[4]")]
    assert "falls through" in found[0].reason


def test_real_unlowerable_ops(trident_std):
    found = {}
    for name, module in trident_std.items():
        for u in find_unlowerable(decode(module["tir"])):
            found.setdefault(name, []).append(str(u))
    # std_crypto_sha256 copies variables from depth 24/25 (the builder does not spill them);
    # upstream emits `dup 24`, which no assembler accepts.
    assert set(found) == {"std_crypto_sha256"}
    assert found["std_crypto_sha256"] == [
        "tir[499]: dup 24: stack index must be 0..15",
        "tir[518]: dup 25: stack index must be 0..15",
        "tir[537]: dup 25: stack index must be 0..15",
    ]
