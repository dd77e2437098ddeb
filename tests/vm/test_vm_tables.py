"""Table heights (Triton VM spec §7): per-instruction rows, attestation, U32, Cascade, padding."""

import math

import pytest

from tasmopt.isa import instruction_set
from tasmopt.tasm import parse
from tasmopt.vm import TableHeights, VmInput, initial_stack, program_digest, run, tip5
from tasmopt.vm.tables import attestation, cascade_limbs_of_trace, u32_height, u32_rows

ZEROS = VmInput(initial_stack=[0] * 16)

# Spec §5.1, columns OS / RAM / Hash, written out independently of the instruction table.
# "n" means the argument.
SPEC_ROWS = {
    "halt": (0, 0, 0),
    "push": (1, 0, 0),
    "skiz": (1, 0, 0),
    "pop": ("n", 0, 0),
    "split": (1, 0, 0),
    "lt": (1, 0, 0),
    "nop": (0, 0, 0),
    "divine": ("n", 0, 0),
    "assert": (1, 0, 0),
    "write_mem": ("n", "n", 0),
    "log_2_floor": (0, 0, 0),
    "and": (1, 0, 0),
    "return": (0, 0, 0),
    "pick": (0, 0, 0),
    "hash": (5, 0, 6),
    "write_io": ("n", 0, 0),
    "div_mod": (0, 0, 0),
    "xor": (1, 0, 0),
    "recurse": (0, 0, 0),
    "place": (0, 0, 0),
    "assert_vector": (5, 0, 0),
    "pop_count": (0, 0, 0),
    "pow": (1, 0, 0),
    "recurse_or_return": (0, 0, 0),
    "dup": (1, 0, 0),
    "sponge_absorb": (10, 0, 6),
    "merkle_step": (0, 0, 6),
    "sponge_init": (0, 0, 1),
    "swap": (0, 0, 0),
    "add": (1, 0, 0),
    "merkle_step_mem": (0, 5, 6),
    "sponge_absorb_mem": (0, 10, 6),
    "call": (0, 0, 0),
    "mul": (1, 0, 0),
    "sponge_squeeze": (10, 0, 6),
    "read_mem": ("n", "n", 0),
    "eq": (1, 0, 0),
    "invert": (0, 0, 0),
    "addi": (0, 0, 0),
    "xx_add": (3, 0, 0),
    "x_invert": (0, 0, 0),
    "read_io": ("n", 0, 0),
    "xx_mul": (3, 0, 0),
    "b_horner_step": (0, 1, 0),
    "xb_mul": (1, 0, 0),
    "x_horner_step": (0, 3, 0),
    "xx_dot_step": (0, 6, 0),
    "xb_dot_step": (0, 4, 0),
}

# Setup after which one execution of the instruction succeeds (stack starts as 16 zeros).
SETUP = {
    "push": "",
    "split": "push 5",
    "lt": "push 1 push 2",
    "nop": "",
    "divine": "",
    "assert": "push 1",
    "write_mem": "push 1 push 1 push 1 push 1 push 1 push 100",
    "log_2_floor": "push 5",
    "and": "push 1 push 2",
    "pick": "",
    "place": "",
    "swap": "",
    "dup": "",
    "hash": "push 0 push 0 push 0 push 0 push 0",
    "write_io": "push 1 push 1 push 1 push 1 push 1",
    "div_mod": "push 3 push 7",
    "xor": "push 1 push 2",
    "assert_vector": "push 0 push 0 push 0 push 0 push 0",
    "pop_count": "push 5",
    "pow": "push 3 push 2",
    "sponge_absorb": "sponge_init " + "push 0 " * 10,
    "merkle_step": "",
    "sponge_init": "",
    "add": "push 1 push 2",
    "merkle_step_mem": "",
    "sponge_absorb_mem": "sponge_init push 0",
    "mul": "push 1 push 2",
    "sponge_squeeze": "sponge_init",
    "read_mem": "push 10",
    "eq": "push 1 push 2",
    "invert": "push 5",
    "addi": "",
    "xx_add": "push 1 push 2 push 3",
    "x_invert": "push 1",
    "read_io": "",
    "xx_mul": "push 1 push 2 push 3",
    "xb_mul": "push 1",
    "pop": "push 1 push 1 push 1 push 1 push 1",
    "b_horner_step": "",
    "x_horner_step": "",
    "xx_dot_step": "",
    "xb_dot_step": "",
}
CONTROL = {"halt", "skiz", "call", "return", "recurse", "recurse_or_return"}


