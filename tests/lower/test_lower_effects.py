"""Stack effects derived from the ISA semantics of each op's lowering (spec/tir.md §1)."""

from __future__ import annotations

import pytest
from lowerkit import EXAMPLE_A

from tasmopt.lower.effects import (
    NO_EFFECT,
    StackEffect,
    UnknownEffect,
    function_effects,
    instruction_effect,
    loop_effect,
    op_effect,
    sequence_effect,
)
from tasmopt.tir.codec import decode
from tasmopt.tir.ops import VARIANTS, Op


@pytest.mark.parametrize(
    "text, pops, pushes, depth",
    [
        ("push 5", 0, 1, 0),
        ("dup 3", 0, 1, 4),
        ("dup 0", 0, 1, 1),
        ("swap 2", 0, 0, 3),
        ("swap 0", 0, 0, 1),  # a no-op, but the table lists st0 as written
        ("pick 4", 0, 0, 5),
        ("pop 3", 3, 0, 3),
        ("add", 2, 1, 2),
        ("split", 1, 2, 1),
        ("div_mod", 2, 2, 2),
        ("pow", 2, 1, 2),
        ("read_mem 2", 1, 3, 1),
        ("write_mem 2", 3, 1, 3),
        ("read_io 4", 0, 4, 0),
        ("write_io 4", 4, 0, 4),
        ("assert_vector", 5, 0, 10),  # compares st0..4 with st5..9
        ("hash", 10, 5, 10),
        ("merkle_step", 5, 5, 6),  # reads and rewrites st5
        ("merkle_step_mem", 5, 5, 8),  # st7 is the RAM pointer
        ("sponge_absorb_mem", 1, 1, 5),  # overwrites st1..st4
        ("xb_mul", 4, 3, 4),
        ("x_invert", 3, 3, 3),
        ("xx_dot_step", 5, 5, 5),
        ("b_horner_step", 0, 0, 10),  # head only; acc at st7..9
        ("dup 24", 0, 1, 25),  # not TASM, but the effect is still defined
    ],
)
def test_instruction_effects_come_from_the_isa(text, pops, pushes, depth):
    assert instruction_effect(text) == StackEffect(pops, pushes, depth)


# Spec/tir.md §1 "Effect" column as (net, entry depth); payloads in brackets.
SPEC_EFFECTS = [
    (Op("Push", 7), 1, 0),
    (Op("Pop", 3), -3, 3),
    (Op("Dup", 5), 1, 6),
    (Op("Swap", 4), 0, 5),
    (Op("Add"), -1, 2),
    (Op("Sub"), -1, 2),
    (Op("Mul"), -1, 2),
    (Op("Neg"), 0, 1),
    (Op("Invert"), 0, 1),
    (Op("Eq"), -1, 2),
    (Op("Lt"), -1, 2),
    (Op("And"), -1, 2),
    (Op("Or"), -1, 2),
    (Op("Xor"), -1, 2),
    (Op("PopCount"), 0, 1),
    (Op("Split"), 1, 1),
    (Op("DivMod"), 0, 2),
    (Op("Shl"), -1, 2),
    (Op("Shr"), -1, 2),
    (Op("Log2"), 0, 1),
    (Op("Pow"), -1, 2),
    (Op("ReadIo", 3), 3, 0),
    (Op("WriteIo", 2), -2, 2),
    (Op("ReadMem", 4), 4, 1),
    (Op("WriteMem", 4), -4, 5),
    (Op("Assert", 1), -1, 1),
    (Op("Assert", 5), -5, 10),
    (Op("Hash", fields=(("width", 5),)), -5, 10),
    (Op("Reveal", fields=(("name", "E"), ("tag", 3), ("field_count", 4))), -4, 4),
    (Op("Seal", fields=(("name", "E"), ("tag", 3), ("field_count", 2))), -2, 2),
    (Op("Seal", fields=(("name", "E"), ("tag", 3), ("field_count", 9))), -9, 9),
    (Op("RamRead", fields=(("width", 5),)), 4, 1),
    (Op("RamWrite", fields=(("width", 5),)), -6, 6),
    (Op("Hint", 5), 5, 0),
    (Op("SpongeInit"), 0, 0),
    (Op("SpongeAbsorb"), -10, 10),
    (Op("SpongeSqueeze"), 10, 0),
    (Op("SpongeLoad"), 0, 5),
    (Op("MerkleStep"), 0, 6),
    (Op("MerkleLoad"), 0, 8),
    (Op("ExtMul"), -1, 4),
    (Op("ExtInvert"), 0, 3),
    (Op("FoldExt"), 0, 5),
    (Op("FoldBase"), 0, 5),
    (Op("Return"), 0, 0),
    (Op("Halt"), 0, 0),
    (Op("Comment", "x"), 0, 0),
    (Op("FnStart", "f"), 0, 0),
    (Op("FnEnd"), 0, 0),
    (Op("Entry", "main"), 0, 0),
    (Op("Asm", fields=(("lines", ("push 1", " add ", "")), ("effect", 7))), 0, 1),
    (Op("ProofBlock", fields=(("program_hash", "h"), ("body", (Op("Pop", 2),)))), -2, 2),
    (Op("Loop", fields=(("label", "l"), ("body", ()))), 0, 0),  # nothing in place
]


