"""One test per instruction: semantics, including the spec's worked examples (Triton VM spec §5).

Every program runs in both execution tiers (see ``conftest.execute_both``). Stacks are
written bottom..top, so ``r.stack[-1]`` is st0.
"""

import pytest

from tasmopt.isa import P
from tasmopt.tasm import parse
from tasmopt.vm import VmInput, initial_stack, tip5
from tasmopt.vm import xfield as X

ZEROS = VmInput(initial_stack=[0] * 16)


def top(result, n):
    """st0..st(n-1) of the final stack."""
    return result.stack[::-1][:n]


def xfe_push(a):
    """TASM that puts the XFE ``a`` on the stack (c0 on top, spec §2)."""
    return f"push {a[2]} push {a[1]} push {a[0]}"


# --- control flow ---------------------------------------------------------------------------


def test_halt(execute):
    r = execute("halt")
    assert r.ok and r.cycles == 1
    assert r.stack == initial_stack(parse("halt"))
    r = execute("halt push 1 halt")  # nothing after halt runs
    assert r.cycles == 1 and len(r.stack) == 16


def test_nop(execute):
    r = execute("nop nop halt", ZEROS)
    assert r.ok and r.cycles == 3 and r.stack == [0] * 16


def test_skiz_nonzero_executes_next(execute):
    r = execute("push 7 skiz push 1 halt", ZEROS)
    assert r.stack[-1] == 1 and r.cycles == 4


def test_skiz_zero_skips_one_word_instruction(execute):
    r = execute("push 5 push 0 skiz pop 1 halt", ZEROS)
    assert r.stack[-1] == 5 and r.cycles == 4


def test_skiz_zero_skips_two_word_instruction(execute):
    r = execute("push 0 skiz push 9 push 3 halt", ZEROS)
    assert r.stack[-1] == 3 and len(r.stack) == 17 and r.cycles == 4
    r = execute("push 0 skiz call f halt f: push 1 return")  # spec §11: skiz call f
    assert r.ok and r.cycles == 3 and r.jump_stack == []


def test_call_and_return(execute):
    r = execute("call f push 2 halt f: push 1 return", ZEROS)
    assert r.ok and top(r, 2) == [2, 1] and r.cycles == 5
    assert r.jump_stack == []
    r = execute("call f halt f: halt", ZEROS)  # halt with a non-empty jump stack is fine
    assert r.ok and r.jump_stack == [(1, 2)]  # (index after the call, destination)


def test_recurse_counted_loop(execute):
    # countdown from 3: the classic `skiz return ... recurse` loop
    text = """
        push 3 call loop halt
        loop: dup 0 push 0 eq skiz return push -1 add recurse
    """
    r = execute(text, ZEROS)
    assert r.ok and r.stack[-1] == 0
    # push, call, halt + 3 full iterations (7 instructions) + the last check ending in return
    assert r.cycles == 3 + 3 * 7 + 5


def test_recurse_keeps_jump_stack(execute):
    r = execute("push 2 call f halt f: push -1 add dup 0 skiz recurse return", ZEROS)
    assert r.ok and r.stack[-1] == 0 and r.jump_stack == []


def test_recurse_or_return_loop(execute):
    # st6 = terminator 3, st5 = counter 0; loop body increments the counter in st5.
    text = """
        push 3 push 0 push 0 push 0 push 0 push 0 push 0
        call loop halt
        loop: pick 5 addi 1 place 5 recurse_or_return
    """
    r = execute(text, ZEROS)
    assert r.ok
    assert top(r, 7) == [0, 0, 0, 0, 0, 3, 3]
    assert r.cycles == 7 + 1 + 3 * 4 + 1


def test_recurse_or_return_returns_when_st5_equals_st6(execute):
    r = execute(
        "push 4 push 4 push 0 push 0 push 0 push 0 push 0 call f halt f: recurse_or_return", ZEROS
    )
    assert r.ok and r.cycles == 10 and r.jump_stack == []


def test_assert(execute):
    r = execute("push 1 assert halt", ZEROS)
    assert r.ok and r.stack == [0] * 16
    r = execute("push 1 assert error_id 7 halt", ZEROS)
    assert r.ok