def _cases():
    for variant in ("release", "head"):
        for ins in instruction_set(variant):
            if ins.name in CONTROL:
                continue
            if variant == "head" and ins.opcode not in (80, 88):
                continue  # the shared instructions are covered once, under "release"
            args = {"n_1_5": [1, 2, 3, 4, 5], "stack_index": [0, 1, 15], "field_element": [7]}.get(
                ins.arg_kind, [None]
            )
            for arg in args:
                yield pytest.param(variant, ins.name, arg, id=f"{variant}-{ins.name}-{arg}")


def _spec(value, arg):
    return arg if value == "n" else value


def _attestation_hash(program):
    return 6 * math.ceil((program.length_words + 1) / 10)


@pytest.mark.parametrize(("variant", "name", "arg"), list(_cases()))
def test_rows_of_one_execution(execute, variant, name, arg):
    """Heights with the instruction minus heights without it = spec §5.1 rows."""
    text_x = name if arg is None else f"{name} {arg}"
    setup = SETUP[name]
    vm_input = VmInput(
        initial_stack=[0] * 16,
        secret_input=[1] * 5,
        public_input=[1] * 5,
        secret_digests=[(1, 2, 3, 4, 5)],
    )
    with_x = execute(f"{setup} {text_x} halt", vm_input, isa=variant)
    without = execute(f"{setup} halt", vm_input, isa=variant)
    assert with_x.ok and without.ok, with_x.error
    p_with, p_without = parse(f"{setup} {text_x} halt", variant), parse(f"{setup} halt", variant)
    hw, hwo = with_x.heights, without.heights
    os_rows, ram_rows, hash_rows = (_spec(v, arg) for v in SPEC_ROWS[name])
    assert hw.processor - hwo.processor == 1
    assert hw.jump_stack - hwo.jump_stack == 1
    assert hw.op_stack - hwo.op_stack == os_rows
    assert hw.ram - hwo.ram == ram_rows
    assert (hw.hash - _attestation_hash(p_with)) - (
        hwo.hash - _attestation_hash(p_without)
    ) == hash_rows
    # the instruction table says the same, and op-stack rows are |delta|
    spec = instruction_set(variant)[name]
    rows = spec.table_rows(arg if spec.arg_kind == "n_1_5" else None)
    assert (rows["op_stack"], rows["ram"], rows["hash"]) == (os_rows, ram_rows, hash_rows)
    assert rows["op_stack"] == abs(spec.stack_delta(arg if spec.arg_kind == "n_1_5" else None))


def test_control_flow_rows(execute):
    r = execute("call f halt f: return", ZEROS)
    h = r.heights
    assert (h.processor, h.jump_stack, h.op_stack, h.ram) == (3, 3, 0, 0)
    r = execute("push 0 push 1 call f halt f: skiz recurse return", ZEROS)
    h = r.heights
    # push push call skiz recurse skiz return halt; op stack: 2 pushes + 2 skiz pops
    assert (h.processor, h.jump_stack, h.op_stack, h.ram) == (8, 8, 4, 0)
    r = execute(
        "push 0 push 0 push 0 push 0 push 0 push 0 push 0 call f halt f: recurse_or_return", ZEROS
    )
    assert (r.heights.processor, r.heights.op_stack) == (10, 7)


def test_halt_alone():
    h = run(parse("halt")).heights
    assert (h.program, h.processor, h.jump_stack, h.op_stack, h.ram, h.hash, h.u32) == (
        10,
        1,
        1,
        0,
        0,
        6,
        0,
    )
    assert h.lookup == 256 and h.padded_height == 256


