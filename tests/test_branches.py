"""The ``branches`` pass (`tasmopt.optimizer.branches`): if-conversion of small pure branches.
Adversarial: every condition under which a select would differ from the branch — a condition
that is not 0 or 1, a condition that may be skipped or reached from a label, a body with an
effect or a failure, a subroutine another call site or function uses, a then-body that does
not leave the flag 0, a wrong select — must leave the branch as it is."""

from __future__ import annotations

import random

import pytest

from tasmopt.frontend import compile_source
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.branches import find_branches, prove_select, select_code
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

IF_ELSE = """__f:
    read_io 1
    read_io 1
    read_io 1
    dup 0
    push 0
    eq
    push 1
    swap 1
    skiz
    call __then__1
    skiz
    call __else__2
    write_io 3
    return
__then__1:
    pop 1
    push 0
    return
__else__2:
    push 7
    swap 3
    pop 1
    return
"""

IF_ONLY = """__f:
    read_io 1
    read_io 1
    dup 1
    dup 1
    lt
    skiz
    call __then__1
    write_io 2
    return
__then__1:
    dup 1
    dup 1
    add
    swap 2
    pop 1
    return
"""


def lines(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


def outputs(text: str, inputs: list[int]) -> tuple:
    prog = parse("    call __f\n    halt\n" + text)
    r = run(prog, VmInput(public_input=inputs))
    return (None if r.error is None else r.error.kind, tuple(r.public_output), r.cycles)


def convert(text: str) -> str:
    (b,) = find_branches(lines(text))
    code = select_code(b)
    assert code is not None and prove_select(b, code) is None
    from tasmopt.optimizer.branches import rewrite_branches

    out, spans = rewrite_branches(lines(text), [(b, code)])
    assert spans
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("text", [IF_ELSE, IF_ONLY])
def test_a_select_keeps_behaviour_on_both_paths_and_drops_the_subroutines(text):
    new = convert(text)
    assert "skiz" not in new and "__then__1:" not in new and "__else__2:" not in new
    rng = random.Random(3)
    for inputs in ([0, 5, 9], [4, 5, 0], [2, 2, 2], [1, 9, 3], [9, 1, 4]):
        assert outputs(new, inputs)[:2] == outputs(text, inputs)[:2], inputs
    for _ in range(40):
        inputs = [rng.choice([0, 1, 2, rng.randrange(2**32)]) for _ in range(3)]
        assert outputs(new, inputs)[:2] == outputs(text, inputs)[:2], inputs


def test_the_select_is_cheaper_than_the_branch():
    new = convert(IF_ELSE)
    for inputs in ([0, 5, 9], [4, 5, 1]):  # both paths
        assert outputs(new, inputs)[2] < outputs(IF_ELSE, inputs)[2]


@pytest.mark.parametrize(
    "old, new, why",
    [
        (
            "    eq\n    push 1\n    swap 1\n",
            "    add\n    push 1\n    swap 1\n",
            "condition not 0/1",
        ),
        (
            "    eq\n    push 1\n    swap 1\n",
            "    eq\n    push 2\n    mul\n    push 1\n    swap 1\n",
            "condition 0 or 2",
        ),
        (
            "    dup 0\n    push 0\n    eq\n",
            "    dup 0\n    push 0\n    skiz\n    eq\n",
            "the condition's producer may be skipped",
        ),
        (
            "    eq\n    push 1\n",
            "    eq\n__l:\n    push 1\n",
            "a label between condition and idiom",
        ),
        (
            "__else__2:\n    push 7\n",
            "__else__2:\n    write_io 1\n    push 7\n",
            "effect in a body",
        ),
        ("__else__2:\n    push 7\n", "__else__2:\n    push 7\n    invert\n", "failure in a body"),
        (
            "__then__1:\n    pop 1\n    push 0\n",
            "__then__1:\n    pop 1\n    push 1\n",
            "then-body leaves a nonzero flag: the else runs too",
        ),
        (
            "    write_io 3\n    return\n",
            "    call __else__2\n    write_io 3\n    return\n",
            "a subroutine called twice",
        ),
    ],
)
def test_branches_that_could_differ_as_selects_are_left_alone(old, new, why):
    assert old in IF_ELSE
    text = IF_ELSE.replace(old, new)
    assert find_branches(lines(text)) == [], why


def test_a_subroutine_another_function_calls_is_left_alone():
    assert find_branches(lines(IF_ELSE), called_elsewhere=frozenset({"__else__2"})) == []
    assert find_branches(lines(IF_ELSE)) != []


def test_a_wrong_select_is_not_proven():
    (b,) = find_branches(lines(IF_ELSE))
    code = select_code(b)
    assert code is not None
    for wrong in (
        [*code, "push 1", "add"],  # one more
        code[:-1],  # one short
    ):
        instrs = parse_instructions("\n".join(str(i) for i in wrong))
        assert prove_select(b, instrs) is not None
    # the select with the paths swapped: right for neither condition
    swapped = type(b)(b.start, b.end, b.labels, (b.paths[1], b.paths[0]))
    code2 = select_code(swapped)
    assert code2 is not None and prove_select(b, code2) is not None


SOURCE = """
program t

fn is_zero_n(a: Field, n: U32) -> Bool {
    let mut z = true
    for i in 0..n bounded 64 {
        if ram_read(a + as_field(i)) == 0 {
        } else {
            z = false
        }
    }
    z
}

fn main() {
    let a = pub_read()
    let n = as_u32(pub_read())
    let v = pub_read()
    for j in 0..n bounded 64 {
        ram_write(a + as_field(j), 0)
    }
    ram_write(a, v)
    if is_zero_n(a, n) {
        pub_write(1)
    } else {
        pub_write(0)
    }
}
"""


@pytest.mark.parametrize("n, v", [(1, 0), (1, 5), (2, 0), (2, 3), (7, 0), (7, 9)])
def test_the_optimizer_converts_a_loop_branch_and_keeps_behaviour(n, v):
    ops = compile_source(SOURCE)
    r = compile_tir(ops, options=CompileOptions(sources=("rules", "search")))
    f = next(x for x in r.functions if x.name == "is_zero_n")
    assert any("converted to selects" in note for note in f.notes), f.notes
    assert f.cycles < f.baseline_cycles
    plain = compile_tir(ops, options=CompileOptions(sources=("rules", "search"), inline=False))
    a, b = parse(r.tasm), parse(plain.tasm)
    x = run(a, VmInput(public_input=[1000, n, v]))
    y = run(b, VmInput(public_input=[1000, n, v]))
    assert x.error is None and y.error is None
    assert list(x.public_output) == list(y.public_output) == [int(v == 0)]


COUNT = """
program t

fn count_eq(base: Field, n: U32, v: Field) -> Field {
    let mut c = 0
    for i in 0..n bounded 64 {
        if ram_read(base + as_field(i)) == v {
            c = c + 1
        }
    }
    c
}

fn main() {
    let base = pub_read()
    let n = as_u32(pub_read())
    let v = pub_read()
    for j in 0..n bounded 64 {
        ram_write(base + as_field(j), pub_read())
    }
    pub_write(count_eq(base, n, v))
}
"""


def test_a_constant_step_becomes_an_add_of_the_condition():
    text = IF_ONLY.replace(
        "__then__1:\n    dup 1\n    dup 1\n    add\n    swap 2\n    pop 1\n",
        "__then__1:\n    swap 1\n    addi 1\n    swap 1\n",
    )
    (b,) = find_branches(lines(text))
    code = select_code(b)
    assert code is not None and prove_select(b, code) is None
    assert [i.name for i in code].count("mul") == 0  # x + c, no multiplication
    assert outputs(convert(text), [3, 5])[:2] == outputs(text, [3, 5])[:2]
    assert outputs(convert(text), [5, 3])[:2] == outputs(text, [5, 3])[:2]


@pytest.mark.parametrize("values", [[], [4], [4, 9, 4], [1, 2, 3, 4, 4, 4, 7]])
def test_a_select_and_a_counted_loop_together_keep_behaviour(values):
    ops = compile_source(COUNT)
    r = compile_tir(ops, options=CompileOptions(sources=("rules", "search")))
    f = next(x for x in r.functions if x.name == "count_eq")
    assert any("converted to selects" in n and "recurse_or_return" in n for n in f.notes), f.notes
    assert f.cycles < f.baseline_cycles
    x = run(parse(r.tasm), VmInput(public_input=[500, len(values), 4, *values]))
    assert x.error is None and list(x.public_output) == [values.count(4)]


def test_select_code_stops_at_the_deadline():
    from tasmopt.deadline import Deadline

    (b,) = find_branches(lines(IF_ELSE))
    assert select_code(b, deadline=Deadline(0.0)) is None
    assert select_code(b, deadline=Deadline(60.0)) is not None


@pytest.mark.parametrize(
    "body, why",
    [
        ("    sponge_init\n", "sponge"),
        ("    push 100\n    read_mem 1\n    pop 2\n", "a RAM read (the address may alias a write)"),
        ("    dup 0\n    push 12345\n    eq\n    assert\n", "a rare guard"),
    ],
)
def test_bodies_with_a_sponge_ram_or_a_guard_are_left_alone(body, why):
    text = IF_ELSE.replace("__else__2:\n", "__else__2:\n" + body)
    assert find_branches(lines(text)) == [], why


def test_a_high_degree_else_value_is_selected_exactly():
    power = "    dup 0\n    mul\n" * 4  # x^16 (a body holds at most 12 instructions)
    text = IF_ELSE.replace("__else__2:\n    push 7\n", "__else__2:\n    dup 2\n" + power)
    new = convert(text)
    rng = random.Random(8)
    for _ in range(30):
        inputs = [rng.randrange(2**32), rng.randrange(2**32), rng.choice([0, 1, 5])]
        assert outputs(new, inputs)[:2] == outputs(text, inputs)[:2], inputs


def test_a_client_baseline_that_differs_from_our_lowering_is_returned_as_sent():
    from tasmopt.lower.triton import lower

    ops = compile_source(SOURCE)
    ours = "\n".join(lower(ops).lines)
    # the client's else-branch stores 2 instead of 0: it disagrees with our lowering
    assert ours.count("    push 0\n    swap 3\n    pop 1\n") == 1
    client = ours.replace(
        "    push 0\n    swap 3\n    pop 1\n", "    push 2\n    swap 3\n    pop 1\n"
    )
    r = compile_tir(ops, baseline_tasm=client, options=CompileOptions(sources=("rules", "search")))
    f = next(x for x in r.functions if x.name == "is_zero_n")
    assert f.mismatch is not None
    assert not any("converted to selects" in n for n in f.notes)
    x = run(parse(r.tasm), VmInput(public_input=[1000, 3, 5]))
    y = run(parse(client), VmInput(public_input=[1000, 3, 5]))
    assert list(x.public_output) == list(y.public_output)


#: the lowering's ``if a == b { if c == d { e == g } else { false } } else { false }``
#: (corpus ext.xarith equal): the outer then-body holds the inner branch
NESTED = """
program t

fn equal3(a: Field, b: Field, c: Field, d: Field, e: Field, g: Field) -> Bool {
    if a == b {
        if c == d {
            e == g
        } else {
            false
        }
    } else {
        false
    }
}

fn main() {
    let a = pub_read()
    let b = pub_read()
    let c = pub_read()
    let d = pub_read()
    let e = pub_read()
    let g = pub_read()
    if equal3(a, b, c, d, e, g) {
        pub_write(1)
    } else {
        pub_write(0)
    }
}
"""


def test_a_nested_if_is_converted_inside_out_and_keeps_behaviour():
    """Round one converts the inner branch; that leaves the outer then-body pure, and round
    two converts it: no branch is left, and every pattern of equal and unequal pairs gives
    the same output as the unconverted program."""
    ops = compile_source(NESTED)
    r = compile_tir(ops, options=CompileOptions(sources=("rules", "search")))
    f = next(x for x in r.functions if x.name == "equal3")
    converted = [n for n in f.notes if "converted to selects" in n]
    assert len(converted) == 2, f.notes
    assert "skiz" not in "\n".join(f.tasm) and f.cycles < f.baseline_cycles
    plain = compile_tir(ops, options=CompileOptions(sources=("rules", "search"), inline=False))
    a, b = parse(r.tasm), parse(plain.tasm)
    for pattern in range(8):
        xs = [5, 5 if pattern & 1 else 6, 7, 7 if pattern & 2 else 8, 9, 9 if pattern & 4 else 1]
        x, y = run(a, VmInput(public_input=xs)), run(b, VmInput(public_input=xs))
        assert x.error is None and y.error is None
        assert list(x.public_output) == list(y.public_output) == [int(pattern == 7)], xs


#: IF_ELSE with its else body one instruction in place of the call: ``skiz; addi 7``
INLINE_ELSE = IF_ELSE.replace("    call __else__2\n", "    addi 7\n").replace(
    "__else__2:\n    push 7\n    swap 3\n    pop 1\n    return\n", ""
)


def test_an_else_body_of_one_instruction_in_place_of_its_call_is_converted():
    (b,) = find_branches(lines(INLINE_ELSE))
    assert b.labels == ("__then__1",)
    new = convert(INLINE_ELSE)
    assert "skiz" not in new and "__then__1:" not in new
    for inputs in ([0, 5, 9], [4, 5, 0], [2, 2, 2], [9, 1, 0], [0, 0, 0]):
        got, want = outputs(new, inputs), outputs(INLINE_ELSE, inputs)
        assert got[:2] == want[:2], inputs
        assert want[0] is None and want[1][0] == inputs[2] + 7 * (inputs[2] != 0)


@pytest.mark.parametrize(
    ("instr", "why"),
    [
        ("invert", "may fail"),
        ("write_io 1", "an effect"),
        ("return", "control flow"),
        ("__l:", "a label"),
    ],
)
def test_an_else_instruction_that_fails_has_an_effect_or_is_control_flow_stays(instr, why):
    text = INLINE_ELSE.replace("    skiz\n    addi 7\n", f"    skiz\n    {instr}\n")
    if instr.endswith(":"):
        text = INLINE_ELSE.replace("    skiz\n    addi 7\n", f"    skiz\n{instr}\n    addi 7\n")
    assert find_branches(lines(text)) == [], why
