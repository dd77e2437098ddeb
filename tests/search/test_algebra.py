"""Linear forms in the block search's algebra (`tasmopt.search.algebra`): cancellations the
search may now use, each candidate still proven by `check_block`; and adversarially, forms
that only look alike are not merged, and dropping a RAM read never drops a write."""

from __future__ import annotations

import pytest

from tasmopt.search.algebra import linear_forms, simplify
from tasmopt.search.dataflow import extract
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.tasm.parser import parse_instructions
from tasmopt.vm.equivalence import BlockCheck, check_block


def code(text: str):
    return parse_instructions(text.replace(";", "\n"))


def proven(baseline: str, cand) -> bool:
    lines = tuple(x.strip() for x in baseline.split(";"))
    return check_block(BlockCheck(lines, tuple(str(i) for i in cand))).equivalent


def candidates(baseline: str, states: int = 20_000):
    found = optimize_block(code(baseline), SearchConfig(states=states))
    for cand in found:
        assert proven(baseline, cand), (baseline, cand)
    return found


def test_a_change_of_variables_and_its_inverse_cancel():
    # st5 -= st1, then st5 += st1: nothing at all
    base = "pick 5; dup 2; push -1; mul; add; place 5; pick 5; dup 2; add; place 5"
    assert candidates(base)[0] == []


def test_a_conjugated_loop_body_keeps_and_bumps_the_pointer():
    tinv = "pick 5; dup 2; push -1; mul; add; place 5; pick 6; dup 2; push -1; mul; add; place 6"
    body = "dup 1; dup 6; add; read_mem 1; pop 1; add; pick 5; addi 1; place 5"
    t = "pick 5; dup 2; add; place 5; pick 6; dup 2; add; place 6"
    best = candidates(f"{tinv}; {body}; {t}")[0]
    assert [str(i) for i in best] == ["pick 5", "read_mem 1", "addi 2", "place 6", "add"]


@pytest.mark.parametrize(
    "base",
    [
        "dup 1; push -1; mul; add; dup 2; add",  # - st1 + st2: not the identity
        "dup 1; push -2; mul; add; dup 2; dup 2; add; add",  # - 2*st1 + (st1 + st1)? no: st2 + st1
        "dup 0; mul; dup 1; push -1; mul; add",  # x*x is no linear term of x
    ],
)
def test_forms_that_only_look_alike_are_not_merged(base):
    for cand in candidates(base):
        assert cand != []


def test_p_plus_one_after_a_read_is_made_from_the_pointer_the_read_left():
    df = simplify(extract(code("dup 0; read_mem 1; pop 1; swap 1; addi 1")))
    (addi,) = [n for n in df.nodes if n.instr.name == "addi"]
    (read,) = [n for n in df.nodes if n.instr.name == "read_mem"]
    # the read's value is used (it stays), so p + 1 comes from its pointer: p - 1 + 2
    assert addi.instr.arg == 2 and addi.inputs == (read.outputs[0],)


def test_an_unused_read_is_dropped_but_not_kept_alive_by_its_pointer():
    # reads at a and a + 1 (pointer of the first read + 2); only a + 1's value is used
    base = "dup 0; read_mem 1; addi 2; read_mem 1; pop 1; swap 1; pop 1; swap 1; pop 1"
    best = candidates(base)[0]
    assert [str(i) for i in best].count("read_mem 1") == 1


def test_a_write_is_never_dropped():
    base = "dup 1; dup 1; write_mem 1; pop 1"
    for cand in candidates(base):
        assert "write_mem 1" in [str(i) for i in cand]


def test_linear_forms_are_exact_field_combinations():
    df = extract(code("dup 1; push 3; mul; dup 1; add; push -1; mul"))
    forms = linear_forms(df)
    s0, s1 = df.entry[-1], df.entry[-2]
    (terms, c) = forms[df.final[-1]]
    p = 2**64 - 2**32 + 1
    assert dict(terms) == {s1: p - 3, s0: p - 1} and c == 0


def test_a_high_degree_term_is_one_atom_of_a_linear_form():
    # x + (x^64 - x^64): the same x^64 value taken once with +1 and once with -1 cancels
    # (proven exactly: the block is the identity); x + (x^64 - x^32 * x^32) is the identity
    # too, but its two high-degree values are different atoms, which linear forms never merge
    chain = "; ".join(["dup 0; mul"] * 6)
    same = f"dup 0; {chain}; dup 0; push -1; mul; add; add"
    assert candidates(same) == [[]]
    half = "; ".join(["dup 0; mul"] * 5)
    other = f"dup 0; {chain}; dup 1; {half}; dup 0; mul; push -1; mul; add; add"
    for cand in candidates(other):
        assert cand != [] or proven(other, cand)


def test_aliased_cells_keep_the_order_of_reads_and_writes():
    # write v at p, then read at (p + 1) - 1 (the same cell, by linear form) and at p + 1
    base = (
        "dup 1; dup 1; write_mem 1; addi -1; read_mem 1; addi 2; read_mem 1; pop 1; swap 1; swap 1"
    )
    found = candidates(base)
    assert found
    for cand in found:
        names = [str(i) for i in cand]
        assert "write_mem 1" in names
        reads = [k for k, n in enumerate(names) if n.startswith("read_mem")]
        assert reads and names.index("write_mem 1") < max(reads)
