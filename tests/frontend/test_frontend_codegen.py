"""Code generation shapes (spec/trident-language.md §7, §10): the raw builder TIR of small
snippets, with the CF column where Rust is wrong (§8)."""

from __future__ import annotations

import pytest
from frontend_util import LIB, error_of, functions, opt, raw, show

from tasmopt.frontend import compile_source

CX = "struct Cx {re: Field, im: Field}\n"
PAID = "event Paid {who: Field, amt: Field}\n"

SPEC_10 = [
    (
        "1 poly",
        "fn poly(x: Field, y: Field) -> Field { x * y + x }",
        "Dup(1) Dup(1) Mul Dup(2) Add Swap(2) Pop(2)",
    ),
    (
        "2 inc",
        "fn inc(x: Field) -> Field { let mut t = x\n t = t + 1\n t }",
        "Dup(0) Dup(0) Push(1) Add Swap(1) Pop(1) Dup(0) Swap(2) Pop(2)",
    ),
    (
        "3 lohi",
        "fn lohi(x: Field) -> U32 { let (h, l) = split(x)\n h ^ l }",
        "Dup(0) Split Dup(1) Dup(1) Xor Swap(3) Pop(3)",
    ),
    (
        "4 less B19",
        "fn less(a: U32, b: U32) -> Bool { a < b }",
        "Dup(1) Dup(1) Swap(1) Lt Swap(2) Pop(2)",
    ),
    (
        "4 divmod B19",
        "fn q(a: U32, b: U32) -> U32 { let (q, r) = a /% b\n q }",
        "Dup(1) Dup(1) Swap(1) DivMod Dup(1) Swap(4) Pop(4)",
    ),
    (
        "5 nz",
        "fn nz(x: Field) { if x == 0 { pub_write(7) }\n pub_write(x) }",
        "Dup(0) Push(0) Eq IfOnly[Push(7) WriteIo(1)] Dup(0) WriteIo(1) Pop(1)",
    ),
    (
        "6 else-if",
        "fn e(c: Field, a: Field) { if c == 0 {pub_write(a)} else if c == 1 "
        "{pub_write(a + a)} else {pub_write(0)} }",
        "Dup(1) Push(0) Eq IfElse[Dup(0) WriteIo(1) | Dup(1) Push(1) Eq IfElse[Dup(0) Dup(1) Add "
        "WriteIo(1) | Push(0) WriteIo(1)]] Pop(2)",
    ),
    (
        "7 sel B10",
        "fn sel(c: Bool, a: Field, b: Field) -> Field { if c { a } else { b } }",
        "Dup(2) IfElse[Dup(1) | Dup(0)] Swap(3) Pop(3)",
    ),
    (
        "8 sc B10",
        "fn sc(c: Bool, a: Field) { if c { let t = a + 1\n pub_write(t) } }",
        "Dup(1) IfOnly[Dup(0) Push(1) Add Dup(0) WriteIo(1) Pop(1)] Pop(2)",
    ),
    (
        "9 d",
        "fn d(x: Field) { split(x)\n pub_write(x) }",
        "Dup(0) Split Pop(2) Dup(0) WriteIo(1) Pop(1)",
    ),
    (
        "10 sq B1/B2",
        CX + "fn sq(c: Cx) -> Field { c.re * c.re + c.im * c.im }",
        "Dup(1) Dup(2) Mul Dup(1) Dup(2) Mul Add Swap(2) Pop(2)",
    ),
    (
        "11 mk B4/B16",
        CX + "fn mk(a: Field) -> Cx { let z: Cx = Cx { re: a, im: 0 }\n z }",
        "Dup(0) Push(0) Swap(2) Pop(1) Swap(1)",
    ),
    (
        "12 reveal B11",
        PAID + "fn pay(w: Field, m: Field) { reveal Paid { amt: m, who: w } }",
        "Dup(1) Dup(1) Reveal{Paid,0,2} Pop(2)",
    ),
    (
        "12 seal B11",
        PAID + "fn pay(w: Field, m: Field) { seal Paid { amt: m, who: w } }",
        "Dup(0) Dup(2) Seal{Paid,0,2} Pop(2)",
    ),
    (
        "13 const B8",
        "const K: Field = 9\nfn kk(x: Field) -> Field { x + K }",
        "Dup(0) Push(9) Add Swap(1) Pop(1)",
    ),
    (
        "14 cnt",
        "fn cnt(n: Field) { for i in 0..n bounded 4 { pub_write(1) } }",
        "Dup(0) Call(loop__1) Pop(1) Loop(loop__1)[Push(1) WriteIo(1)] Pop(1)",
    ),
    (
        "15 acc B23",
        "fn acc(n: Field, a: Field) -> Field { let mut s = 0\n "
        "for i in 0..n bounded 8 { s = s + a }\n s }",
        "Push(0) Dup(2) Call(loop__1) Pop(1) Loop(loop__1)[Dup(1) Dup(3) Add Swap(2) Pop(1)] "
        "Dup(0) Swap(3) Pop(3)",
    ),
    (
        "16 swp B15",
        "fn swp(a: Field, b: Field) -> (Field, Field) { (b, a) }",
        "Dup(0) Dup(2) Swap(2) Pop(1) Swap(2) Pop(1)",
    ),
    (
        "17 h1 B16",
        "fn h1(k: Field) -> Digest { hash(k, k, k, k, k, k, k, k, k, k) }",
        "Dup(0) Dup(1) Dup(2) Dup(3) Dup(4) Dup(5) Dup(6) Dup(7) Dup(8) Dup(9) Hash{5} "
        "Swap(5) Pop(1) Swap(1) Swap(2) Swap(3) Swap(4)",
    ),
    (
        "18 rh B13",
        "fn rh(k: Field) -> Field { let mut h = divine5()\n h = divine5()\n k }",
        "Hint(5) Hint(5) " + "Swap(5) Pop(1) " * 5 + "Dup(5) Swap(6) Pop(5) Pop(1)",
    ),
    (
        "19 up B14",
        "fn up(i: U32, a: Field, b: Field, c: Field, d: Field, e: Field) -> U32 {"
        " let (j, h) = merkle_step(i, a, b, c, d, e)\n j }",
        "Dup(5) Dup(5) Dup(5) Dup(5) Dup(5) Dup(5) MerkleStep Dup(5) Swap(12) Pop(5) Pop(5) Pop(2)",
    ),
]