@pytest.mark.parametrize("length", [1, 2, 8, 9, 10, 11, 19, 20, 21])
def test_program_attestation_formula(length):
    program = parse("nop " * (length - 1) + "halt")
    assert program.length_words == length
    h = run(program).heights
    chunks = math.ceil((length + 1) / 10)
    assert h.program == 10 * chunks
    assert h.hash == 6 * chunks
    att = attestation(program)
    assert (att.program_rows, att.hash_rows) == (10 * chunks, 6 * chunks)


def test_two_word_instructions_count_twice_in_program_length():
    program = parse("push 1 push 2 push 3 push 4 pop 4 halt")  # 11 words
    assert program.length_words == 11
    assert run(program).heights.program == 20


def test_program_digest_on_initial_stack():
    program = parse("halt")
    digest = tip5.constants()["test_vectors"]["hash_varlen_program_halt"]["digest"]
    assert list(program_digest(program)) == digest
    stack = initial_stack(program)
    assert stack[::-1][11:16] == digest  # d0 at st11 ... d4 at st15
    assert stack[::-1][:11] == [0] * 11
    r = run(program)
    assert r.stack == stack
    assert run(parse("dup 11 halt")).stack[-1] != digest[0]  # another program, another digest
    p = parse("dup 15 dup 12 halt")  # st15 = d4; after that push d0 sits at st12
    assert run(p).stack[-2:] == [program_digest(p)[4], program_digest(p)[0]]


def test_op_stack_is_sum_of_abs_delta(execute):
    r = execute(
        "push 1 push 2 add dup 0 pop 2 read_io 3 write_io 2 swap 1 pick 1 halt",
        VmInput(public_input=[1, 2, 3]),
    )
    assert r.heights.op_stack == 1 + 1 + 1 + 1 + 2 + 3 + 2 + 0 + 0


def test_ram_counts_every_access(execute):
    r = execute("push 0 read_mem 5 pop 5 read_mem 1 push 1 write_mem 1 pop 1 halt", ZEROS)
    assert r.heights.ram == 5 + 1 + 1


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("push 26 push 24 and", 6),  # and(24, 26): 1 + bitlen(26)
        ("push 5 push 2 pow", 4),  # exponent 5: 1 + bitlen(5)
        ("push 5 push 4294967295 pow", 4),  # pow rows depend only on the exponent
        ("push 38 log_2_floor", 7),  # 1 + bitlen(38)
        ("push 27 push 31 lt", 6),  # lt(31, 27): 1 + bitlen(31)
        ("push 0 pop_count", 1),  # D = 0 adds one row
        ("push 4294967295 pop_count", 33),
        ("push -1 split", 33),  # (split, lo = 0, hi = 2^32 - 1)
    ],
)
def test_u32_spec_examples(execute, text, rows):
    r = execute(text + " halt", ZEROS)
    assert r.ok and r.heights.u32 == rows


def test_u32_key_rows_helper():
    assert u32_rows(("and", 24, 26)) == 6
    assert u32_rows(("pow", 2**40, 5)) == 4
    assert u32_rows(("log_2_floor", 38, 0)) == 7
    assert u32_rows(("lt", 31, 27)) == 6
    assert u32_height({("and", 24, 26), ("lt", 31, 27)}) == 12


def test_u32_keys_are_deduplicated_across_instructions(execute):
    once = execute("push 26 push 24 and halt", ZEROS).heights.u32
    assert once == 6
    # the same key twice, and xor with the same operands (recorded as `and`)
    r = execute("push 26 push 24 and push 26 push 24 and push 26 push 24 xor halt", ZEROS)
    assert r.heights.u32 == 6
    # operand order matters: (and, 26, 24) is another key
    r = execute("push 26 push 24 and push 24 push 26 and halt", ZEROS)
    assert r.heights.u32 == 12


