"""Chained RAM word accesses fused into one ``read_mem n`` / ``write_mem n``
(`tasmopt.search.dataflow.fuse_ram_words`, issue 11 item 4): every candidate is proven by
`check_block`; the fused write leaves RAM as the chain did (simulator); reads of adjacent
cells at independent pointers are gathered, the pointers they left re-derived. Adversarially,
a write or an output between two reads, a gap, two bases and a sum past 5 words are not
fused."""

from __future__ import annotations

import pytest

from tasmopt.search.algebra import simplify
from tasmopt.search.dataflow import extract
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.vm.equivalence import BlockCheck, check_block
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput


def code(text: str):
    return parse_instructions(text.replace(";", "\n"))


def candidates(baseline: str):
    found = optimize_block(code(baseline), SearchConfig(states=20_000))
    lines = tuple(x.strip() for x in baseline.split(";"))
    for cand in found:
        assert check_block(BlockCheck(lines, tuple(str(i) for i in cand))).equivalent, cand
    return [" ".join(str(i) for i in c) for c in found]


def ram_ops(text: str) -> list[str]:
    flow = simplify(extract(code(text)))
    return [str(n.instr) for n in flow.nodes if n.instr.name in ("read_mem", "write_mem")]


@pytest.mark.parametrize(
    ("base", "want"),
    [
        ("read_mem 1; read_mem 1; read_mem 1", "read_mem 3"),
        ("read_mem 2; read_mem 3", "read_mem 5"),
        ("write_mem 1; write_mem 1; write_mem 1", "write_mem 3"),
        ("write_mem 1; write_mem 2; pop 1", "write_mem 3 pop 1"),
        # the pointer re-derived by addi instead of the one the read left (the linear forms)
        (
            "dup 0; read_mem 1; pop 1; swap 1; addi -1; dup 0; read_mem 1; pop 1; swap 1; addi -1",
            "read_mem 2",
        ),
    ],
)
def test_a_chain_becomes_one_access(base, want):
    assert candidates(base)[0] == want


def test_a_fused_write_leaves_ram_as_the_chain_did():
    harness = "main:\n    push 11\n    push 22\n    push 33\n    push 1000\n    {}\n    pop 1\n    push 1002\n    read_mem 3\n    pop 1\n    write_io 3\n    halt\n"
    outs = []
    for body in ("write_mem 1\n    write_mem 1\n    write_mem 1", "write_mem 3"):
        r = run(parse(harness.format(body)), VmInput(), measure=False)
        assert r.error is None
        outs.append(list(r.public_output))
    assert outs[0] == outs[1] and len(set(outs[0])) == 3


@pytest.mark.parametrize(
    "base",
    [
        "read_mem 1; swap 1; push 7; swap 1; write_mem 1; read_mem 1",  # a write between: may alias
        "read_mem 1; swap 1; write_io 1; read_mem 1",  # an effect between
        "read_mem 1; addi 3; read_mem 1",  # p, then p + 2: a gap
        "read_mem 3; read_mem 3",  # six words: past the argument range
        "write_mem 3; write_mem 3",
    ],
)
def test_what_is_not_one_access_stays_apart(base):
    ops = ram_ops(base)
    assert len(ops) >= 2, ops
    for c in candidates(base):
        assert "read_mem 6" not in c and "write_mem 6" not in c


@pytest.mark.parametrize(
    ("base", "want"),
    [
        # cells p, p+1, p+2 read one by one (a struct load): one read of the top cell
        (
            "dup 0; read_mem 1; pop 1; dup 1; addi 1; read_mem 1; pop 1; dup 2; addi 2; read_mem 1; pop 1",
            "read_mem 3",
        ),
        # in another order, at constant addresses
        ("push 101; read_mem 1; pop 1; push 100; read_mem 1; pop 1", "read_mem 2"),
        # a read of two next to a read of one
        ("dup 0; read_mem 2; pop 1; dup 2; addi 1; read_mem 1; pop 1", "read_mem 3"),
    ],
)
def test_reads_of_adjacent_cells_become_one(base, want):
    best = candidates(base)[0]
    assert want in best, best


def test_the_pointers_the_reads_left_are_still_right():
    # both left pointers stay on the stack: re-derived from the one the gathered read leaves
    # (every candidate is proven by check_block in `candidates`)
    for base in (
        "dup 0; read_mem 1; dup 2; addi 1; read_mem 1",
        "read_mem 1; dup 0; read_mem 1",  # the intermediate pointer is used again
    ):
        assert ram_ops(base) == ["read_mem 2"]
        candidates(base)


@pytest.mark.parametrize(
    "base",
    [
        "dup 0; read_mem 1; pop 1; dup 1; addi 2; read_mem 1; pop 1",  # p and p+2: a gap
        "dup 0; read_mem 1; pop 1; dup 2; addi 1; read_mem 1; pop 1",  # p and q+1: two bases
        # a write to p+1 between the reads of p and p+1
        "dup 0; read_mem 1; pop 1; push 9; dup 2; addi 1; write_mem 1; pop 1; dup 1; addi 1; read_mem 1; pop 1",
        # six cells
        "dup 0; read_mem 3; pop 1; dup 3; addi 3; read_mem 3; pop 1",
    ],
    ids=["gap", "two-bases", "write-between", "six-cells"],
)
def test_reads_that_are_not_one_block_of_cells_stay_apart(base):
    for c in candidates(base):
        assert (
            not any(f"read_mem {n}" in c for n in (2, 3, 4, 5, 6)) or base.count("read_mem 3") == 2
        )
        assert "read_mem 6" not in c


@pytest.mark.parametrize(
    ("base", "want"),
    [
        ("read_mem 3; pop 2; swap 1; pop 1", "read_mem 1"),  # only the middle cell is used
        ("read_mem 3; pop 1; pop 1", "read_mem 2"),  # the lowest cell is not
        ("read_mem 3; swap 1; pop 1; swap 1; pop 1", "read_mem 1"),  # the pointer is kept
        ("read_mem 3; swap 3; pop 3", "addi"),  # only the pointer: no read at all
    ],
)
def test_a_read_of_cells_partly_unused_reads_only_the_used_ones(base, want):
    # an inlined struct load of which one field is used (every candidate proven)
    assert want in candidates(base)[0]
