"""One test for each failure each instruction can raise (Triton VM spec §4, §6 and the
``failures`` entries of the instruction table), with the state left as before the failing
instruction and the check order where the spec gives one."""

import re

import pytest

from tasmopt.isa import P, instruction_set
from tasmopt.tasm import parse
from tasmopt.vm import VmInput

ZEROS = VmInput(initial_stack=[0] * 16)
BIG = 2**32  # smallest non-u32
_ANY = object()


def check_failure(execute, prefix, instr, kind, vm_input=ZEROS, *, detail=_ANY, isa="release"):
    """Run ``prefix instr halt``; assert that ``instr`` fails with ``kind`` after the
    straight-line ``prefix`` and that the state equals that of ``prefix halt``."""
    r = execute(f"{prefix} {instr} halt", vm_input, isa=isa)
    n = len(parse(prefix, isa).instructions)
    assert r.error is not None, f"{instr} did not fail"
    assert (r.error.kind, r.error.ip, r.cycles) == (kind, n, n)
    if detail is not _ANY:
        assert r.error.detail == detail
    before = execute(f"{prefix} halt", vm_input, isa=isa)
    assert before.ok
    assert r.stack == before.stack
    assert r.ram == before.ram
    assert r.public_output == before.public_output
    assert (r.public_input_consumed, r.secret_input_consumed, r.secret_digests_consumed) == (
        before.public_input_consumed,
        before.secret_input_consumed,
        before.secret_digests_consumed,
    )
    assert r.sponge == before.sponge
    assert r.jump_stack == before.jump_stack
    return r


# --- TooShallow: every shrinking instruction, from the instruction table --------------------


def _shrinking():
    cases = []
    for variant in ("release", "head"):
        for ins in instruction_set(variant):
            for arg in [1, 2, 3, 4, 5] if ins.arg_kind == "n_1_5" else [None]:
                delta = ins.stack_delta(arg)
                if delta < 0 and (variant == "release" or ins.opcode in (80, 88)):
                    cases.append(
                        pytest.param(variant, ins.name, arg, delta, id=f"{ins.name}-{arg}")
                    )
    return cases


# spec §6: the shrinking instructions, written out independently
SPEC_SHRINKING = {
    "skiz",
    "pop",
    "lt",
    "assert",
    "write_mem",
    "and",
    "hash",
    "write_io",
    "xor",
    "assert_vector",
    "pow",
    "sponge_absorb",
    "add",
    "mul",
    "eq",
    "xx_add",
    "xx_mul",
    "xb_mul",
}


def test_shrinking_instructions_match_spec():
    assert {p.values[1] for p in _shrinking()} == SPEC_SHRINKING


@pytest.mark.parametrize(("variant", "name", "arg", "delta"), _shrinking())
def test_too_shallow(execute, variant, name, arg, delta):
    text = name if arg is None else f"{name} {arg}"
    # one word short: len + delta == 15
    prefix = "push 1 " * (-delta - 1)
    check_failure(execute, prefix, text, "TooShallow", isa=variant, detail=None)
    # exactly enough: TooShallow no longer fires (the instruction may fail otherwise)
    r = execute(f"push 1 {prefix} {text} halt", ZEROS, isa=variant)
    assert r.error is None or r.error.kind != "TooShallow"


def test_too_shallow_is_checked_before_instruction_checks(execute):
    check_failure(execute, "", "assert", "TooShallow")  # st0 = 0 would fail the assertion
    check_failure(
        execute,
        "",
        "lt",
        "TooShallow",  # st0 non-u32
        VmInput(initial_stack=[0] * 15 + [BIG]),
    )
    check_failure(execute, "", "sponge_absorb", "TooShallow")  # no sponge either
    check_failure(execute, "push 1 push 2 push 3 push 4", "assert_vector", "TooShallow")
    check_failure(execute, "", "skiz", "TooShallow")


def test_too_shallow_uses_net_delta_not_pops(execute):
    # hash pops 10 but its delta is -5: 21 words suffice
    r = execute("push 0 push 0 push 0 push 0 push 0 hash halt", ZEROS)
    assert r.ok
    # write_mem 5 pops 6 and pushes 1: 21 words suffice
    r = execute("push 0 push 0 push 0 push 0 push 0 write_mem 5 halt", ZEROS)
    assert r.ok