def test_div_mod_records_lt_and_split(execute):
    # 14 = 4 * 3 + 2: keys (lt, r=2, d=3) and (split, n=14, q=4)
    r = execute("push 3 push 14 div_mod halt", ZEROS)
    assert r.heights.u32 == (1 + 2) + (1 + 4)
    # the lt key is shared with an `lt` of the same operands: push 3 push 2 lt -> (lt, 2, 3)
    r = execute("push 3 push 14 div_mod push 3 push 2 lt halt", ZEROS)
    assert r.heights.u32 == (1 + 2) + (1 + 4)


def test_merkle_step_records_split_key(execute):
    stack = [0] * 10 + [13] + [1, 2, 3, 4, 5]
    r = execute("merkle_step halt", VmInput(secret_digests=[(0, 0, 0, 0, 0)], initial_stack=stack))
    assert r.heights.u32 == 1 + 4  # (split, 13, 6): D = 13
    assert r.heights.hash == 6 + 6


def test_cascade_is_distinct_limbs_of_all_permutations(execute):
    text = "push 0 push 0 push 0 push 1 push 2 push 3 hash halt"
    r = execute(text)
    program = parse(text)
    limbs = set(attestation(program).limbs)
    assert r.heights.cascade > len(limbs)
    # the hash permutation's input: [3, 2, 1, 0, ...] with capacity ones
    limbs |= cascade_limbs_of_trace(tip5.permutation_trace([3, 2, 1] + [0] * 7 + [1] * 6))
    assert r.heights.cascade == len(limbs)


def test_cascade_attestation_matches_trace_limbs():
    program = parse("push 1 push 2 add halt")
    words = tip5.pad_varlen(program.words())
    state, limbs = [0] * 16, set()
    for i in range(0, len(words), 10):
        trace = tip5.permutation_trace(words[i : i + 10] + state[10:])
        limbs |= cascade_limbs_of_trace(trace)
        state = trace[-1]
    assert attestation(program).limbs == limbs
    assert list(attestation(program).digest) == tip5.hash_varlen(program.words())


def test_sponge_init_adds_one_hash_row_and_no_cascade(execute):
    a = execute("halt nop")
    b = execute("sponge_init halt")  # same program length
    assert b.heights.hash == a.heights.hash + 1
    assert b.heights.cascade == len(attestation(parse("sponge_init halt")).limbs)


def test_padded_height():
    h = TableHeights(
        program=10, processor=1, op_stack=0, ram=0, jump_stack=1, hash=6, u32=0, cascade=66
    )
    assert h.padded_height == 256 and h.log2_padded_height == 8
    assert h.as_dict()["lookup"] == 256
    h = TableHeights(
        program=10, processor=257, op_stack=0, ram=0, jump_stack=257, hash=6, u32=0, cascade=66
    )
    assert h.padded_height == 512 and h.max_table() == "processor"
    h = TableHeights(
        program=10, processor=512, op_stack=0, ram=0, jump_stack=512, hash=6, u32=0, cascade=66
    )
    assert h.padded_height == 512


def test_padded_height_from_a_run(execute):
    r = execute(
        "push 100 call loop halt loop: dup 0 push 0 eq skiz return push -1 add recurse", ZEROS
    )
    assert r.ok and 256 < r.cycles <= 2048
    assert r.heights.padded_height == 1 << (r.cycles - 1).bit_length()


def test_heights_on_error_cover_the_executed_prefix(execute):
    r = execute("push 1 push 2 hash", ZEROS)  # TooShallow at `hash`
    assert r.error.kind == "TooShallow"
    h = r.heights
    assert (h.processor, h.op_stack, h.hash) == (2, 2, 6)
    r = execute("push 0 read_mem 2 push 0 assert halt", ZEROS)
    assert r.error.kind == "AssertionFailed"
    assert (r.heights.processor, r.heights.ram, r.heights.op_stack) == (3, 2, 1 + 2 + 1)


def test_measure_false_has_no_heights():
    r = run(parse("push 1 halt"), measure=False)
    assert r.ok and r.heights is None and r.cycles == 2