# --- stack manipulation --------------------------------------------------------------------


def test_push_literals(execute):
    r = execute("push -1 push 00457 push 18446744069414584320 push +3 halt", ZEROS)
    assert top(r, 4) == [3, P - 1, 457, P - 1]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_pop(execute, n):
    r = execute("push 1 push 2 push 3 push 4 push 5 " + f"pop {n} halt", ZEROS)
    assert r.stack == [0] * 16 + [1, 2, 3, 4, 5][: 5 - n]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_divine(execute, n):
    r = execute(
        f"divine {n} halt", VmInput(secret_input=[10, 11, 12, 13, 14, 15], initial_stack=[0] * 16)
    )
    assert r.ok and r.secret_input_consumed == n
    assert r.stack[16:] == [10, 11, 12, 13, 14][:n]  # the last token taken is st0


@pytest.mark.parametrize("i", range(16))
def test_dup(execute, i):
    stack = list(range(100, 116))  # st_i = 115 - i
    r = execute(f"dup {i} halt", VmInput(initial_stack=stack))
    assert r.stack == stack + [115 - i]


@pytest.mark.parametrize("i", range(16))
def test_swap(execute, i):
    stack = list(range(100, 116))
    r = execute(f"swap {i} halt", VmInput(initial_stack=stack))
    expected = list(stack)
    expected[-1], expected[-1 - i] = expected[-1 - i], expected[-1]
    assert r.stack == expected


def test_pick_spec_example(execute):
    # _ d c x b a  -> pick 2 ->  _ d c b a x
    d, c, x, b, a = 4, 3, 99, 2, 1
    r = execute(f"push {d} push {c} push {x} push {b} push {a} pick 2 halt", ZEROS)
    assert r.stack[-5:] == [d, c, b, a, x]


def test_place_spec_example(execute):
    # _ d c b a x  -> place 2 ->  _ d c x b a
    d, c, b, a, x = 4, 3, 2, 1, 99
    r = execute(f"push {d} push {c} push {b} push {a} push {x} place 2 halt", ZEROS)
    assert r.stack[-5:] == [d, c, x, b, a]


@pytest.mark.parametrize("i", range(16))
def test_pick_place_are_inverse(execute, i):
    stack = list(range(100, 116))
    r = execute(f"pick {i} halt", VmInput(initial_stack=stack))
    assert r.stack[-1] == 115 - i and sorted(r.stack) == stack
    r = execute(f"pick {i} place {i} halt", VmInput(initial_stack=stack))
    assert r.stack == stack
    r = execute(f"place {i} halt", VmInput(initial_stack=stack))
    assert r.stack[::-1][i] == 115 and sorted(r.stack) == stack


# --- memory (spec §5.4, §12.6) ---------------------------------------------------------------


def test_write_mem_spec_example(execute):
    r = execute("push 5 push 6 push 7 push 8 push 9 push 42 write_mem 5 halt", ZEROS)
    assert r.ram == {42: 9, 43: 8, 44: 7, 45: 6, 46: 5}
    assert r.stack == [0] * 16 + [47]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_write_mem_n(execute, n):
    r = execute("push 5 push 4 push 3 push 2 push 1 push 100 " + f"write_mem {n} halt", ZEROS)
    assert r.ram == {100 + k: k + 1 for k in range(n)}
    assert r.stack[-1] == 100 + n and len(r.stack) == 16 + 5 - n + 1


def test_read_mem_spec_example(execute):
    # spec §12.6: RAM 0=5, 1=6, 2=7 and input 8, 9 leave `_ 8 9 7 6 5 -1`
    r = execute(
        "read_io 2 push 3 write_mem 2 pop 1 push 4 read_mem 5 halt",
        VmInput(public_input=[8, 9], ram={0: 5, 1: 6, 2: 7}, initial_stack=[0] * 16),
    )
    assert r.stack[-6:] == [8, 9, 7, 6, 5, P - 1]
    assert r.ram == {0: 5, 1: 6, 2: 7, 3: 9, 4: 8}


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_read_mem_n(execute, n):
    ram = {10 - k: 100 + k for k in range(5)}  # RAM[10] = 100, RAM[9] = 101, ...
    r = execute(f"push 10 read_mem {n} halt", VmInput(ram=ram, initial_stack=[0] * 16))
    # st0 = p - n, st1 = RAM[p - n + 1], ..., st_n = RAM[p]
    assert top(r, n + 1) == [10 - n] + [ram[10 - n + 1 + j] for j in range(n)]


