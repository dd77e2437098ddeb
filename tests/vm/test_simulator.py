"""Simulator API and conventions: start, inputs, external calls, tiers, and a smoke test on
real Trident compiler output (spec/../data/trident-std)."""

import json
import random
from pathlib import Path

import pytest

from tasmopt.errors import IsaError, TasmSyntaxError
from tasmopt.isa import P
from tasmopt.tasm import Instr, Label, Program, parse
from tasmopt.vm import ExternalCall, VmInput, run
from tasmopt.vm.codegen import HOT_THRESHOLD, decoded

ZEROS = VmInput(initial_stack=[0] * 16)
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "trident-std"

# ---- API ---------------------------------------------------------------------------------------


def test_ok_and_defaults():
    r = run(parse("push 1 halt"))
    assert r.ok and r.error is None and r.cycles == 2
    assert r.public_output == [] and r.sponge is None and r.external_calls == []
    assert r.jump_stack == [] and r.ram == {}


def test_start_at_label_and_index(execute):
    text = "push 1 halt f: push 2 halt"
    assert execute(text, ZEROS, start="f").stack[-1] == 2
    assert execute(text, ZEROS, start=2).stack[-1] == 2
    r = execute(text, ZEROS, start=4)  # one past the last instruction
    assert (r.error.kind, r.error.ip) == ("InstructionPointerOverflow", 4)
    with pytest.raises(ValueError):
        run(parse(text), start="nope")
    with pytest.raises(ValueError):
        run(parse(text), start=5)


def test_function_entry_return_without_caller_fails(execute):
    r = execute("halt f: push 1 return", ZEROS, start="f")
    assert (r.error.kind, r.error.ip, r.cycles) == ("JumpStackIsEmpty", 2, 1)


def test_initial_stack_validation_and_canonical_inputs():
    with pytest.raises(ValueError):
        run(parse("halt"), VmInput(initial_stack=[0] * 15))
    r = run(
        parse("read_io 1 divine 1 push -1 read_mem 1 pop 1 halt"),
        VmInput(
            public_input=[-1], secret_input=[P + 5], ram={-1: -2}, initial_stack=[-3] + [0] * 15
        ),
    )
    assert r.stack[0] == P - 3
    assert r.stack[16:18] == [P - 1, 5]
    assert r.stack[-1] == P - 2  # RAM[-1] = -2
    with pytest.raises(ValueError):
        run(parse("halt"), VmInput(secret_digests=[(1, 2, 3)]))


def test_deep_initial_stack(execute):
    stack = list(range(48))
    r = execute("pop 5 pop 5 pop 5 pop 5 pop 5 pop 5 pop 2 halt", VmInput(initial_stack=stack))
    assert r.ok and r.stack == list(range(16))
    r = execute("pop 5 " * 7 + "halt", VmInput(initial_stack=stack))
    assert r.error.kind == "TooShallow" and r.error.ip == 6 and len(r.stack) == 18


def test_input_ram_is_not_mutated():
    ram = {5: 1}
    r = run(parse("push 9 push 5 write_mem 1 halt"), VmInput(ram=ram))
    assert ram == {5: 1} and r.ram == {5: 9}


def test_runs_are_independent():
    program = parse("read_io 1 dup 0 push 10 write_mem 1 sponge_init halt")
    a = run(program, VmInput(public_input=[1]))
    b = run(program, VmInput(public_input=[2]))
    assert a.ram == {10: 1} and b.ram == {10: 2}
    assert a.stack != b.stack and a.heights == b.heights


def test_invalid_hand_built_program():
    bad = Program.from_items([Instr("pop", 7), Instr("halt")])
    with pytest.raises(IsaError):
        run(bad)
    # a hand-built program may carry a non-canonical immediate; it is reduced
    r = run(Program.from_items([Instr("push", -1), Instr("halt")]))
    assert r.stack[-1] == P - 1


# ---- external calls ------------------------------------------------------------------------------


def test_external_call_is_recorded_and_skipped(execute):
    text = "push 1 call @std_crypto_bigint__is_zero push 2 call @m__f halt"
    r = execute(text, ZEROS)
    assert r.ok and r.cycles == 5
    assert r.stack == [0] * 16 + [1, 2]
    assert r.jump_stack == []
    assert r.external_calls == [
        ExternalCall("@std_crypto_bigint__is_zero", 1, tuple([0] * 16 + [1])),
        ExternalCall("@m__f", 3, tuple([0] * 16 + [1, 2])),
    ]
    assert r.heights.processor == 5 and r.heights.op_stack == 2


