"""Tip5: every test vector of spec/tip5_constants.json (Triton VM spec §9)."""

import json
import random
from pathlib import Path

import pytest

from tasmopt.isa import P
from tasmopt.vm import tip5

VECTORS = tip5.constants()["test_vectors"]
R = 2**32 - 1
R_INV = pow(R, P - 2, P)


def hexdigest(words):
    return b"".join(w.to_bytes(8, "little") for w in words).hex()


def test_package_data_matches_spec_file():
    spec = Path(__file__).resolve().parents[2].parent / "shared" / "spec" / "tip5_constants.json"
    if not spec.exists():
        pytest.skip("spec directory not available")
    assert json.loads(spec.read_text()) == tip5.constants()


def test_lookup_table_rule():
    table = tip5.constants()["lookup_table"]
    assert table == [((i + 1) ** 3 - 1) % 257 for i in range(256)]
    assert sorted(table) == list(range(256))


def reference_permutation(state):
    """Tip5 written directly from spec §9, slow and plain."""
    c = tip5.constants()
    lut, col, rcs = c["lookup_table"], c["mds_matrix_first_column"], c["round_constants_flat"]
    s = list(state)
    for r in range(5):
        for i in range(4):
            m = s[i] * R % P
            b = bytes(lut[x] for x in m.to_bytes(8, "little"))
            s[i] = int.from_bytes(b, "little") * R_INV % P
        for i in range(4, 16):
            s[i] = pow(s[i], 7, P)
        s = [sum(col[(i - j) % 16] * s[j] for j in range(16)) % P for i in range(16)]
        s = [(x + rcs[16 * r + i]) % P for i, x in enumerate(s)]
    return s


def test_fast_permutation_equals_plain_spec_permutation():
    rng = random.Random(3)
    states = [[P - 1] * 16, [0] * 16, [2**64 - 2**32] * 16] + [
        [rng.randrange(P) for _ in range(16)] for _ in range(20)
    ]
    for s in states:
        assert tip5.permutation(s) == reference_permutation(s)


def test_permutation_1():
    v = VECTORS["permutation_1"]
    assert tip5.permutation(v["input_state"]) == v["output_state"]


def test_permutation_2_canonical_and_raw_montgomery():
    v = VECTORS["permutation_2"]
    assert [x * R_INV % P for x in v["input_state_raw_montgomery"]] == v["input_state"]
    out = tip5.permutation(v["input_state"])[:5]
    assert out == v["expected_first5"]
    assert [x * R % P for x in out] == v["expected_first5_raw_montgomery"]


def test_hash10_all_zero():
    v = VECTORS["hash10_all_zero"]
    assert tip5.hash_10(v["input"]) == v["digest"]
    assert v["digest"][0] == 0x0D0F6400210565CD


def test_hash_varlen_program_halt():
    v = VECTORS["hash_varlen_program_halt"]
    assert tip5.hash_varlen(v["input"]) == v["digest"]
    assert v["digest"] == [
        0x4338DE79520B3949,
        0xE6A2129B28850DC9,
        0xFD3CD0986A860450,
        0x69FDBA910CEBA7BC,
        0x7E5B118C9594C062,
    ]


def test_hash10_chain_snapshot():
    pre = [0] * 10
    for i in range(6):
        pre[i : i + 5] = tip5.hash_10(pre)
    assert hexdigest(tip5.hash_10(pre)) == VECTORS["hash10_chain_snapshot"]["expected_hex"]


def test_hash_varlen_sum_snapshot():
    acc = [0] * 5
    for i in range(20):
        acc = [(a + d) % P for a, d in zip(acc, tip5.hash_varlen(list(range(i))), strict=True)]
    assert hexdigest(acc) == VECTORS["hash_varlen_sum_snapshot"]["expected_hex"]


def test_hasher_hello_world():
    data = b"hello world"
    words = [
        int.from_bytes(data[i : i + 8].ljust(8, b"\0"), "little") % P
        for i in range(0, len(data), 8)
    ]
    sponge = tip5.Sponge()
    sponge.absorb(words + [0] * (10 - len(words)))
    assert sponge.state[0] == VECTORS["hasher_hello_world"]["expected_state0"]


def test_permutation_of_zero_state_trace():
    trace = tip5.permutation_trace([0] * 16)
    assert len(trace) == 6
    assert trace[0] == [0] * 16
    assert trace[1:] == VECTORS["permutation_of_zero_state_trace"]["states_after_each_round"]
    assert trace[-1] == tip5.permutation([0] * 16)


def test_permutation_with_lookups_are_montgomery_forms_of_trace_rows():
    rng = random.Random(5)
    s = [rng.randrange(P) for _ in range(16)]
    out, mont = tip5.permutation_with_lookups(s)
    trace = tip5.permutation_trace(s)
    assert out == trace[-1]
    assert mont == [x * R % P for row in trace[:5] for x in row[:4]]


def test_hash_pair_is_hash10_of_concatenation():
    a, b = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10]
    assert tip5.hash_pair(a, b) == tip5.hash_10(a + b)
    assert tip5.hash_10(a + b) == tip5.permutation(a + b + [1] * 6)[:5]


def test_sponge_squeeze_and_padding():
    assert tip5.pad_varlen([]) == [1] + [0] * 9
    assert tip5.pad_varlen(list(range(10))) == list(range(10)) + [1] + [0] * 9
    sp = tip5.Sponge()
    sp.absorb(list(range(10)))
    state = list(sp.state)
    assert sp.squeeze() == state[:10]
    assert sp.state == tip5.permutation(state)


def test_bad_state_length():
    with pytest.raises(ValueError):
        tip5.permutation([0] * 15)
    with pytest.raises(ValueError):
        tip5.hash_10([0] * 9)


def test_memoized_permutation_hands_out_fresh_lists():
    """The permutation is memoized: a caller that mutates its result (the VM's sponge state
    does) must not change what the next caller gets for the same state."""
    state = list(range(16))
    first = tip5.permutation(state)
    expect = list(first)
    first[0] ^= 1
    assert tip5.permutation(state) == expect == tip5._permute(state)
    out, lookups = tip5.permutation_with_lookups(state)
    out[1] += 1
    lookups.clear()
    again, lookups2 = tip5.permutation_with_lookups(state)
    assert again == expect and len(lookups2) == 20
