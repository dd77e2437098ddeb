"""Static semantics (spec/trident-language.md §3, §4, §6, §9): types and widths, names,
items, control, with ``file:line:col`` for every error class; the CF additions."""

from __future__ import annotations

import pytest
from frontend_util import LIB, error_of, raw

from tasmopt.frontend import compile_source
from tasmopt.frontend.types import (
    BOOL,
    DIGEST,
    FIELD,
    U32,
    XFIELD,
    ArrayTy,
    StructTy,
    TupleTy,
    field_slot,
    width,
)


def test_widths():
    s = StructTy("t.S", "S", (("a", FIELD), ("d", DIGEST), ("x", XFIELD)))
    assert [width(t) for t in (FIELD, BOOL, U32, XFIELD, DIGEST)] == [1, 1, 1, 3, 5]
    assert width(ArrayTy(DIGEST, 3)) == 15 and width(TupleTy((U32, DIGEST))) == 6
    assert width(s) == 9
    # offset from the struct's top element: width - preceding - own (spec §4)
    assert field_slot(s, "a")[:2] == (8, 1)
    assert field_slot(s, "d")[:2] == (3, 5)
    assert field_slot(s, "x")[:2] == (0, 3)


def ok(src: str, search_path=()) -> None:
    compile_source(
        src if src.startswith(("module", "program")) else "module t\n" + src, "t.tri", search_path
    )


@pytest.mark.parametrize(
    "src",
    [
        "fn f(a: U32, b: U32) -> (U32, U32) { a /% b }",
        "fn f(a: U32, b: U32) -> U32 { a & b ^ a }",
        "fn f(x: XField, s: Field) -> XField { x *. s }",
        "fn f(a: Field) -> Bool { a == 0 }",
        "fn f(a: Bool) -> Bool { a == true }",
        "fn f(a: Field) -> U32 { as_u32(a) }",
        "fn f(a: Field) -> Digest { (a, a, a, a, a) }",  # 5-tuple returned as Digest
        "fn f(d: Digest) -> Field { let (a, b, c, e, g) = d\n a + g }",
        "const K: U32 = 7\nfn f(a: U32) -> Bool { a < K }",  # CF: constants keep their type
        "const B: Bool = true\nfn f() -> Bool { B }",
        "fn f(a: Field) -> Field { if a == 0 { 1 } else { a } }",
        "fn f(c: Field) { if c { pub_write(1) } }",  # Field conditions are allowed
        "fn f(n: U32) { for i in 0..n bounded 4 { pub_write(as_field(i)) } }",
        "const N: Field = 3\nfn f() { for i in 0..N { } }",
        "fn f(a: [Field; 3]) -> Field { a[0] + a[2] }",
        "fn f() -> [U32; 2] { [as_u32(1), as_u32(2)] }",
        "struct P { x: Field, y: Field }\nfn f(p: P) -> Field { p.x }\n"
        "fn g() -> P { P { y: 1, x: 2 } }",  # pure fields in any order
        "fn f(x: Field) { let _ = as_u32(x) }",
        "fn f(a: Field) -> Field { return a }",
        "fn f(a: Field) -> Field { if a == 0 { return 1 } else { return a } }",
        "fn f(x: Field) -> Field { match x { 0 => { 1 } 1 => { 5 } _ => { x } } }",
        "fn f(b: Bool) -> Field { match b { true => { 1 } false => { 0 } } }",
        "fn f() -> Field { asm(+1) { push 7 } }",
        "#[test]\nfn t() { assert(true) }",
        "#[cfg(release)]\nfn f() -> Field { undefined_thing }",  # inactive cfg: ignored
    ],
)
def test_accepted(src):
    ok(src)