def test_read_mem_uninitialised_is_zero_and_pointer_wraps(execute):
    r = execute("push 0 read_mem 1 halt", ZEROS)
    assert top(r, 2) == [P - 1, 0]  # spec §1: read_mem 1 at address 0 leaves p - 1
    r = execute("push 7 push -1 write_mem 2 halt", VmInput(initial_stack=[0] * 16))
    assert r.ram == {P - 1: 7, 0: 0} and r.stack[-1] == 1


# --- hashing (spec §5.5) ---------------------------------------------------------------------


def test_hash_of_ten_zeros(execute):
    # hash needs 21 words (delta -5); st5..st9 are initial-stack zeros
    r = execute("push 0 push 0 push 0 push 0 push 0 hash halt")
    assert r.ok and r.stack[-1] == 0x0D0F6400210565CD
    assert top(r, 5) == tip5.hash_10([0] * 10)
    assert len(r.stack) == 16


def test_hash_spec_example(execute):
    r = execute("push 0 push 0 push 0 push 1 push 2 push 3 hash halt")
    assert top(r, 5) == tip5.hash_10([3, 2, 1, 0, 0, 0, 0, 0, 0, 0])
    assert r.sponge is None


def test_hash_word_order(execute):
    stack = [0] * 11 + list(range(10, 0, -1))  # st0 = 1, ..., st9 = 10
    r = execute("hash halt", VmInput(initial_stack=stack))
    assert r.stack == [0] * 11 + tip5.hash_10(list(range(1, 11)))[::-1]


def test_assert_vector(execute):
    r = execute(
        "push 5 push 4 push 3 push 2 push 1 dup 4 dup 4 dup 4 dup 4 dup 4 assert_vector halt", ZEROS
    )
    assert r.ok and r.stack == [0] * 16 + [5, 4, 3, 2, 1]


def test_sponge_init(execute):
    r = execute("sponge_init halt")
    assert r.sponge == (0,) * 16


def test_sponge_absorb(execute):
    stack = [0] * 16 + list(range(10, 0, -1))  # st0 = 1 .. st9 = 10; delta -10 needs 26
    r = execute("sponge_init sponge_absorb halt", VmInput(initial_stack=stack))
    sp = tip5.Sponge()
    sp.absorb(list(range(1, 11)))  # x0 = st0
    assert r.sponge == tuple(sp.state) and r.stack == [0] * 16


def test_sponge_absorb_overwrites_rate(execute):
    stack = [0] * 16 + list(range(10, 0, -1))
    r = execute(
        "sponge_init sponge_absorb dup 0 dup 0 dup 0 dup 0 dup 0 dup 0 dup 0 dup 0 "
        "dup 0 dup 0 sponge_absorb halt",
        VmInput(initial_stack=stack),
    )
    sp = tip5.Sponge()
    sp.absorb(list(range(1, 11)))
    sp.absorb([0] * 10)  # overwrite, not add
    assert r.sponge == tuple(sp.state)


def test_sponge_absorb_mem_stack_picture(execute):
    ram = {100 + k: 50 + k for k in range(10)}
    stack = [0] * 11 + [11, 12, 13, 14, 100]  # st0 = p = 100, st1..st4 = 14..11
    r = execute("sponge_init sponge_absorb_mem halt", VmInput(ram=ram, initial_stack=stack))
    sp = tip5.Sponge()
    sp.absorb([50 + k for k in range(10)])
    assert r.sponge == tuple(sp.state)
    # st0 = p + 10, st1..st4 = v0..v3 (overwritten), st5 and deeper unchanged
    assert top(r, 5) == [110, 50, 51, 52, 53]
    assert r.stack[:11] == [0] * 11