def test_external_call_inside_a_hot_loop(execute):
    text = (
        "push 50 call loop halt "
        "loop: dup 0 push 0 eq skiz return call @ext__tick push -1 add recurse"
    )
    r = execute(text, ZEROS)
    assert r.ok and len(r.external_calls) == 50
    assert [c.stack[-1] for c in r.external_calls] == list(range(50, 0, -1))
    cycles = [c.cycle for c in r.external_calls]
    assert cycles[0] == 2 + 4 and all(b - a == 8 for a, b in zip(cycles, cycles[1:]))


def test_external_symbols_need_the_at_prefix():
    with pytest.raises(TasmSyntaxError):
        parse("call undefined_fn halt")
    # a hand-built program calling an undefined label treats it as external as well
    r = run(Program.from_items([Instr("call", "elsewhere"), Instr("halt")]))
    assert r.ok and r.external_calls[0].symbol == "elsewhere"


# ---- execution tiers ---------------------------------------------------------------------------


def test_hot_blocks_get_compiled_and_agree():
    text = "push 200 call loop halt loop: dup 0 push 0 eq skiz return push -1 add recurse"
    program = parse(text)
    r = run(program, ZEROS)
    assert r.ok
    dec = decoded(program)
    assert dec.blocks, "the loop body should have been compiled"
    assert all(count >= HOT_THRESHOLD for ip, count in dec.hot.items() if ip in dec.blocks)
    again = run(program, ZEROS)
    assert (again.stack, again.cycles, again.heights) == (r.stack, r.cycles, r.heights)


def test_block_source_is_inspectable():
    program = parse("push 1 push 2 add halt")
    blk = decoded(program).compile_block(0)
    assert blk.n == 4 and "def block" in blk.fn.source


_SAFE = [
    "push 3",
    "push -1",
    "push 4294967296",
    "dup 0",
    "dup 5",
    "dup 15",
    "swap 1",
    "swap 9",
    "pick 4",
    "place 3",
    "add",
    "mul",
    "eq",
    "addi 7",
    "pop 1",
    "pop 3",
    "split",
    "lt",
    "and",
    "xor",
    "pow",
    "div_mod",
    "log_2_floor",
    "pop_count",
    "invert",
    "nop",
    "xx_add",
    "xx_mul",
    "xb_mul",
    "x_invert",
    "read_io 1",
    "read_io 2",
    "divine 1",
    "write_io 1",
    "write_io 2",
    "read_mem 2",
    "write_mem 3",
    "push 0 assert",
    "push 1",
    "assert",
    "hash",
    "sponge_init",
    "sponge_absorb",
    "sponge_squeeze",
    "sponge_absorb_mem",
    "assert_vector",
    "merkle_step",
    "merkle_step_mem",
    "xx_dot_step",
    "xb_dot_step",
    "skiz",
    "push 0 skiz nop",
    "call @x__y",
]


def test_random_programs_agree_across_tiers(execute):
    """Differential test: random straight-line programs (many of which fail somewhere) give
    identical results in the handler tier and the compiled-block tier."""
    rng = random.Random(2024)
    kinds = set()
    for _ in range(200):
        body = " ".join(rng.choice(_SAFE) for _ in range(rng.randrange(1, 30)))
        depth = 16 + rng.randrange(0, 12)
        vm_input = VmInput(
            public_input=[rng.randrange(P) for _ in range(rng.randrange(4))],
            secret_input=[rng.randrange(2**33) for _ in range(rng.randrange(4))],
            secret_digests=[tuple(rng.randrange(P) for _ in range(5))],
            ram={rng.randrange(8): rng.randrange(P) for _ in range(4)},
            initial_stack=[
                rng.choice([0, 1, 2, 2**32 - 1, P - 1, rng.randrange(P)]) for _ in range(depth)
            ],
        )
        r = execute(body + " halt", vm_input, step_limit=rng.choice([5, 1000]))
        kinds.add(r.error.kind if r.error else "ok")
    assert {"ok", "TooShallow", "FailedU32Conversion", "StepLimitExceeded"} <= kinds


# ---- smoke test on real compiler output ------------------------------------------------------