@pytest.mark.parametrize(
    "src, line, col, message",
    [
        # names
        ("fn f() -> Field { y }", 2, 19, "undefined variable 'y'"),
        ("fn f() { g() }", 2, 10, "undefined function 'g'"),
        ("fn f() { let p = Q { a: 1 } }", 2, 18, "undefined struct 'Q'"),
        ("fn f(a: Q) { }", 2, 9, "unknown type 'Q'"),
        ("fn f() { reveal E { a: 1 } }", 2, 17, "undefined event 'E'"),
        ("fn f() -> Field { m.g() }", 2, 19, "undefined module 'm'"),
        # types
        ("fn f() { let x: U32 = 5 }", 2, 23, "annotated U32, value is Field"),
        ("fn f(x: Field, y: Field) -> Bool { x < y }", 2, 38, "'<' needs U32 operands"),
        ("fn f(x: U32, y: U32) -> U32 { x + y }", 2, 33, "'+' needs Field operands"),
        ("fn f(x: XField, y: XField) -> XField { x + y }", 2, 42, "'+' needs Field operands"),
        ("fn f(a: Digest, b: Digest) -> Bool { a == b }", 2, 40, "'==' needs two single"),
        ("fn f(x: Field) { x = 1 }", 2, 18, "cannot assign to immutable variable 'x'"),
        ("fn f() { let mut x = 1\n x = as_u32(1) }", 3, 2, "assignment type mismatch"),
        ("fn g(a: Field) { }\nfn f() { g(1, 2) }", 3, 10, "takes 1 argument, got 2"),
        (
            "fn g(a: U32) { }\nfn f() { g(1) }",
            3,
            12,
            "argument 1 of 'g': expected U32, found Field",
        ),
        ("struct P { x: Field }\nfn f() -> P { P { } }", 3, 15, "missing field 'x'"),
        ("struct P { x: Field }\nfn f() -> P { P { x: 1, z: 2 } }", 3, 25, "has no field 'z'"),
        ("struct P { x: Field }\nfn f() -> P { P { x: as_u32(1) } }", 3, 22, "field 'x' of struct"),
        (
            "struct P { x: Field }\nfn f(p: P) -> Field { p.y }",
            3,
            23,
            "struct 'P' has no field 'y'",
        ),
        ("fn f(p: Field) -> Field { p.y }", 2, 27, "field access '.y' on a value of type Field"),
        ("fn f(a: Field) -> Field { a[0] }", 2, 27, "cannot index a value of type Field"),
        ("fn f(a: [Field; 2]) -> Field { a[2] }", 2, 34, "index 2 is out of range"),
        ("fn f(a: [Field; 2], i: Field) -> Field { a[i] }", 2, 44, "array index must be U32"),
        ("fn f() -> [Field; 2] { [1, as_u32(1)] }", 2, 28, "array element type mismatch"),
        ("fn f(d: Digest) { let (a, b) = d }", 2, 19, "cannot destructure a value of type Digest"),
        ("fn f() { let (a, b) = split(1)\n let (c, e, g) = split(1) }", 3, 2, "2-tuple into 3"),
        ("fn f(d: Digest) { let mut a = 1\n (a, a) = d }", 3, 2, "cannot assign a value"),
        ("fn f(c: U32) { if c { } }", 2, 19, "condition must be Bool or Field"),
        ("fn f(n: Field) { for i in 0..n { } }", 2, 30, "loop end must be a compile-time constant"),
        ("fn f() -> U32 { 1 }", 2, 17, "return type mismatch: 'f' returns U32, found Field"),
        ("fn g(a: Field) -> U32 { a }", 2, 25, "return type mismatch"),
        ("fn f(c: Bool) -> Field { if c { 1 } else { c } }", 2, 26, "different types"),
        ("fn f() { let x = pub_write(1) }", 2, 18, "cannot bind a unit value"),
        ("fn f(x: Field) { split(x) }", 2, 18, "returns nothing, but its body ends with a value"),
        ("fn f(x: Field) -> Field { }", 2, 4, "must return Field, but its body has no value"),
        # items
        (
            "event E { a: Field, b: Field, c: Field, d: Field, e: Field, f: Field, g: Field, "
            "h: Field, i: Field, j: Field }",
            2,
            7,
            "event 'E' has 10 fields, max is 9",
        ),
        ("event E { a: U32 }", 2, 14, "event field 'a' must be Field type"),
        ("fn f(a: Field) -> Field { f(a) }", 2, 27, "recursive call cycle detected: f -> f"),
        ("fn f() { g() }\nfn g() { f() }", 3, 10, "recursive call cycle detected: f -> g -> f"),
        ("fn f(a: Field)", 2, 4, "function 'f' has no body"),
        ("#[test]\nfn t(a: Field) { }", 3, 4, "#[test] function 't' must take no parameters"),
        ("fn f() { }\nfn f() { }", 3, 4, "duplicate function 'f'"),
        ("struct S { a: Field, a: Field }", 2, 22, "duplicate field 'a'"),
        ("fn f(a: Field, a: Field) { }", 2, 16, "duplicate parameter 'a'"),
        ("const K: Field = 1 + 2", 2, 18, "must be an integer literal"),
        ("const K: U32 = 4294967296", 2, 16, "does not fit U32"),
        ("struct S { s: S }", 2, 8, "struct 'S' contains itself"),
        # control
        ("fn f(a: Field) -> Field { return a\n a }", 2, 27, "'return' is only allowed as the last"),
        ("fn f() { assert(false)\n pub_write(1)\n pub_write(2) }", 3, 2, "unreachable code"),
        ("fn f() { assert(false)\n pub_write(1) }", 3, 2, "unreachable tail expression"),
        ("fn f(x: Field) { match x { 0 => { } } }", 2, 18, "match is not exhaustive"),
        ("fn f(x: Field) { match x { _ => { } 0 => { } } }", 2, 37, "pattern after '_'"),
        ("fn f(x: Bool) { match x { 0 => { } _ => { } } }", 2, 27, "integer pattern on Bool"),
        # size-generic functions
        (
            "fn g<N>(a: Field) -> Field { a }\nfn f() -> Field { g(1) }",
            3,
            19,
            "cannot infer size 'N' of 'g'",
        ),
        (
            "fn g<N>(a: [Field; N]) -> Field { a[0] }\nfn f() -> Field { g<1, 2>([1]) }",
            3,
            19,
            "'g' takes 1 size argument, got 2",
        ),
        (
            "fn g<N>(a: [Field; N]) -> Field { a[0] }\nfn f() -> Field { g<2>([1]) }",
            3,
            24,
            "argument 1 of 'g': expected [Field; 2], found [Field; 1]",
        ),
        (
            "fn g<N>(a: [Field; N]) -> Field { a[N] }\nfn f() -> Field { g([1]) }",
            2,
            37,
            "index 1 is out of range for [Field; 1]",
        ),  # found when checking the instance
        ("fn g<N>(a: [Field; N]) -> [Field; N] { [1, 2] }", 2, 40, "return type mismatch"),
    ],
)
def test_errors_with_position(src, line, col, message):
    err = error_of("module t\n" + src)
    e = next((e for e in err.errors if message in e.message), None)
    assert e is not None, str(err)
    assert (e.file, e.line, e.col) == ("t.tri", line, col), str(e)


