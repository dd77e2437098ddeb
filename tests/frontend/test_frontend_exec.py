"""Execution: programs compiled by the frontend, lowered, run in the simulator, their public
output compared with values computed here in plain Python. Covers the CF fixes of
spec/trident-language.md §8 (B1/B2, B5, B10, B12/B13, B16, B18, B19, B20, B23, B24)."""

from __future__ import annotations

import random

import pytest
from frontend_util import FIXTURES, LIB, P, call_fn, returns, run_ops, run_program

from tasmopt.frontend import ModuleTir, compile_modules, compile_source, link
from tasmopt.lower.triton import lower
from tasmopt.tasm.parser import parse
from tasmopt.vm import tip5
from tasmopt.vm.simulator import VmInput, run

U32 = 2**32


def prog(body: str, header: str = "", uses: str = "") -> str:
    return f"program t\n{uses}\n{header}\nfn main() {{\n{body}\n}}\n"


# -- arithmetic, u32, operand order (B19, B20) ----------------------------------------------


@pytest.mark.parametrize("a, b", [(3, 17), (17, 3), (0, 5), (U32 - 1, 2), (12345, 12345)])
def test_u32_operators_b19(a, b):
    out = run_program(
        prog("""
    let a = as_u32(pub_read())
    let b = as_u32(pub_read())
    if a < b { pub_write(1) } else { pub_write(0) }
    let (q, r) = a /% b
    pub_write(as_field(q))
    pub_write(as_field(r))
    pub_write(as_field(a & b))
    pub_write(as_field(a ^ b))
    pub_write(as_field(popcount(a)))
    """),
        [a, b + (b == 0)],
    )
    b = b + (b == 0)
    assert out == [int(a < b), a // b, a % b, a & b, a ^ b, bin(a).count("1")]


def test_pow_log2_operand_order_b19():
    out = run_program(
        prog("""
    let b = as_u32(pub_read())
    let e = as_u32(pub_read())
    pub_write(as_field(pow(b, e)))
    pub_write(as_field(log2(e)))
    """),
        [3, 20],
    )
    assert out == [3**20 % P, 4]


def test_field_arithmetic_and_intrinsics():
    a, b = random.Random(1).randrange(P), 987654321
    out = run_program(
        prog("""
    let a = pub_read()
    let b = pub_read()
    pub_write(a * b + a)
    pub_write(sub(a, b))
    pub_write(neg(a))
    pub_write(inv(b) * b)
    pub_write(field_add(a, b))
    pub_write(field_mul(a, 3))
    let (hi, lo) = split(a)
    pub_write(as_field(hi))
    pub_write(as_field(lo))
    if a == b { pub_write(1) } else { pub_write(2) }
    assert_eq(a, a)
    """),
        [a, b],
    )
    assert out == [
        (a * b + a) % P,
        (a - b) % P,
        (-a) % P,
        1,
        (a + b) % P,
        3 * a % P,
        a >> 32,
        a & (U32 - 1),
        2,
    ]


def test_as_u32_keeps_low_word_and_checks_b20():
    assert run_program(prog("pub_write(as_field(as_u32(pub_read())))"), [77]) == [77]
    ops = compile_source(prog("pub_write(as_field(as_u32(pub_read())))"))
    res = run_ops(ops, [U32 + 5])
    assert res.error is not None and res.error.kind == "AssertionFailed"


def test_io_wide_reads_writes_and_divine():
    out = run_program(
        prog("""
    let (a, b) = pub_read2()
    let d = pub_read5()
    let (x, y, z) = divine3()
    pub_write2(a, b)
    pub_write5(x, y, z, a, b)
    let (d0, d1, d2, d3, d4) = d
    pub_write(d0 + d4 * 10)
    """),
        [1, 2, 3, 4, 5, 6, 7],
        secret=[8, 9, 10],
    )
    # write_io n outputs st0 first: the last argument first (B28, kept)
    assert out == [2, 1, 2, 1, 10, 9, 8, 3 + 7 * 10]


# -- structs (B1, B2, B4, B5) ---------------------------------------------------------------

STRUCTS = """
struct Inner { a: Field, d: Digest }
struct Outer { x: U32, i: Inner, y: Field }
fn make(k: Field) -> Outer {
    let inner = Inner { a: k + 1, d: (k, k + 2, k + 3, k + 4, k + 5) }
    Outer { x: as_u32(7), i: inner, y: k * 2 }
}
fn score(o: Outer) -> Field {
    let (d0, d1, d2, d3, d4) = o.i.d
    as_field(o.x) + o.i.a * 100 + o.y * 10000 + d0 + d4 * 1000000
}
"""


def test_struct_params_returns_and_nested_fields_b1_b2():
    out = run_program(
        prog(
            """
    let o = make(pub_read())
    pub_write(score(o))
    let mut p = o
    p.i.a = 5
    p.y = p.y + 1
    pub_write(score(p))
    pub_write(o.i.a)
    """,
            STRUCTS,
        ),
        [3],
    )
    k = 3
    s1 = 7 + (k + 1) * 100 + 2 * k * 10000 + k + (k + 5) * 1000000
    s2 = 7 + 5 * 100 + (2 * k + 1) * 10000 + k + (k + 5) * 1000000
    assert out == [s1, s2, k + 1]


def test_cross_module_struct_and_return_widths_b5():
    out = run_program(
        prog(
            """
    let x = pub_read()
    let q = poly.Quad { a: 2, b: 3, c: 5 }
    let d = poly.derive(q)
    let after = x + 1
    pub_write(poly.eval(q, x))
    pub_write(poly.eval(d, x))
    pub_write(after)
    pub_write(poly.sub(x, 1))
    pub_write(poly.sum_to(x))
    """,
            uses="use std.math.poly",
        ),
        [10],
    )
    assert out == [2 * 100 + 3 * 10 + 5, 4 * 10 + 3, 11, 9, 55]


# -- if with value, branch locals (B10) -----------------------------------------------------

IFS = """
fn pick(c: Bool, a: Field, b: Field) -> Field {
    if c { let t = a + 1
    t * 2 } else { let u = b + 2
    let v = u * u
    v }
}
fn classify(x: Field) -> Field {
    if x == 0 { 100 } else if x == 1 { let k = x + 10
    k } else { x * 3 }
}
fn pair(c: Bool, d: Digest) -> Digest {
    if c { d } else { let e = d
    let (a, b, q, r, s) = e
    (s, r, q, b, a) }
}
"""


@pytest.mark.parametrize("c", [0, 1])
def test_if_with_value_and_branch_locals_b10(c):
    out = run_program(
        prog(
            """
    let c = pub_read() == 1
    pub_write(pick(c, 5, 7))
    pub_write(classify(0) + classify(1) * 1000 + classify(4) * 1000000)
    let d = pub_read5()
    let (a, b, q, r, s) = pair(c, d)
    pub_write5(a, b, q, r, s)
    let mut acc = 0
    if c { let z = 40
    acc = acc + z } else { acc = acc + 2 }
    pub_write(acc)
    """,
            IFS,
        ),
        [c, 11, 12, 13, 14, 15],
    )
    digest = [11, 12, 13, 14, 15]  # read_io 5: first read deepest
    written = list(reversed(digest)) if c else digest
    assert out == [12 if c else 81, 100 + 11 * 1000 + 12 * 1000000, *written, 40 if c else 2]


def test_match_values():
    src = """program t
fn sel(x: Field) -> Field {
    match x {
        0 => { 10 }
        1 => { let t = x + 19
               t }
        _ => { x * x }
    }
}
fn main() {
    let x = pub_read()
    pub_write(sel(x))
    match x { 0 => { pub_write(1) } _ => { pub_write(2) } }
}
"""
    assert [run_program(src, [v]) for v in (0, 1, 7)] == [[10, 1], [20, 2], [49, 2]]


# -- assignments (B12, B13) -----------------------------------------------------------------


def test_wide_and_tuple_assignments_b12_b13():
    out = run_program(
        prog("""
    let k = pub_read()
    let mut h = divine5()
    let mut n = 1
    h = divine5()
    let (a, b, c, d, e) = h
    pub_write5(a, b, c, d, e)
    let mut q = as_u32(0)
    let mut r = as_u32(0)
    (q, r) = as_u32(k) /% as_u32(7)
    pub_write(as_field(q) * 10 + as_field(r))
    let mut x = 1
    let mut dd = pub_read5()
    (n, dd, x) = (k, h, k + k)
    let (d0, d1, d2, d3, d4) = dd
    pub_write5(d0, d1, d2, d3, n + x)
    let mut t = split(k)
    t = split(k + 1)
    let (hi, lo) = t
    pub_write(as_field(lo))
    """),
        [100, 1, 2, 3, 4, 5],
        secret=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    )
    assert out == [10, 9, 8, 7, 6, 14 * 10 + 2, 300, 9, 8, 7, 6, 101]


# -- multi-width returns (B15, B16) ---------------------------------------------------------

RETURNS = """
fn swp(a: Field, b: Field) -> (Field, Field) { (b, a) }
fn rot3(a: Field, b: Field, c: Field, d: Field) -> (Field, Field, Field) { (c, d, a) }
fn dig(k: Field, j: Field, m: Field) -> Digest { (k, j, m, k + j, j + m) }
fn six(a: Field, b: Field, c: Field, d: Field) -> (Field, Field, Field, Field, Field, Field) {
    (d, c, b, a, a + b, c + d)
}
fn seven(x: Field) -> (Digest, Field, Field) {
    let u = x + 1
    let v = x + 2
    let w = x + 3
    ((x, u, v, w, x), u, v)
}
fn wide(x: Field) -> [Field; 17] {
    [x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9, x + 10, x + 11,
     x + 12, x + 13, x + 14, x + 15, x + 16]
}
"""


def test_multi_width_returns_b15_b16():
    out = run_program(
        prog(
            """
    let (a, b) = swp(1, 2)
    pub_write2(a, b)
    let (c, d, e) = rot3(1, 2, 3, 4)
    pub_write(c * 100 + d * 10 + e)
    let (d0, d1, d2, d3, d4) = dig(1, 2, 3)
    pub_write5(d0, d1, d2, d3, d4)
    let (s0, s1, s2, s3, s4, s5) = six(1, 2, 3, 4)
    pub_write(s0 + s1 * 10 + s2 * 100 + s3 * 1000 + s4 * 10000 + s5 * 100000)
    let (g, u, v) = seven(10)
    let (g0, g1, g2, g3, g4) = g
    pub_write5(g0, g1, g2, u, v)
    let w = wide(100)
    pub_write(w[0] + w[16] * 1000)
    """,
            RETURNS,
        )
    )
    assert out == [
        1,
        2,
        341,
        5,
        3,
        3,
        2,
        1,
        4 + 30 + 200 + 1000 + 30000 + 700000,
        12,
        11,
        12,
        11,
        10,
        100 + 116 * 1000,
    ]


# -- loops (B23) ----------------------------------------------------------------------------


def test_loops_with_variable_outer_variables_and_locals_b23():
    out = run_program(
        prog("""
    let n = pub_read()
    let a = pub_read()
    let mut s = 0
    for i in 0..n bounded 16 {
        let t = as_field(i) * a
        s = s + t
    }
    pub_write(s)
    let mut c = 0
    for i in 3..as_u32(n) bounded 16 {
        for j in 0..i bounded 16 { c = c + 1 }
    }
    pub_write(c)
    let mut f = 0
    for _ in 0..4 { f = f + n }
    pub_write(f)
    for i in 0..0 { pub_write(999) }
    let mut fa = 0
    let mut fb = 1
    for i in 0..n bounded 64 {
        let t = fa + fb
        fa = fb
        fb = t
    }
    pub_write(fa)
    """),
        [10, 7],
    )
    n, a = 10, 7
    fa, fb = 0, 1
    for _ in range(n):
        fa, fb = fb, fa + fb
    assert out == [sum(i * a for i in range(n)), sum(range(3, n)), 4 * n, fa]


def test_loop_with_digest_state_and_spills_b18_b23():
    # a Digest accumulator, a Digest input and loop state: > 16 live elements in the body
    out = run_program(
        prog("""
    let key = pub_read5()
    let n = pub_read()
    let mut acc = divine5()
    for i in 0..n bounded 8 {
        let (a0, a1, a2, a3, a4) = acc
        let (k0, k1, k2, k3, k4) = key
        acc = hash(a0, a1, a2, a3, a4, k0, k1, k2, k3, as_field(i))
    }
    let (r0, r1, r2, r3, r4) = acc
    pub_write5(r0, r1, r2, r3, r4)
    """),
        [1, 2, 3, 4, 5, 3],
        secret=[6, 7, 8, 9, 10],
    )
    key = [1, 2, 3, 4, 5]  # component order (deepest first)
    acc = [6, 7, 8, 9, 10]
    for i in range(3):
        words = acc + key[:4] + [i]  # arguments in order; the last is hash word 0
        h = tip5.hash_fixed(words[::-1])  # VM order: word 0 = st0 = last argument
        acc = h[::-1]  # component 0 is deepest = VM word 4
    assert out == acc[::-1]


def test_spills_in_branches_are_reconciled_b18():
    src = prog("""
    let a = pub_read5()
    let b = pub_read5()
    let c = pub_read5()
    let x = pub_read()
    if x == 1 {
        let (a0, a1, a2, a3, a4) = a
        let (b0, b1, b2, b3, b4) = b
        pub_write(a0 + b4 + x)
    } else {
        let (c0, c1, c2, c3, c4) = c
        pub_write(c2 * x)
    }
    let (a0, a1, a2, a3, a4) = a
    let (c0, c1, c2, c3, c4) = c
    pub_write(a4 + c0 + x)
    """)
    vals = list(range(1, 16))
    assert run_program(src, vals + [1]) == [1 + 10 + 1, 5 + 11 + 1]
    assert run_program(src, vals + [3]) == [13 * 3, 5 + 11 + 3]


def test_many_locals_spill_and_reload_b18():
    lets = "\n".join(f"    let v{i} = pub_read() * {i + 1}" for i in range(24))
    total = " + ".join(f"v{i}" for i in range(24))
    out = run_program(
        prog(f"{lets}\n    pub_write({total})\n    pub_write(v0 + v23)"), list(range(100, 124))
    )
    assert out == [sum((100 + i) * (i + 1) for i in range(24)), 100 + 123 * 24]


def test_function_with_more_than_16_parameter_elements():
    src = """
fn f(a: Digest, b: Digest, c: Digest, d: Digest, x: Field) -> Field {
    let (a0, a1, a2, a3, a4) = a
    let (d0, d1, d2, d3, d4) = d
    a0 + d4 + x
}
"""
    out = run_program(
        prog(
            """
    let a = pub_read5()
    let b = pub_read5()
    let c = pub_read5()
    let d = pub_read5()
    pub_write(f(a, b, c, d, 1000))
    """,
            src,
        ),
        list(range(1, 21)),
    )
    assert out == [1 + 20 + 1000]


# -- RAM, hashing, sponge, merkle, events (B24, B28) ----------------------------------------


def test_ram_intrinsics_round_trip_b24():
    res = call_fn(
        """
fn f(p: Field, v: Field, d: Digest) -> Field {
    ram_write(p, v)
    ram_write_block(p + 10, d)
    let back = ram_read_block(p + 10)
    let (b0, b1, b2, b3, b4) = back
    ram_read(p) + b0 * 1000 + b4 * 1000000
}
""",
        "f",
        [500, 42, 1, 2, 3, 4, 5],
    )
    assert returns(res) == [42 + 1000 + 5000000]
    assert res.ram[500] == 42
    assert [res.ram[510 + j] for j in range(5)] == [5, 4, 3, 2, 1]  # RAM[a+j] = word 4-j


def test_ram_wrappers_from_the_library():
    out = run_program(
        prog(
            """
    mem.write(77, pub_read())
    pub_write(mem.read(77) + 1)
    """,
            uses="use vm.io.mem",
        ),
        [9],
    )
    assert out == [10]


def test_hash_sponge_and_digest_assert():
    out = run_program(
        prog("""
    let x = pub_read()
    let h = hash(x, 0, 0, 0, 0, 0, 0, 0, 0, 1)
    let (h0, h1, h2, h3, h4) = h
    pub_write5(h0, h1, h2, h3, h4)
    sponge_init()
    sponge_absorb(1, 2, 3, 4, 5, 6, 7, 8, 9, x)
    let s = sponge_squeeze()
    pub_write(s[0] + s[9])
    assert_digest(h, hash(x, 0, 0, 0, 0, 0, 0, 0, 0, 1))
    """),
        [5],
    )
    h = tip5.hash_fixed([1, 0, 0, 0, 0, 0, 0, 0, 0, 5])
    sponge = tip5.Sponge()
    sponge.absorb([5, 9, 8, 7, 6, 5, 4, 3, 2, 1])
    sq = sponge.squeeze()  # sq[0] = st0 = s[9]
    assert out == [*h, (sq[9] + sq[0]) % P]


def test_library_preimage_check_and_os_module():
    src = prog(
        """
    let expected = pub_read5()
    auth.verify_preimage(expected)
    let l = meta.leaf(expected, expected)
    let (l0, l1, l2, l3, l4) = l
    pub_write(l4)
    """,
        uses="use std.crypto.auth\nuse os.neptune.kernel.meta",
    )
    h = tip5.hash_fixed([0] * 9 + [7])  # VM order, word 0 on top
    expected = h[::-1]  # read_io: first read deepest
    out = run_program(src, expected, secret=[7])
    pair = tip5.hash_fixed(expected[::-1] * 2)
    assert out == [pair[0]]
    with pytest.raises(AssertionError, match="VectorAssertionFailed"):
        run_program(src, expected, secret=[8])


def test_merkle_step():
    src = prog("""
    let i = as_u32(pub_read())
    let leaf = pub_read5()
    let (l0, l1, l2, l3, l4) = leaf
    let (j, h) = merkle_step(i, l0, l1, l2, l3, l4)
    let (h0, h1, h2, h3, h4) = h
    pub_write(as_field(j))
    pub_write5(h0, h1, h2, h3, h4)
    """)
    leaf, sib = [1, 2, 3, 4, 5], (6, 7, 8, 9, 10)
    low = run_ops(compile_source(src), [6, *leaf], secret=())
    assert low.error is not None and low.error.kind == "EmptySecretDigestInput"
    ops = link([ModuleTir("t", "program", compile_source(src))])
    res = run(parse(lower(ops).text()), VmInput(public_input=[6, *leaf], secret_digests=[sib]))
    assert res.error is None
    cur = leaf[::-1]  # VM word 0 = st0 = last component
    assert list(res.public_output) == [3, *tip5.hash_pair(cur, sib)]


def test_events_reveal_and_seal_b28():
    out = run_program(
        """program t
event Paid { who: Field, amt: Field }
event Nul { n: Field }
fn main() {
    let w = pub_read()
    reveal Paid { amt: 9, who: w }
    seal Nul { n: w }
}
""",
        [4],
    )
    assert out == [0, 9, 4, *tip5.hash_fixed([1, 0, 0, 0, 0, 0, 0, 0, 0, 4])]


def test_runtime_and_constant_index_b22():
    out = run_program(
        prog("""
    let arr = [pub_read(), pub_read(), pub_read(), pub_read()]
    let ds = [pub_read5(), pub_read5()]
    let mut s = 0
    for i in 0..4 { s = s + arr[i] * (as_field(i) + 1) }
    pub_write(s)
    pub_write(arr[3])
    let (a, b, c, d, e) = ds[as_u32(1)]
    pub_write(a + e * 100)
    """),
        [5, 6, 7, 8, *range(10, 20)],
    )
    assert out == [5 + 12 + 21 + 32, 8, 15 + 19 * 100]


def test_runtime_index_out_of_range_fails():
    ops = compile_source(
        prog("""
    let arr = [1, 2, 3]
    pub_write(arr[as_u32(pub_read())])
    """)
    )
    assert run_ops(ops, [2]).public_output == [3]
    assert run_ops(ops, [3]).error.kind == "AssertionFailed"


def test_xfield_mul_and_invert():
    res = call_fn(
        """
fn f(a: Field, b: Field, c: Field, s: Field) -> XField {
    let x = xfield(a, b, c)
    xinvert(xinvert(x *. s))
}
""",
        "f",
        [1, 2, 3, 10],
    )
    assert returns(res) == [10, 20, 30]


def test_asm_block_value():
    out = run_program(
        prog("pub_write(seven() + 1)", "fn seven() -> Field {\n    asm(+1) { push 7 }\n}")
    )
    assert out == [8]


def test_cross_module_program_links():
    mods = compile_modules(FIXTURES / "app" / "main.tri", [LIB])
    res = run_ops(link(mods), [5])
    assert res.error is None and list(res.public_output) == [20]


# -- size-generic functions (spec §3) -------------------------------------------------------

GENERIC = """program t
fn sum<N>(a: [Field; N]) -> Field {
    let mut s = 0
    for i in 0..N { s = s + a[i] }
    s
}
fn first<N>(a: [Field; N]) -> Field { a[0] }
fn twice<N>(a: [Field; N]) -> Field { sum(a) + sum<N>(a) }
fn echo<N>(a: [Field; N]) -> [Field; N] {
    for i in 0..N { pub_write(a[i]) }
    a
}
fn main() {
    let a = [pub_read(), pub_read(), pub_read()]
    let b = [1, 2, 3, 4, 5]
    pub_write(sum(a))
    pub_write(sum<5>(b))
    pub_write(twice(a) + first(b))
    let p = echo(a)
    pub_write(p[2])
}
"""


def test_size_generic_functions_are_instantiated_in_first_use_order():
    ops = compile_source(GENERIC)
    names = [op.value for op in ops if op.kind == "FnStart"]
    assert names == ["main", "sum__N3", "sum__N5", "twice__N3", "first__N5", "echo__N3"]
    assert run_program(GENERIC, [4, 5, 6]) == [15, 15, 31, 4, 5, 6, 6]