@pytest.mark.parametrize("op, net, depth", SPEC_EFFECTS, ids=lambda x: repr(x)[:30])
def test_op_effects_match_the_spec_table(op, net, depth):
    eff = op_effect(op)
    assert eff.known and (eff.net, eff.depth) == (net, depth)
    assert eff.depth >= eff.pops >= 0 and eff.pushes >= 0


def test_every_variant_has_an_effect():
    covered = {op.kind for op, _, _ in SPEC_EFFECTS} | {"Call", "IfElse", "IfOnly"}
    assert covered == set(VARIANTS)


def test_conditionals():
    then = (Op("Push", 1), Op("Add"))
    other = (Op("Dup", 2), Op("Mul"))
    ifelse = Op("IfElse", fields=(("then_body", then), ("else_body", other)))
    # condition (1) + branch reading 2 (then) / 3 (else) below it; net -1 (the condition)
    assert op_effect(ifelse) == StackEffect(2, 1, 4)
    uneven = Op("IfElse", fields=(("then_body", (Op("Push", 1),)), ("else_body", ())))
    eff = op_effect(uneven)
    assert not eff.known and "branches differ" in eff.reason and eff.net is None
    only = Op("IfOnly", fields=(("then_body", (Op("Push", 9), Op("WriteIo", 1))),))
    assert op_effect(only) == StackEffect(1, 0, 1)
    assert not op_effect(Op("IfOnly", fields=(("then_body", (Op("Pop", 1),)),))).known


def test_calls_are_unknown_unless_resolved():
    eff = op_effect(Op("Call", "foo"))
    assert isinstance(eff, UnknownEffect) and "__foo" in eff.reason
    known = {"__foo": StackEffect(2, 1, 2), "@m__g": StackEffect(0, 5, 0)}
    assert op_effect(Op("Call", "foo"), callees=known) == StackEffect(2, 1, 2)
    seq = sequence_effect([Op("Push", 1), Op("Call", "@m__g"), Op("Pop", 1)], callees=known)
    assert seq == StackEffect(0, 5, 0)
    # an unknown part keeps the entry depth known so far (a lower bound)
    part = sequence_effect([Op("Dup", 3), Op("Call", "bar"), Op("Pop", 5)])
    assert not part.known and part.depth == 4


def test_builder_loop_idiom_resolves_the_loop():
    ops = decode(
        [
            {"Dup": 0},
            {"Call": "loop__1"},
            {"Pop": 1},
            {"Loop": {"label": "loop__1", "body": [{"Hint": 1}, {"WriteIo": 1}]}},
        ]
    )
    assert sequence_effect(ops) == StackEffect(0, 0, 1)  # the builder's Dup keeps n
    assert loop_effect(ops[3]) == StackEffect(1, 1, 1)
    deep = decode([{"Loop": {"label": "l", "body": [{"Dup": 4}, {"Swap": 5}, {"Pop": 1}]}}])[0]
    assert loop_effect(deep) == StackEffect(1, 1, 5)
    bad = decode([{"Loop": {"label": "l", "body": [{"Dup": 0}]}}])[0]
    assert "body net effect +1" in loop_effect(bad).reason
    with pytest.raises(ValueError):
        loop_effect(Op("Add"))


def test_asm_effect_is_derived_not_declared():
    asm = Op("Asm", fields=(("lines", ("pop 1",)), ("effect", 5)))
    assert op_effect(asm) == StackEffect(1, 0, 1)
    for lines in (("skiz", "nop"), ("frob",), ("dup",)):
        assert not op_effect(Op("Asm", fields=(("lines", lines), ("effect", 0)))).known


def test_example_a():
    ops = decode(EXAMPLE_A)
    # `_ a b` -> `_ r`: reads 2, net -1; the stack never sinks below `_ a`
    eff = sequence_effect(ops)
    assert eff == StackEffect(1, 0, 2)
    assert (eff.consumes, eff.produces) == (2, 1)
    assert sequence_effect(()) == NO_EFFECT


def test_function_effects_resolve_local_calls():
    ops = {
        "g": decode([{"FnStart": "g"}, "Add", "Return", "FnEnd"]),
        "f": decode(
            [{"FnStart": "f"}, {"Push": 1}, {"Call": "g"}, {"Call": "g"}, "Return", "FnEnd"]
        ),
        "r": decode([{"FnStart": "r"}, {"Call": "r"}, "Return", "FnEnd"]),
    }
    eff = function_effects(ops)
    assert eff["__g"] == StackEffect(2, 1, 2)
    assert eff["__f"] == StackEffect(2, 1, 2)
    assert not eff["__r"].known and "recursive" in eff["__r"].reason