# --- InstructionPointerOverflow ------------------------------------------------------------


def test_empty_program(execute):
    r = execute("", ZEROS)
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 0, 0)


def test_running_off_the_end(execute):
    r = execute("push 1 pop 1", ZEROS)
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 2, 2)
    assert r.stack == [0] * 16


def test_call_to_label_at_end_of_program(execute):
    r = execute("call end halt end:", ZEROS)
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 2, 1)
    assert r.jump_stack == [(1, 2)]


def test_skiz_skipping_past_the_end(execute):
    r = execute("push 0 skiz nop", ZEROS)
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 3, 2)
    r = execute("push 0 skiz push 5", ZEROS)  # skipping a 2-word instruction
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 3, 2)


def test_skiz_end_of_program_quirk(execute):
    # skiz on 0 with no next instruction: pops first, then fails (spec §4)
    r = execute("push 7 push 0 skiz", ZEROS)
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 2, 2)
    assert r.stack == [0] * 16 + [7]  # the 0 is gone
    # skiz on non-zero at the end: executes, then the next step overflows
    r = execute("push 7 push 1 skiz", ZEROS)
    assert (r.error.kind, r.error.ip, r.cycles) == ("InstructionPointerOverflow", 3, 3)


# --- jump stack --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["return", "recurse", "recurse_or_return"])
def test_jump_stack_is_empty(execute, name):
    check_failure(execute, "push 1", name, "JumpStackIsEmpty", detail=None)


def test_recurse_or_return_checks_jump_stack_first(execute):
    # st5 == st6 (both 0) and st5 != st6: both fail on the empty jump stack
    check_failure(execute, "", "recurse_or_return", "JumpStackIsEmpty")
    check_failure(
        execute,
        "push 1 push 0 push 0 push 0 push 0 push 0",
        "recurse_or_return",
        "JumpStackIsEmpty",
    )


# --- assertions ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 2, P - 1])
def test_assertion_failed(execute, value):
    r = check_failure(execute, f"push {value}", "assert", "AssertionFailed", detail=None)
    assert "error_id" not in str(r.error)


def test_assertion_failed_carries_error_id(execute):
    r = check_failure(execute, "push 0", "assert error_id 42", "AssertionFailed", detail=42)
    assert "error_id 42" in str(r.error)


@pytest.mark.parametrize("i", range(5))
def test_vector_assertion_failed_reports_first_mismatch(execute, i):
    words = [10, 11, 12, 13, 14]
    other = list(words)
    other[i] += 100
    if i < 4:
        other[4] += 100  # a later mismatch too: the first one is reported
    prefix = (
        " ".join(f"push {w}" for w in reversed(words))
        + " "
        + " ".join(f"push {w}" for w in reversed(other))
    )
    check_failure(execute, prefix, "assert_vector", "VectorAssertionFailed", detail=i)


def test_vector_assertion_error_id(execute):
    prefix = "push 1 push 1 push 1 push 1 push 1 push 1 push 1 push 1 push 1 push 2"
    r = check_failure(
        execute, prefix, "assert_vector error_id -3", "VectorAssertionFailed", detail=0
    )
    assert "error_id -3" in str(r.error)


# --- arithmetic ----------------------------------------------------------------------------


def test_invert_of_zero(execute):
    check_failure(execute, "push 0", "invert", "InverseOfZero", detail=None)


def test_x_invert_of_zero(execute):
    check_failure(execute, "push 0 push 0 push 0", "x_invert", "InverseOfZero")
    assert execute("push 1 push 0 push 0 x_invert halt", ZEROS).ok  # (0, 0, 1) is invertible


def test_division_by_zero(execute):
    check_failure(execute, "push 0 push 5", "div_mod", "DivisionByZero", detail=None)
    check_failure(execute, "push 0 push 0", "div_mod", "DivisionByZero")


def test_logarithm_of_zero(execute):
    check_failure(execute, "push 0", "log_2_floor", "LogarithmOfZero", detail=None)


# --- FailedU32Conversion (spec §5.7: st0 before st1) ---------------------------------------