@pytest.mark.parametrize("name, src, shape", SPEC_10, ids=[c[0] for c in SPEC_10])
def test_spec_10_shapes(name, src, shape):
    assert raw(src) == shape


def test_loop_variable_materialized_when_read_b23():
    # v pushed as the start, count = e (start 0), v incremented at the body end
    assert raw("fn f(n: Field) { for i in 0..n bounded 4 { pub_write(as_field(i)) } }") == (
        "Push(0) Dup(1) Call(loop__1) Pop(1) "
        "Loop(loop__1)[Dup(1) WriteIo(1) Swap(1) Push(1) Add Swap(1)] Pop(1) Pop(1)"
    )
    # non-zero start: count = e - v
    assert raw("fn f(s: U32, n: Field) { for i in s..n bounded 4 { pub_write(as_field(i)) } }") == (
        "Dup(1) Dup(1) Dup(1) Sub Call(loop__1) Pop(1) "
        "Loop(loop__1)[Dup(1) WriteIo(1) Swap(1) Push(1) Add Swap(1)] Pop(1) "
        "Pop(2)"
    )


def test_loop_labels_per_module_outer_first():
    src = (
        "fn f(n: Field) { for i in 0..n bounded 2 { for j in 0..n bounded 2 { } } }\n"
        "fn g() { for i in 0..3 { } }"
    )
    assert raw(src, "f") == (
        "Dup(0) Call(loop__1) Pop(1) Loop(loop__1)[Dup(1) Call(loop__2) "
        "Pop(1) Loop(loop__2)[]] Pop(1)"
    )
    assert raw(src, "g") == "Push(3) Call(loop__3) Pop(1) Loop(loop__3)[]"


def test_loop_body_locals_are_popped_b23():
    assert raw("fn f(n: Field) { for i in 0..n bounded 4 { let t = n + 1\n pub_write(t) } }") == (
        "Dup(0) Call(loop__1) Pop(1) Loop(loop__1)[Dup(1) Push(1) Add Dup(0) "
        "WriteIo(1) Pop(1)] Pop(1)"
    )


def test_spill_past_16_elements_b18():
    # spec §10.23: a (oldest) is spilled before the first Dup of x, ISA-correct stores
    src = "fn wide(a: Digest, b: Digest, c: Digest, x: Field) -> Field { let y = x + x\n y }"
    chain = " ".join(f"Swap({k})" for k in range(1, 12))
    stores = " ".join(f"{chain} Push({2**30 + i}) WriteMem(1) Pop(1)" for i in (4, 3, 2, 1, 0))
    assert raw(src) == stores + " Dup(0) Dup(1) Add Dup(0) Swap(12) Pop(5) Pop(5) Pop(2)"