def test_program_without_main():
    err = error_of("program p\nfn helper() { }")
    assert (err.line, err.col, err.message) == (1, 9, "program 'p' has no 'fn main'")


def test_unknown_intrinsic():
    err = error_of("module std.t\n#[intrinsic(frobnicate)]\npub fn f()")
    assert (err.line, err.col) == (2, 1) and err.message == "unknown intrinsic 'frobnicate'"


def test_intrinsic_wrapper_width_must_match():
    err = error_of(
        "module std.t\n#[intrinsic(sponge_squeeze)]\npub fn sq() -> Digest\n"
        "fn f() -> Digest { sq() }"
    )
    assert "intrinsic 'sponge_squeeze' takes 0 and gives 10" in err.message


def test_all_type_errors_of_a_module_are_reported():
    err = error_of("module t\nfn f() -> Field { a }\nfn g() -> U32 { b }")
    assert [(e.line, e.message) for e in err.errors] == [
        (2, "undefined variable 'a'"),
        (3, "undefined variable 'b'"),
    ]


def test_struct_literal_reordered_with_calls_is_rejected():
    err = error_of(
        "module t\nstruct P { x: Field, y: Field }\n"
        "fn f() -> P { P { y: pub_read(), x: pub_read() } }"
    )
    assert "must be written in declaration order" in err.message


def test_local_function_shadows_builtin_b9():
    # spec §10.22: a module's own `add` is a call, never the intrinsic
    src = (
        "module t\nfn add(x: Field, y: Field) -> Field { x * y }\n"
        "fn f(p: Field, q: Field) -> Field { add(q, p) }\n"
        "fn g(p: Field, q: Field) -> Field { add(p, q) }"
    )
    assert raw(src, "f") == "Dup(0) Dup(2) Call(add) Swap(2) Pop(2)"
    assert raw(src, "g") == "Call(add)"  # pass-through (spec §7.3)


def test_wrapper_intrinsics_use_declared_signature():
    # vm.core.u32.pow is declared (Field, U32) -> Field in our fixture library
    ok("program p\nuse vm.core.u32\nfn main() { pub_write(u32.pow(3, as_u32(2))) }", [LIB])
    err = error_of(
        "program p\nuse vm.core.u32\nfn main() { pub_write(u32.pow(3, 2)) }", search_path=[LIB]
    )
    assert "argument 2 of 'u32.pow': expected U32, found Field" in err.message


def test_field_assignment_cf():
    src = (
        "module t\nstruct P { x: Field, y: Field }\n"
        "fn f(a: Field) -> P { let mut p = P { x: a, y: a }\n p.x = 7\n p }"
    )
    assert raw(src) == "Dup(0) Dup(1) Push(7) Swap(2) Pop(1) Swap(2) Pop(1) Swap(1)"