@pytest.mark.parametrize("name", ["lt", "and", "xor", "div_mod"])
def test_u32_two_operands(execute, name):
    # st0 bad
    check_failure(execute, f"push 3 push {BIG}", name, "FailedU32Conversion", detail=BIG)
    # st1 bad
    check_failure(execute, f"push {P - 1} push 3", name, "FailedU32Conversion", detail=P - 1)
    # both bad: the error carries st0
    check_failure(
        execute, f"push {BIG + 1} push {P - 1}", name, "FailedU32Conversion", detail=P - 1
    )


@pytest.mark.parametrize("name", ["log_2_floor", "pop_count"])
def test_u32_st0(execute, name):
    check_failure(execute, f"push {BIG}", name, "FailedU32Conversion", detail=BIG)


def test_u32_check_before_zero_checks(execute):
    # non-u32 numerator with zero denominator: the u32 check comes first
    check_failure(execute, f"push 0 push {BIG}", "div_mod", "FailedU32Conversion", detail=BIG)
    check_failure(execute, f"push {BIG} push 0", "div_mod", "FailedU32Conversion", detail=BIG)


def test_pow_exponent_must_be_u32(execute):
    check_failure(execute, f"push {BIG} push 2", "pow", "FailedU32Conversion", detail=BIG)
    r = execute(f"push 2 push {P - 1} pow halt", ZEROS)  # any base is fine
    assert r.ok and r.stack[-1] == 1


def test_split_has_no_precondition(execute):
    assert execute("push -1 split halt", ZEROS).ok


def _merkle_prefix(index, extra=""):
    """Prefix leaving ``index`` at st5 above the zero stack (and ``extra`` pushed first)."""
    return f"{extra} push {index} push 0 push 0 push 0 push 0 push 0"


def test_merkle_step_index_must_be_u32(execute):
    digests = VmInput(secret_digests=[(1, 2, 3, 4, 5)], initial_stack=[0] * 16)
    check_failure(
        execute, _merkle_prefix(BIG), "merkle_step", "FailedU32Conversion", digests, detail=BIG
    )
    # checked before the digest queue: no digest left and st5 non-u32
    check_failure(execute, _merkle_prefix(BIG), "merkle_step", "FailedU32Conversion", detail=BIG)


def test_merkle_step_empty_secret_digest_input(execute):
    check_failure(execute, _merkle_prefix(4), "merkle_step", "EmptySecretDigestInput", detail=None)
    digests = VmInput(secret_digests=[(1, 2, 3, 4, 5)], initial_stack=[0] * 16)
    r = execute(_merkle_prefix(4) + " merkle_step merkle_step halt", digests)
    assert r.error.kind == "EmptySecretDigestInput" and r.secret_digests_consumed == 1


def test_merkle_step_mem_index_must_be_u32(execute):
    check_failure(
        execute,
        _merkle_prefix(P - 1, "push 7 push 0"),
        "merkle_step_mem",
        "FailedU32Conversion",
        detail=P - 1,
    )


# --- sponge --------------------------------------------------------------------------------


def test_sponge_not_initialized(execute):
    check_failure(execute, "push 0 " * 10, "sponge_absorb", "SpongeNotInitialized", detail=None)
    check_failure(execute, "push 0", "sponge_absorb_mem", "SpongeNotInitialized")
    check_failure(execute, "", "sponge_squeeze", "SpongeNotInitialized")


# --- input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_empty_public_input(execute, n):
    vm_input = VmInput(public_input=[1] * (n - 1), initial_stack=[0] * 16)
    r = check_failure(execute, "", f"read_io {n}", "EmptyPublicInput", vm_input, detail=None)
    assert r.public_input_consumed == 0  # nothing is consumed


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_empty_secret_input(execute, n):
    vm_input = VmInput(secret_input=[1] * (n - 1), initial_stack=[0] * 16)
    r = check_failure(execute, "", f"divine {n}", "EmptySecretInput", vm_input, detail=None)
    assert r.secret_input_consumed == 0


def test_input_exhausted_after_partial_use(execute):
    vm_input = VmInput(public_input=[1, 2, 3], initial_stack=[0] * 16)
    r = check_failure(execute, "read_io 2", "read_io 2", "EmptyPublicInput", vm_input)
    assert r.public_input_consumed == 2


# --- step limit (ours) -------------------------------------------------------------------------