def test_spill_reload_reads_back_in_order():
    src = (
        "fn f(a: Digest, b: Digest, c: Digest, x: Field) -> Field {\n let y = x + x\n"
        " let (a0, a1, a2, a3, a4) = a\n a4 + y }"
    )
    shape = raw(src)
    reload = " ".join(f"Push({2**30 + i}) ReadMem(1) Pop(1)" for i in range(5))
    assert reload in shape


def test_pass_through_b21():
    lib = [LIB]
    src = (
        "program p\nuse vm.io.io\nuse vm.core.convert\nuse vm.io.mem\n"
        "fn rd() -> Field { io.read() }\nfn lo(a: Field) -> U32 { convert.as_u32(a) }\n"
        "fn put(p: Field, v: Field) { mem.write(p, v) }\nfn main() { }"
    )
    assert raw(src, "rd", lib) == "ReadIo(1)"
    assert raw(src, "lo", lib) == "Split Swap(1) Push(0) Eq Assert(1)"
    assert raw(src, "put", lib) == "Swap(1) RamWrite{1}"


def test_intrinsic_sequences_b20_b24_b25():
    assert raw("fn f(a: Field) -> U32 { as_u32(a) }") == "Split Swap(1) Push(0) Eq Assert(1)"
    assert raw("fn f(a: Field, d: Digest) { ram_write_block(a, d) }") == (
        "Dup(5) RamWrite{5} Pop(1)"
    )
    assert raw("fn f(a: Field) -> Digest { ram_read_block(a) }") == "Push(4) Add RamRead{5}"
    assert raw("fn f(p: Field) { sponge_absorb_mem(p) }") == (
        "Push(0) Push(0) Push(0) Push(0) Swap(4) SpongeLoad Pop(5)"
    )
    assert raw("fn f(b: U32, e: U32) -> U32 { pow(b, e) }") == "Swap(1) Pow"
    assert raw("fn f() -> [Field; 10] { sponge_squeeze() }") == "SpongeSqueeze"


def test_multi_width_return_rotation_b16():
    # k = 3 over 2 dead: 2 x (Swap(3) Pop(1)), then 2 x (Swap(1) Swap(2))
    src = "fn f(a: Field, b: Field) -> (Field, Field, Field) { (b, a, b) }"
    assert raw(src) == (
        "Dup(0) Dup(2) Dup(2) Swap(3) Pop(1) Swap(3) Pop(1) Swap(1) Swap(2) Swap(1) Swap(2)"
    )


def test_tuple_assignment_b12():
    src = "fn f(a: U32, b: U32) -> U32 { let mut q = a\n let mut r = b\n (q, r) = a /% b\n q }"
    assert raw(src) == (
        "Dup(1) Dup(1) Dup(3) Dup(3) Swap(1) DivMod "
        "Swap(2) Pop(1) Swap(2) Pop(1) Dup(1) Swap(4) Pop(4)"
    )


def test_struct_literal_in_declaration_order_b4():
    src = CX + "fn f(a: Field, b: Field) -> Cx { Cx { im: b, re: a } }"
    assert raw(src) == "Dup(1) Dup(1) Swap(2) Pop(1) Swap(2) Pop(1)"


def test_nested_struct_field_offsets():
    src = (
        "struct In { a: Field, d: Digest }\nstruct Out { x: U32, i: In, y: Field }\n"
        "fn f(o: Out) -> Field { o.i.a + o.y }"
    )
    # o is 8 wide: x at depth 7, i.a at 6, i.d at 1..5, y at 0
    assert raw(src) == "Dup(6) Dup(1) Add Swap(8) Pop(5) Pop(3)"


def test_constant_index_and_runtime_index_b22():
    assert raw("fn f(a: [Field; 3]) -> Field { a[0] }") == "Dup(2) Swap(3) Pop(3)"
    shape = raw("fn f(a: [Field; 3], i: U32) -> Field { a[i] }")
    assert shape.startswith(
        f"Dup(3) Dup(3) Dup(3) Push({2**29}) WriteMem(3) Pop(1) Dup(0) "
        f"Dup(0) Push(3) Swap(1) Lt Assert(1) Push({2**29 + 2}) Swap(1) "
        "Sub RamRead{1}"
    )