KNOWN_KINDS = {
    "InstructionPointerOverflow",
    "JumpStackIsEmpty",
    "AssertionFailed",
    "VectorAssertionFailed",
    "InverseOfZero",
    "DivisionByZero",
    "LogarithmOfZero",
    "SpongeNotInitialized",
    "EmptyPublicInput",
    "EmptySecretInput",
    "EmptySecretDigestInput",
    "TooShallow",
    "FailedU32Conversion",
    "StepLimitExceeded",
}


def _module(name):
    path = DATA / f"{name}.json"
    assert path.exists(), f"trident-std module {name} not found at {DATA}"
    return json.loads(path.read_text())


def _with_entries(module):
    """The module's TASM with ``__entry_<fn>: call __<fn> halt`` stubs prepended."""
    stubs = "".join(f"__entry_{fn}: call __{fn} halt\n" for fn in module["functions"])
    return parse(stubs + module["compiler_tasm"])


def _call_input(seed):
    rng = random.Random(seed)
    return VmInput(
        public_input=[rng.randrange(2**32) for _ in range(64)],
        secret_input=[rng.randrange(2**32) for _ in range(64)],
        initial_stack=[rng.randrange(2**32) for _ in range(48)],  # 16 + 32 words
    )


def test_fibonacci_function_runs():
    module = _module("std_math_fibonacci")
    program = _with_entries(module)
    stack = [0] * 47 + [10]
    r = run(program, VmInput(initial_stack=stack), start="__entry_fib256")
    assert r.ok, r.error
    assert r.cycles > 10 and r.heights.processor == r.cycles


@pytest.mark.parametrize(
    "name",
    [
        "coin",
        "std_math_lut",
        "std_crypto_poseidon",
        "std_fhe_lwe",
        "std_private_poly",
        "std_crypto_keccak256",
    ],
)
def test_every_function_of_a_module_runs(execute, name):
    module = _module(name)
    program = _with_entries(module)
    for i, fn in enumerate(module["functions"]):
        r = run(program, _call_input(i), start=f"__entry_{fn}", step_limit=20_000, measure=(i == 0))
        assert r.error is None or r.error.kind in KNOWN_KINDS
        assert r.cycles >= 1
    # the same function twice: deterministic, and both tiers agree
    fn = module["functions"][0]
    a = run(program, _call_input(0), start=f"__entry_{fn}", step_limit=20_000)
    stubs = "".join(f"__entry_{f}: call __{f} halt\n" for f in module["functions"])
    b = execute(
        stubs + module["compiler_tasm"], _call_input(0), start=f"__entry_{fn}", step_limit=20_000
    )
    assert (a.stack, a.cycles, a.heights) == (b.stack, b.cycles, b.heights)


def test_digest_dependent_program_reads_its_own_digest():
    program = parse("dup 11 write_io 1 halt")
    r = run(program)
    from tasmopt.vm import program_digest

    assert r.public_output == [program_digest(program)[0]]
    assert Label("x") not in program.items


def test_decoded_steps_are_shared_only_where_everything_they_bake_in_agrees():
    """`codegen._decode_one` shares a step between programs: the same instruction at the same
    index; not at another index (its next and skip addresses differ), not for a call whose
    label resolves elsewhere or not at all, not for a ``skiz`` that is last in one program.
    Each program still computes what it says (adversarial: a shared handler baked with the
    wrong address or target would jump wrong)."""
    a = parse("push 2\npush 3\ncall f\nhalt\nf:\nmul\nwrite_io 1\nreturn")
    b = parse("push 2\npush 3\ncall f\nhalt\npush 9\nf:\nadd\nwrite_io 1\nreturn")
    c = parse("push 3\npush 2\ncall @ext\nhalt")
    da, db, dc = decoded(a), decoded(b), decoded(c)
    assert da.steps[0] is db.steps[0] and da.steps[1] is db.steps[1]
    assert da.steps[2] is not db.steps[2]  # f at 4 in one, 5 in the other
    assert da.values[2][2] == 4 and db.values[2][2] == 5 and dc.values[2][5] == "@ext"
    assert dc.steps[0] is not da.steps[1]  # push 3 at another index
    assert run(a).public_output == [6] and run(b).public_output == [5]
    last = parse("push 0\nskiz")
    mid = parse("push 0\nskiz\npush 1")
    assert decoded(last).shapes[1].variant == "last" and decoded(mid).shapes[1].variant == ""
    assert decoded(last).steps[1] is not decoded(mid).steps[1]
