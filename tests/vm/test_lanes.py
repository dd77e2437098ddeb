"""The lane evaluator (`tasmopt.vm.lanes`) says what the simulator says, lane by lane, and
the verifier never trusts it alone."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest

from tasmopt.isa import P, all_instructions
from tasmopt.lower.triton import lower
from tasmopt.tasm import parse
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr, Program
from tasmopt.tir import codec
from tasmopt.vm import VmInput, run, tip5
from tasmopt.vm import equivalence as eq
from tasmopt.vm import lanes as lanes_mod
from tasmopt.vm.equivalence import BlockCheck, check_block, observe
from tasmopt.vm.lanes import (
    LANE_OPS,
    LaneInputs,
    execute,
    gl_add,
    gl_inv,
    gl_mul,
    gl_pow,
    gl_sqr,
    gl_sub,
    lane_coverage,
    run_lanes,
    tip5_lanes,
)
from tasmopt.vm.witness import witness

EDGES = [0, 1, 2, P - 1, P - 2, 2**32 - 1, 2**32, 2**32 + 1, 2**63, 2**63 - 1, P // 2, 12345]


def _values(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return EDGES + [rng.randrange(P) for _ in range(n)]


def _arr(xs: list[int]) -> np.ndarray:
    return np.array(xs, dtype=np.uint64)


def test_goldilocks_lanes_match_python_ints():
    a = _values(500, 1)
    b = list(reversed(_values(500, 2)))
    x, y = _arr(a), _arr(b)
    assert gl_add(x, y).tolist() == [(u + v) % P for u, v in zip(a, b)]
    assert gl_sub(x, y).tolist() == [(u - v) % P for u, v in zip(a, b)]
    assert gl_mul(x, y).tolist() == [u * v % P for u, v in zip(a, b)]
    assert gl_sqr(x).tolist() == [u * u % P for u in a]
    assert gl_inv(x).tolist() == [pow(u, P - 2, P) for u in a]  # 0 maps to 0
    e = [v & 0xFFFF_FFFF for v in b]
    assert gl_pow(x, _arr(e)).tolist() == [pow(u, v, P) for u, v in zip(a, e)]


def test_gl_mul_reduces_non_canonical_operands():
    # the Tip5 S-box multiplies looked-up words that may be >= p
    big = [2**64 - 1, P, P + 5, 2**64 - 2**32]
    assert gl_mul(_arr(big), _arr(big[::-1])).tolist() == [
        u * v % P for u, v in zip(big, big[::-1])
    ]


def test_tip5_lanes_is_the_permutation_and_records_the_cascade_words():
    rng = random.Random(3)
    states = [[rng.randrange(P) for _ in range(16)] for _ in range(40)]
    states += [[0] * 16, [P - 1] * 16, [1] * 10 + [0] * 6]
    montgomery: list[np.ndarray] = []
    out = tip5_lanes(_arr(states).reshape(len(states), 16), montgomery)
    for i, s in enumerate(states):
        ref, words = tip5.permutation_with_lookups(s)
        assert out[i].tolist() == ref
        assert np.concatenate([m[i] for m in montgomery]).tolist() == words


def _inputs(n: int, seed: int = 5, depth: int = 40) -> list[VmInput]:
    return [witness(i, seed, depth=depth, inputs=20, digests=4).vm_input() for i in range(n)]


def _agree_with_simulator(program: Program, inputs: list[VmInput]) -> int:
    got = run_lanes(program, inputs)
    assert got is not None
    checked = 0
    for a, b in zip(got, [run(program, inp) for inp in inputs], strict=True):
        assert (a.error is None) == (b.error is None), (a.error, b.error)
        if b.error is not None:
            assert (a.error.kind, a.error.ip) == (b.error.kind, b.error.ip)
        else:
            assert observe(a) == observe(b)
            assert a.heights == b.heights and a.cycles == b.cycles
        checked += 1
    return checked


def _real_blocks(trident_std: dict[str, dict]) -> list[list[Instr]]:
    """Every straight-line block of our lowering of the real data."""
    blocks = []
    for mod in trident_std.values():
        low = lower(codec.decode(mod["tir"]))
        for fn in low.functions:
            if fn.unlowerable or not fn.name:
                continue
            for b in fn.blocks:
                text = "\n".join(
                    ln for ln in low.lines[b.start : b.end] if ln.strip() and "//" not in ln
                )
                if text:
                    blocks.append(list(parse_instructions(text)))
    return blocks


def test_every_lane_of_the_real_blocks_matches_the_simulator(trident_std):
    inputs = _inputs(24)
    blocks = _real_blocks(trident_std)
    covered = lanes = 0
    for instrs in blocks:
        program = Program.from_items([*instrs, Instr("halt")])
        if not lane_coverage(program):
            continue
        covered += 1
        lanes += _agree_with_simulator(program, inputs)
    assert len(blocks) > 900 and covered / len(blocks) > 0.95
    assert lanes == covered * 24


RANDOM_OPS = [
    "add", "mul", "eq", "split", "lt", "and", "xor", "pop_count", "div_mod", "pow",
    "log_2_floor", "invert", "xx_add", "xx_mul", "xb_mul", "assert", "assert_vector",
    "hash", "sponge_init", "sponge_absorb", "sponge_squeeze", "sponge_absorb_mem",
    "read_mem 3", "write_mem 2", "read_io 2", "write_io 3", "divine 1", "dup 7", "swap 5",
    "pick 9", "place 4", "pop 2", "push 4294967296", "addi 18446744069414584320", "nop",
]  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_the_simulator_lane_by_lane(seed):
    # every covered mnemonic, failing lanes (u32 checks, asserts, inverses of zero, missing
    # sponge) mixed with halting ones
    rng = random.Random(seed)
    text = "\n".join(rng.choice(RANDOM_OPS) for _ in range(rng.randrange(4, 40))) + "\nhalt"
    program = parse(text)
    assert lane_coverage(program)
    inputs = _inputs(32, seed=seed)
    _agree_with_simulator(program, inputs)


def test_every_covered_mnemonic_is_an_instruction_and_control_flow_is_not_covered():
    names = {i.name for i in all_instructions()}
    assert set(LANE_OPS) <= names
    for text in ("push 1\nskiz\nnop\nhalt", "call f\nhalt\nf:\nreturn", "merkle_step\nhalt"):
        assert execute(parse(text), _inputs(4)) is None
    assert execute(parse("push 1\nhalt\npush 2"), _inputs(4)) is None  # halt must be last


def test_uneven_stack_depths_fall_back_to_the_simulator():
    inputs = [_inputs(1, depth=20)[0], _inputs(1, depth=30)[0]]
    assert execute(parse("add\nhalt"), inputs) is None


def test_a_difference_in_one_lane_is_found():
    # dup 3 and dup 4 agree wherever st3 == st4: only some witness families tell them apart
    program_b, program_c = parse("dup 3\nhalt"), parse("dup 4\nhalt")
    lanes = LaneInputs(_inputs(64))
    rb, rc = execute(program_b, lanes), execute(program_c, lanes)
    same = rb.same_observables(rc)
    assert not same.all() and same.any()  # the "repeated" family agrees, others do not
    assert rb.first_difference(rc) == int(np.flatnonzero(~same)[0])
    assert check_block(BlockCheck(["dup 3"], ["dup 4"], seed=1)).equivalent is False


def test_hidden_cells_are_left_out_of_the_comparison_and_nothing_else():
    lanes = LaneInputs(_inputs(16))
    a = execute(parse("push 7\npush 1073741824\nwrite_mem 1\npop 1\nhalt"), lanes)
    b = execute(parse("halt"), lanes)
    assert not a.same_observables(b).any()
    assert a.same_observables(b, frozenset({1073741824})).all()
    assert not a.same_observables(b, frozenset({1073741825})).any()


def test_failing_lanes_equal_failing_lanes_only():
    lanes = LaneInputs(_inputs(32))
    # baseline fails where st0 != 1 (most lanes); the candidate never fails
    a = execute(parse("assert\nhalt"), lanes)
    b = execute(parse("pop 1\nhalt"), lanes)
    same = a.same_observables(b)
    assert not same[~a.halted].any()  # a failure never equals a halt
    assert same[a.halted].all()


def test_check_block_runs_covered_blocks_on_the_wider_lane_batch(monkeypatch):
    seen = []
    shipped = eq._lane_runs

    def spy(prog_b, prog_c, ws, limits, seed):
        out = shipped(prog_b, prog_c, ws, limits, seed)
        seen.append((len(ws), out is not None))
        return out

    monkeypatch.setattr(eq, "_lane_runs", spy)
    verdict = check_block(BlockCheck(["dup 0", "add"], ["push 2", "mul"], seed=2))
    assert verdict.equivalent is True and verdict.heights["processor"] == 3
    assert seen == [(eq.LANE_WITNESSES, True)]
    # not covered (a Merkle step): the simulator runs the usual witnesses
    seen.clear()
    check_block(BlockCheck(["merkle_step", "pop 1"], ["merkle_step", "pop 1"], seed=2))
    assert seen == [(eq.LANE_WITNESSES, False)]


def test_a_wrong_lane_semantics_is_caught_by_the_spot_check(monkeypatch, caplog):
    # plant a bug: the lane `mul` adds. Baseline `add`, candidate `mul` would then agree on
    # every lane; the spot check against the simulator throws the batch away
    monkeypatch.setitem(LANE_OPS, "mul", LANE_OPS["add"])
    ws = [witness(i, 4, depth=20, inputs=4, digests=1) for i in range(16)]
    with caplog.at_level(logging.ERROR):
        assert eq._lane_runs(parse("add\nhalt"), parse("mul\nhalt"), ws, (4, 4), 4) is None
    assert "disagrees with the simulator" in caplog.text
    verdict = check_block(BlockCheck(["add"], ["mul"], seed=4))
    assert verdict.equivalent is False


def test_lanes_module_does_not_keep_its_own_field_constant():
    assert lanes_mod._P == np.uint64(P)


# -- the lane pass cannot hide a difference that a witness exposes ------------------------------
# The verifier's known holes (tests/vm/test_soundness.py): a rare guard, a live sponge, a
# high-degree term, a RAM address from a comparison, possibly aliasing writes. Each wrong
# candidate is run on lanes with 63 random witnesses plus the one input that exposes it: that
# lane must differ, and must say what the simulator says for both programs. (Mid-block entries
# and a client baseline that differs from our lowering are function-level questions: the lane
# pass only ever sees one straight-line block and its baseline.)

from test_soundness import FERMAT, GUARDED, block  # noqa: E402  (tests/vm/test_soundness.py)

EXPOSED = [
    *[(base, wrong, top, None, None) for base, wrong, _right, top in GUARDED],
    (
        block("push 1; push 2; push 3; push 4; push 5; push 6; push 7; push 8; push 9; "
              "push 12345; sponge_absorb; sponge_squeeze"),
        block("push 1; push 2; push 3; push 4; push 5; push 6; push 7; push 8; push 9; "
              "push 1234; sponge_absorb; sponge_squeeze"),
        [], None, tuple(range(100, 116)),
    ),
    (block("sponge_squeeze; pop 5; pop 5"),
     block("sponge_squeeze; pop 5; pop 5; sponge_squeeze; pop 5; pop 5"), [], None,
     tuple(range(16))),
    (block(FERMAT), block("pop 1; push 1"), [P - 7], None, None),
    (block("eq; read_mem 1; pop 1"), block("pop 2; push 0; read_mem 1; pop 1"), [4, 4],
     {0: 11, 1: 22}, None),
    (block("push 5; dup 1; write_mem 1; pop 1; push 6; dup 2; write_mem 1; pop 1"),
     block("push 6; dup 2; write_mem 1; pop 1; push 5; dup 1; write_mem 1; pop 1"), [3, 3],
     None, None),
]  # fmt: skip


@pytest.mark.parametrize(("base", "wrong", "top", "ram", "sponge"), EXPOSED)
def test_an_exposing_witness_is_never_hidden_by_the_lanes(base, wrong, top, ram, sponge):
    depth = 16 + len(top)
    inputs = [witness(i, 9, depth=depth, inputs=4, digests=1).vm_input() for i in range(63)]
    exposing = VmInput(ram=ram or {}, initial_stack=[0] * 16 + list(reversed(top)), sponge=sponge)
    inputs.append(exposing)
    prog_b = Program.from_items([*parse_instructions("\n".join(base)), Instr("halt")])
    prog_w = Program.from_items([*parse_instructions("\n".join(wrong)), Instr("halt")])
    lanes = LaneInputs(inputs)
    rb, rw = execute(prog_b, lanes), execute(prog_w, lanes)
    assert rb is not None and rw is not None  # the lane pass covers these blocks
    k = len(inputs) - 1
    assert not rb.same_observables(rw)[k]
    for prog, lane in ((prog_b, rb), (prog_w, rw)):
        ref = run(prog, exposing)
        assert observe(lane.result(k)) == observe(ref)
        assert (lane.result(k).error is None) == (ref.error is None)