def test_if_value_from_block_with_locals_b10():
    src = "fn f(c: Bool, a: Field) -> Field { if c { let t = a + 1\n t } else { a } }"
    assert raw(src) == (
        "Dup(1) IfElse[Dup(0) Push(1) Add Dup(0) Swap(1) Pop(1) | Dup(0)] Swap(2) Pop(2)"
    )


def test_match_as_if_chain():
    src = "fn f(x: Field) -> Field { match x { 0 => { 10 } 1 => { 20 } _ => { x } } }"
    assert raw(src) == (
        "Dup(0) Dup(0) Push(0) Eq IfElse[Push(10) | Dup(0) Push(1) Eq "
        "IfElse[Push(20) | Dup(1)]] Swap(1) Pop(1) Swap(1) Pop(1)"
    )


def test_asm_spills_named_entries_and_models_effect():
    shape = raw("fn f(a: Field) -> Field { asm(+1) { push 7 } }")
    assert shape == f"Push({2**30}) WriteMem(1) Pop(1) Asm{{push 7,1}}"
    assert raw("fn f() { asm(miden) { drop } }") == ""  # other targets are skipped


def test_let_wildcard_pops_at_once():
    assert raw("fn f(x: Field) { let _ = as_u32(x) }") == (
        "Dup(0) Split Swap(1) Push(0) Eq Assert(1) Pop(1) Pop(1)"
    )


def test_program_entry_and_sec_ram_comments():
    ops = compile_source(
        "program p\nsec ram: { 7: Field }\nfn main() { }", "p.tri", optimized=False
    )
    assert show(ops[:3]) == "Comment(sec ram[7]: Field) Entry(main) FnStart(main)"


def test_xfield_ops():
    assert raw("fn f(a: Field, s: Field) -> XField { let x = xfield(a, a, a)\n x *. s }") == (
        "Dup(1) Dup(2) Dup(3) Dup(2) Dup(2) Dup(2) Dup(6) ExtMul Swap(3) Pop(1) Swap(3) Pop(1) Swap(3) "
        "Pop(1) Swap(3) Pop(1) Swap(3) Pop(1) Swap(1) Swap(2) Swap(1) Swap(2)"
    )


def test_deep_temporaries_spill_the_named_variable():
    # 17 anonymous temps above x: x is spilled, then copied from RAM (CF: not reloaded)
    src = (
        "fn g(a: Field, b: Field, c: Field, d: Field, e: Field, f: Field, "
        "g: Field, h: Field, i: Field) -> Field { a }\n"
        "fn f(x: Field) -> Digest {\n"
        "    hash(1, 1, 1, 1, 1, 1, 1, 1, 1, g(1, 1, 1, 1, 1, 1, 1, 1, x))\n}"
    )
    shape = raw(src, "f")
    assert shape.endswith(
        f"Push({2**30}) WriteMem(1) Pop(1) Push(1) Push(1) "
        f"Push({2**30}) ReadMem(1) Pop(1) Call(g) Hash{{5}}"
    )


def test_wide_values_read_through_ram():
    # a 17-wide value cannot be dup'ed from its bottom: spill it, copy the element from RAM
    assert raw("fn f(a: [Field; 17]) -> Field { a[0] }") == (
        " ".join(f"Push({2**30 + k}) WriteMem(1) Pop(1)" for k in range(16, -1, -1))
        + f" Push({2**30}) ReadMem(1) Pop(1)"
    )


def test_out_of_reach_is_an_error():
    # element 0 of an anonymous 17-wide temp is at depth 16: temps are never spilled
    err = error_of(
        "module t\nfn w(x: Field) -> [Field; 17] {\n    [x, x, x, x, x, x, x, x, x, "
        "x, x, x, x, x, x, x, x]\n}\nfn f(x: Field) -> Field {\n    w(x)[0]\n}"
    )
    assert (err.line, err.col) == (6, 5) and "too many live values" in err.message, str(err)


def test_optimizer_applied_by_default():
    src = "fn f(a: Field, b: Field, c: Field, d: Field) -> Field { a }"
    assert raw(src) == "Dup(3) Swap(4) Pop(4)"
    assert opt(src) == "Dup(3) Swap(4) Pop(4)"
    fns = functions(
        compile_source(
            "module t\nfn f(n: Field) { let x = divine()\n let y = divine()\n pub_write(x + y) }"
        )
    )
    assert show(fns["f"]) == "Hint(2) Dup(1) Dup(1) Add WriteIo(1) Pop(3)"
