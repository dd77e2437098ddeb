"""One source per instruction fact: `tasmopt/isa.py` (from spec/triton_isa.json).

Every per-instruction fact (control flow, side effects, commutativity, u32, RAM, sponge, stack
shuffles, read depth) is a field or property of `tasmopt.isa.Instruction`; other modules derive
name sets with `tasmopt.isa.names_where`. The grep-level check below fails when a module spells
out its own collection of mnemonics; the other tests pin the derived facts to the simulator.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from tasmopt.isa import P, all_instructions, instruction_set, names_where
from tasmopt.tasm import parse
from tasmopt.vm import VmInput, run

ROOT = Path(__file__).resolve().parents[1]
MNEMONICS = {i.name for i in all_instructions()}

#: Modules that implement per-instruction semantics, where one branch per instruction *is*
#: the code (the simulator's templates, the symbolic executor, the evaluator and guard solver
#: of symbolic values, the algebraic simplifier, the peephole patterns, the grammar's typing
#: of values). A `name in ("a", "b")` there selects the code for those two instructions.
SEMANTICS = {
    "tasmopt/vm/instructions.py",
    "tasmopt/vm/symbolic.py",
    "tasmopt/vm/evaluate.py",
    "tasmopt/vm/guards.py",
    "tasmopt/search/algebra.py",
    "tasmopt/rules.py",
    "tasmopt/model/grammar.py",
    # the soundness benchmark's mutation operators pick the instructions they corrupt
    "benchmarks/soundness.py",
}


def _mnemonic_collections(path: Path) -> list[tuple[int, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            strs = [
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            if len(strs) >= 2 and len(strs) == len(node.elts) and set(strs) <= MNEMONICS:
                found.append((node.lineno, strs))
    return found


def test_no_module_keeps_its_own_instruction_name_set():
    offenders = []
    for package in ("tasmopt", "service", "worker", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "tasmopt/isa.py" or rel in SEMANTICS:
                continue
            offenders += [f"{rel}:{line} {names}" for line, names in _mnemonic_collections(path)]
    assert not offenders, (
        "instruction-name collections outside tasmopt/isa.py; derive them "
        "with tasmopt.isa.names_where:\n" + "\n".join(offenders)
    )


def test_the_scan_finds_a_planted_name_set(tmp_path):
    # the check above must be able to fail
    planted = tmp_path / "m.py"
    planted.write_text('X = frozenset({"skiz", "call"})\nif n in ("push", "addi"): pass\n')
    assert [line for line, _ in _mnemonic_collections(planted)] == [1, 2]


def test_goldilocks_prime_is_defined_once():
    hits = []
    for package in ("tasmopt", "service", "worker"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text().replace("_", "").upper()
            if "0XFFFFFFFF00000001" in text or "18446744069414584321" in text:
                hits.append(path.relative_to(ROOT).as_posix())
    assert hits == ["tasmopt/isa.py"]
    assert P == 2**64 - 2**32 + 1


def test_derived_sets_are_the_spec_sets():
    # spelled out here once, as the expected values of the derivations (spec §5)
    assert names_where(lambda i: i.is_control_flow) == {
        "halt",
        "skiz",
        "call",
        "return",
        "recurse",
        "recurse_or_return",
    }
    assert names_where(lambda i: i.ends_frame) == {"halt", "return"}
    assert names_where(lambda i: i.reads_jump_stack) == {"return", "recurse", "recurse_or_return"}
    assert names_where(lambda i: i.has_side_effect) == {
        "read_io",
        "write_io",
        "divine",
        "read_mem",
        "write_mem",
        "sponge_init",
        "sponge_absorb",
        "sponge_absorb_mem",
        "sponge_squeeze",
        "merkle_step",
        "merkle_step_mem",
        "xx_dot_step",
        "xb_dot_step",
        "b_horner_step",
        "x_horner_step",
    }
    assert names_where(lambda i: i.writes_ram) == {"write_mem"}
    assert names_where(lambda i: i.uses_sponge) == {
        "sponge_init",
        "sponge_absorb",
        "sponge_absorb_mem",
        "sponge_squeeze",
    }
    assert names_where(lambda i: i.is_guarded) == {
        "lt",
        "and",
        "xor",
        "log_2_floor",
        "pop_count",
        "pow",
        "div_mod",
        "invert",
        "x_invert",
        "assert",
        "assert_vector",
    }
    assert names_where(lambda i: i.is_stack_shuffle) == {
        "push",
        "pop",
        "dup",
        "swap",
        "pick",
        "place",
    }
    assert names_where(lambda i: i.is_u32_flagged) == {
        "split",
        "lt",
        "and",
        "xor",
        "log_2_floor",
        "pow",
        "div_mod",
        "pop_count",
        "merkle_step",
        "merkle_step_mem",
    }


def _binary(name: str, a: int, b: int) -> tuple[str | None, list[int]]:
    # what a rewrite must keep: the result, or the kind of failure (the failing stack itself is
    # not observable)
    res = run(parse(f"push {b} push {a} {name} halt"), VmInput())
    return (None, res.stack[16:]) if res.error is None else (res.error.kind, [])


@pytest.mark.parametrize(
    "name",
    sorted(
        i.name for i in instruction_set() if not i.has_arg and i.pops() == 2 and i.pushes() == 1
    ),
)
def test_commutative_flag_matches_the_simulator(name):
    rng = random.Random(name)
    pairs = [(rng.randrange(1 << 32), rng.randrange(1 << 32)) for _ in range(64)]
    pairs += [(rng.randrange(P), rng.randrange(P)) for _ in range(16)] + [(0, 1), (2, 3)]
    symmetric = all(_binary(name, a, b) == _binary(name, b, a) for a, b in pairs)
    assert instruction_set()[name].commutative == symmetric


def test_simulator_u32_keys_come_from_the_table():
    # xor records an `and` entry (spec §5.7): the template takes the key from the table
    res = run(parse("push 5 push 3 xor push 7 push 2 div_mod halt"), VmInput())
    assert res.error is None
    assert res.heights is not None
    from tasmopt.vm.instructions import Shape, shape_lines

    lines = "\n".join(shape_lines(Shape("xor"), instruction_set()["xor"]))
    assert "('and'," in lines and "U32KEY" not in lines
    lines = "\n".join(shape_lines(Shape("div_mod"), instruction_set()["div_mod"]))
    assert "('lt'," in lines and "('split'," in lines


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("assert_vector", 10),
        ("dup 7", 8),
        ("swap 15", 16),
        ("merkle_step", 6),
        ("sponge_absorb_mem", 5),
        ("add", 2),
        ("push 3", 0),
        ("pop 4", 4),
    ],
)
def test_reads_depth(text, depth):
    name, _, arg = text.partition(" ")
    assert instruction_set()[name].reads_depth(int(arg) if arg else None) == depth