def test_step_limit_exceeded(execute):
    r = execute("push 0 call l halt l: recurse", ZEROS, step_limit=100)
    assert (r.error.kind, r.cycles, r.error.detail) == ("StepLimitExceeded", 100, 100)
    assert r.error.ip == 3  # the recurse that would be step 101


def test_step_limit_is_exact(execute):
    assert execute("nop nop nop halt", ZEROS, step_limit=4).ok
    r = execute("nop nop nop halt", ZEROS, step_limit=3)
    assert (r.error.kind, r.error.ip, r.cycles) == ("StepLimitExceeded", 3, 3)
    r = execute("push 1 push 2 add", ZEROS, step_limit=0)
    assert (r.error.kind, r.error.ip, r.cycles) == ("StepLimitExceeded", 0, 0)


def test_step_limit_inside_a_hot_loop(execute):
    text = "push 1000 call l halt l: dup 0 push 0 eq skiz return push -1 add recurse"
    full = execute(text, ZEROS)
    assert full.ok
    for limit in (full.cycles - 1, 777, 778, 779, 780):
        r = execute(text, ZEROS, step_limit=limit)
        assert r.error.kind == "StepLimitExceeded" and r.cycles == limit
    assert execute(text, ZEROS, step_limit=full.cycles).ok


# --- coverage of the instruction table's failure lists -----------------------------------

#: (instruction, failure kind) -> the test above that exercises it.
FAILURE_TESTS = {
    ("skiz", "InstructionPointerOverflow"): test_skiz_end_of_program_quirk,
    ("divine", "EmptySecretInput"): test_empty_secret_input,
    ("assert", "AssertionFailed"): test_assertion_failed,
    ("log_2_floor", "FailedU32Conversion"): test_u32_st0,
    ("log_2_floor", "LogarithmOfZero"): test_logarithm_of_zero,
    ("lt", "FailedU32Conversion"): test_u32_two_operands,
    ("and", "FailedU32Conversion"): test_u32_two_operands,
    ("xor", "FailedU32Conversion"): test_u32_two_operands,
    ("div_mod", "FailedU32Conversion"): test_u32_two_operands,
    ("div_mod", "DivisionByZero"): test_division_by_zero,
    ("return", "JumpStackIsEmpty"): test_jump_stack_is_empty,
    ("recurse", "JumpStackIsEmpty"): test_jump_stack_is_empty,
    ("recurse_or_return", "JumpStackIsEmpty"): test_jump_stack_is_empty,
    ("assert_vector", "VectorAssertionFailed"): test_vector_assertion_failed_reports_first_mismatch,
    ("pop_count", "FailedU32Conversion"): test_u32_st0,
    ("pow", "FailedU32Conversion"): test_pow_exponent_must_be_u32,
    ("sponge_absorb", "SpongeNotInitialized"): test_sponge_not_initialized,
    ("sponge_absorb_mem", "SpongeNotInitialized"): test_sponge_not_initialized,
    ("sponge_squeeze", "SpongeNotInitialized"): test_sponge_not_initialized,
    ("merkle_step", "FailedU32Conversion"): test_merkle_step_index_must_be_u32,
    ("merkle_step", "EmptySecretDigestInput"): test_merkle_step_empty_secret_digest_input,
    ("merkle_step_mem", "FailedU32Conversion"): test_merkle_step_mem_index_must_be_u32,
    ("invert", "InverseOfZero"): test_invert_of_zero,
    ("x_invert", "InverseOfZero"): test_x_invert_of_zero,
    ("read_io", "EmptyPublicInput"): test_empty_public_input,
}

_KIND = re.compile(r"[A-Za-z0-9]+")


def test_every_listed_failure_has_a_test():
    """Every ``failures`` entry of every instruction (both variants) maps to a test above;
    TooShallow entries are covered by `test_too_shallow` for all shrinking instructions."""
    listed = set()
    for variant in ("release", "head"):
        for ins in instruction_set(variant):
            for text in ins.failures:
                kind = _KIND.match(text).group(0)
                listed.add((ins.name, kind))
                if kind == "TooShallow":
                    assert ins.name in SPEC_SHRINKING
                else:
                    assert (ins.name, kind) in FAILURE_TESTS, (ins.name, kind)
    assert set(FAILURE_TESTS) <= listed