def test_sponge_squeeze(execute):
    r = execute("sponge_init sponge_squeeze sponge_squeeze halt", ZEROS)
    s0 = [0] * 16
    s1 = tip5.permutation(s0)
    assert top(r, 10) == s1[:10]  # second squeeze: st0 = state[0]
    assert top(r, 20)[10:] == s0[:10]
    assert r.sponge == tuple(tip5.permutation(s1))
    sp = tip5.Sponge()
    assert sp.squeeze() == s0[:10] and sp.squeeze() == s1[:10]


def _merkle_stack(index, digest, extra=()):
    """Bottom..top stack: padding, extra words (st7, st6 ...), index at st5, digest d0 on top."""
    pad = [0] * (16 - 6 - len(extra))
    return pad + list(extra) + [index] + list(reversed(digest))


@pytest.mark.parametrize("index", [6, 7, 2**32 - 1])
def test_merkle_step(execute, index):
    cur = [1, 2, 3, 4, 5]
    sib = (11, 12, 13, 14, 15)
    r = execute(
        "merkle_step halt", VmInput(secret_digests=[sib], initial_stack=_merkle_stack(index, cur))
    )
    left, right = (cur, list(sib)) if index % 2 == 0 else (list(sib), cur)
    assert top(r, 6) == tip5.hash_pair(left, right) + [index // 2]
    assert r.secret_digests_consumed == 1 and len(r.stack) == 16


def test_merkle_step_mem_stack_picture(execute):
    # _ p f i [c; 5] -> _ (p+5) f (i div 2) [h; 5]
    cur = [1, 2, 3, 4, 5]
    ram = {200 + k: 20 + k for k in range(5)}
    for index in (4, 5):
        stack = _merkle_stack(index, cur, extra=(200, 77))
        r = execute("merkle_step_mem halt", VmInput(ram=ram, initial_stack=stack))
        sib = [20, 21, 22, 23, 24]
        left, right = (cur, sib) if index % 2 == 0 else (sib, cur)
        assert top(r, 8) == tip5.hash_pair(left, right) + [index // 2, 77, 205]
        assert r.ram == ram


def test_merkle_step_walks_to_root(execute):
    leaf = [9, 8, 7, 6, 5]
    sibs = [(1, 1, 1, 1, 1), (2, 2, 2, 2, 2)]
    r = execute(
        "merkle_step merkle_step halt",
        VmInput(secret_digests=sibs, initial_stack=_merkle_stack(6, leaf)),
    )
    h1 = tip5.hash_pair(leaf, list(sibs[0]))  # 6 is even: current node is the left child
    h2 = tip5.hash_pair(list(sibs[1]), h1)  # 3 is odd
    assert top(r, 6) == h2 + [1]


# --- base-field arithmetic (spec §5.6) -----------------------------------------------------


def test_add(execute):
    r = execute("push -1 push 5 add push 3 push 4 add halt", ZEROS)
    assert top(r, 2) == [7, 4]


def test_addi(execute):
    r = execute("push 5 addi -7 push 1 addi 18446744069414584320 halt", ZEROS)
    assert top(r, 2) == [0, P - 2]


def test_mul(execute):
    r = execute("push -1 push -1 mul push 6 push 7 mul halt", ZEROS)
    assert top(r, 2) == [42, 1]


def test_eq(execute):
    r = execute("push 3 push 3 eq push 3 push 4 eq push -1 push -1 eq halt", ZEROS)
    assert top(r, 3) == [1, 0, 1]


def test_invert(execute):
    r = execute("push 2 invert halt", ZEROS)
    assert r.stack[-1] == (P + 1) // 2
    r = execute("push -1 invert halt", ZEROS)
    assert r.stack[-1] == P - 1


# --- u32 instructions (spec §5.7) ----------------------------------------------------------


def test_split_of_minus_one(execute):
    r = execute("push -1 split halt", ZEROS)
    assert top(r, 2) == [0, 4294967295]  # st0 = lo, st1 = hi


def test_split(execute):
    r = execute("push 12884901890 split halt", ZEROS)  # 3 * 2^32 + 2
    assert top(r, 2) == [2, 3]


def test_lt(execute):
    r = execute("push 5 push 2 lt push 2 push 5 lt push 4 push 4 lt halt", ZEROS)
    assert top(r, 3) == [0, 0, 1]  # 2 < 5 is st0 < st1 -> 1


def test_and(execute):
    r = execute("push 26 push 24 and push 4294967295 push 12345 and halt", ZEROS)
    assert top(r, 2) == [12345, 24]


def test_xor(execute):
    r = execute("push 26 push 24 xor push 4294967295 push 1 xor halt", ZEROS)
    assert top(r, 2) == [4294967294, 2]


def test_log_2_floor(execute):
    r = execute("push 38 log_2_floor push 1 log_2_floor push 4294967295 log_2_floor halt", ZEROS)
    assert top(r, 3) == [31, 0, 5]


def test_pow(execute):
    r = execute("push 5 push 2 pow halt", ZEROS)  # base st0 = 2, exponent st1 = 5
    assert r.stack[-1] == 32
    r = execute("push 0 push 0 pow push 4294967295 push -1 pow push 3 push -1 pow halt", ZEROS)
    assert top(r, 3) == [P - 1, P - 1, 1]  # (-1)^odd, (-1)^(2^32-1), 0^0


def test_div_mod_idiom(execute):
    r = execute("push 3 push 14 div_mod halt", ZEROS)  # push d push n div_mod
    assert top(r, 2) == [2, 4]  # st0 = r, st1 = q
    r = execute("push 4294967295 push 4294967295 div_mod push 7 push 0 div_mod halt", ZEROS)
    assert top(r, 4) == [0, 0, 0, 1]


def test_pop_count(execute):
    r = execute("push 0 pop_count push 4294967295 pop_count push 38 pop_count halt", ZEROS)
    assert top(r, 3) == [3, 32, 0]


# --- extension field (spec §5.8) -----------------------------------------------------------

A3 = (13, 2, 3)
B3 = (19, 0, 5)


def test_xx_add(execute):
    r = execute(f"{xfe_push(B3)} {xfe_push(A3)} xx_add halt", ZEROS)
    assert top(r, 3) == list(X.add(A3, B3)) and len(r.stack) == 19


def test_xx_mul(execute):
    r = execute(f"{xfe_push(B3)} {xfe_push(A3)} xx_mul halt", ZEROS)
    assert top(r, 3) == [237, 33, 137] and len(r.stack) == 19


def test_x_invert(execute):
    r = execute(f"{xfe_push(A3)} x_invert halt", ZEROS)
    assert top(r, 3) == list(X.inv(A3))
    r = execute(f"{xfe_push(A3)} x_invert {xfe_push(A3)} xx_mul halt", ZEROS)
    assert top(r, 3) == [1, 0, 0]


def test_xb_mul(execute):
    r = execute(f"{xfe_push(A3)} push 3 xb_mul halt", ZEROS)
    assert top(r, 3) == [39, 6, 9] and len(r.stack) == 19


def test_xfe_write_io_order(execute):
    r = execute(f"{xfe_push(B3)} {xfe_push(A3)} xx_mul write_io 3 halt", ZEROS)
    assert r.public_output == [237, 33, 137]  # c0, c1, c2


# --- input/output (spec §5.9) ----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_read_io(execute, n):
    r = execute(
        f"read_io {n} halt", VmInput(public_input=[1, 2, 3, 4, 5, 6], initial_stack=[0] * 16)
    )
    assert r.stack[16:] == [1, 2, 3, 4, 5][:n] and r.public_input_consumed == n


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_write_io(execute, n):
    r = execute("push 5 push 4 push 3 push 2 push 1 " + f"write_io {n} halt", ZEROS)
    assert r.public_output == [1, 2, 3, 4, 5][:n]  # old st0 first
    assert len(r.stack) == 21 - n


def test_read_io_digest_is_reversed_on_input(execute):
    d = [10, 11, 12, 13, 14]
    r = execute("read_io 5 halt", VmInput(public_input=d[::-1], initial_stack=[0] * 16))
    assert top(r, 5) == d  # d0 at st0


# --- many-in-one (spec §5.10): both ISA variants at opcodes 80 / 88 -----------------------


def _acc_stack(x, acc, st5, st6=0, st4_to_st3=(0, 0)):
    """Bottom..top: pad, acc (c2 c1 c0 at st9..st7), st6, st5, st4, st3, x (c2 c1 c0)."""
    return [0] * 6 + [acc[2], acc[1], acc[0], st6, st5, *st4_to_st3, x[2], x[1], x[0]]


def test_b_horner_step_head(execute):
    x, acc = (2, 3, 4), (5, 6, 7)
    ram = {50: 9}
    r = execute(
        "b_horner_step halt", VmInput(ram=ram, initial_stack=_acc_stack(x, acc, 50)), isa="head"
    )
    expected = X.add(X.mul(acc, x), (9, 0, 0))
    assert top(r, 10) == [2, 3, 4, 0, 0, 49, 0, *expected]
    assert r.ram == ram


def test_b_horner_step_evaluates_polynomial(execute):
    # f(x) = 1 + 2x + 3x^2 at x = (5, 0, 0); coefficients stored leading term at the top
    ram = {0: 1, 1: 2, 2: 3}
    stack = _acc_stack((5, 0, 0), (0, 0, 0), 2)
    r = execute(
        "b_horner_step b_horner_step b_horner_step halt",
        VmInput(ram=ram, initial_stack=stack),
        isa="head",
    )
    assert top(r, 10)[7:] == [1 + 2 * 5 + 3 * 25, 0, 0]
    assert r.stack[-6] == P - 1


def test_x_horner_step_head(execute):
    x, acc = (2, 3, 4), (5, 6, 7)
    ram = {48: 21, 49: 22, 50: 23}  # c = (RAM[p-2], RAM[p-1], RAM[p])
    r = execute(
        "x_horner_step halt", VmInput(ram=ram, initial_stack=_acc_stack(x, acc, 50)), isa="head"
    )
    expected = X.add(X.mul(acc, x), (21, 22, 23))
    assert top(r, 10) == [2, 3, 4, 0, 0, 47, 0, *expected]


def test_xx_dot_step_release(execute):
    a_ptr, b_ptr = 100, 200
    rr, ll, acc = (1, 2, 3), (4, 5, 6), (7, 8, 9)
    ram = {a_ptr + k: rr[k] for k in range(3)} | {b_ptr + k: ll[k] for k in range(3)}
    stack = [0] * 11 + [acc[2], acc[1], acc[0], b_ptr, a_ptr]
    r = execute("xx_dot_step halt", VmInput(ram=ram, initial_stack=stack))
    assert top(r, 5) == [a_ptr + 3, b_ptr + 3, *X.add(acc, X.mul(rr, ll))]


def test_xb_dot_step_release(execute):
    a_ptr, b_ptr = 100, 200
    ll, acc = (4, 5, 6), (7, 8, 9)
    ram = {a_ptr: 3} | {b_ptr + k: ll[k] for k in range(3)}
    stack = [0] * 11 + [acc[2], acc[1], acc[0], b_ptr, a_ptr]
    r = execute("xb_dot_step halt", VmInput(ram=ram, initial_stack=stack))
    assert top(r, 5) == [a_ptr + 1, b_ptr + 3, *X.add(acc, X.scalar_mul(3, ll))]


def test_opcodes_80_88_depend_on_the_isa_variant():
    from tasmopt.errors import TasmSyntaxError

    assert parse("xx_dot_step xb_dot_step halt", "release").words() == [80, 88, 0]
    assert parse("b_horner_step x_horner_step halt", "head").words() == [80, 88, 0]
    with pytest.raises(TasmSyntaxError):
        parse("b_horner_step", "release")
    with pytest.raises(TasmSyntaxError):
        parse("xx_dot_step", "head")
