"""Syntax (spec/trident-language.md §2.1, §3, §5): file shape, items, types, statements,
expression precedence, the CF parse fixes, and parser errors with their positions."""

from __future__ import annotations

import pytest
from frontend_util import error_of

from tasmopt.frontend import ast as A
from tasmopt.frontend.modules import parse_source
from tasmopt.frontend.source import Source


def parse(text: str) -> A.File:
    return parse_source(Source("t.tri", text))


def body(stmts: str) -> A.Block:
    f = parse(f"module t\nfn f() {{\n{stmts}\n}}")
    return f.items[0].body


def expr(text: str) -> A.Expr:
    b = body(text)
    assert not b.stmts
    return b.tail


def sexp(e) -> str:
    if isinstance(e, A.BinExpr):
        return f"({e.op} {sexp(e.lhs)} {sexp(e.rhs)})"
    if isinstance(e, A.PathExpr):
        return e.dotted
    if isinstance(e, A.IntLit):
        return str(e.value)
    if isinstance(e, A.CallExpr):
        g = f"<{len(e.generics)}>" if e.generics else ""
        return f"{e.dotted}{g}(" + " ".join(sexp(a) for a in e.args) + ")"
    if isinstance(e, A.TupleExpr):
        return "(tuple " + " ".join(sexp(a) for a in e.elems) + ")"
    if isinstance(e, A.IndexExpr):
        return f"{sexp(e.base)}[{sexp(e.index)}]"
    return type(e).__name__


def test_program_header_uses_io_and_items():
    f = parse(
        "program p\nuse std.crypto.merkle\nuse vm.io.io\npub input: Field\n"
        "sec ram: { 17: Field, 18: Digest }\nfn main() { }"
    )
    assert (f.kind, f.name) == ("program", "p")
    assert [u.dotted for u in f.uses] == ["std.crypto.merkle", "vm.io.io"]
    assert [io.kind for io in f.io] == ["pub input", "sec ram"]
    assert [a for a, _ in f.io[1].slots] == [17, 18]
    assert isinstance(f.items[0], A.FnItem)


def test_module_header_dotted():
    assert parse("module std.math.poly").name == "std.math.poly"


def test_items_struct_event_const_fn_attributes():
    f = parse(
        "module std.t\npub struct P { pub x: Field, y: (U32, Digest), }\n"
        "struct E {}\nevent Ev { a: Field }\npub const K: U32 = 7\n"
        "#[intrinsic(pub_read)] pub fn r() -> Field\n"
        "#[cfg(debug)]\n#[requires(a < 3)]\nfn g<N, M>(a: [Field; N + M * 2],) -> [Field; N] { a }"
    )
    s, e, ev, k, r, g = f.items
    assert [(fd.name, fd.pub) for fd in s.fields] == [("x", True), ("y", False)]
    assert e.fields == [] and isinstance(ev, A.EventItem) and k.pub
    assert r.body is None and r.attrs[0].arg == "pub_read"
    assert [a.name for a in g.attrs] == ["cfg", "requires"] and g.attrs[1].arg == "a < 3"
    assert [n for n, _ in g.generics] == ["N", "M"]
    size = g.params[0].type.size
    assert isinstance(size, A.SizeBin) and size.op == "+"


def test_types():
    f = parse("module t\nfn f(a: [[Field; 2]; 3], b: (Field), c: std.x.P, d: XField) { }")
    a, b, c, d = (p.type for p in f.items[0].params)
    assert isinstance(a, A.ArrayT) and isinstance(a.elem, A.ArrayT)
    assert isinstance(b, A.TupleT) and len(b.elems) == 1  # (T) is a 1-tuple type
    assert c.path == ("std", "x", "P") and d.name == "XField"


@pytest.mark.parametrize(
    "text, tree",
    [
        ("a == b + c * d", "(== a (+ b (* c d)))"),
        ("a < b + c", "(< a (+ b c))"),  # CF: Rust misparses as generics
        ("a < (b)", "(< a b)"),  # CF (spec §10.24)
        ("a + b + c", "(+ (+ a b) c)"),  # left-associative
        ("a & b ^ c", "(^ (& a b) c)"),
        ("a * b /% c", "(* a (/% b c))"),  # /% binds tightest
        ("a *. b * c", "(* (*. a b) c)"),
        ("f<3>(x)", "f<1>(x)"),
        ("m.f<N, 2>(x, y)", "m.f<2>(x y)"),
        ("(a < b, c)", "(tuple (< a b) c)"),  # CF: Rust: "expected '>'"
        ("a[i][0]", "a[i][0]"),
        ("p.x.y", "p.x.y"),
        ("(a, b, )", "(tuple a b)"),
    ],
)
def test_expression_precedence_and_forms(text, tree):
    assert sexp(expr(text)) == tree


def test_binary_operator_continues_on_next_line():
    assert sexp(expr("a\n  + b")) == "(+ a b)"


def test_bracket_on_next_line_indexes():
    assert sexp(expr("a\n[0]")) == "a[0]"


def test_statements():
    b = body(
        "let mut x: Field = 1\nlet (a, _, c) = t\nx = x + 1\n(a, _) = g()\np.x = 3\n"
        "if c { } else if d { } else { }\nfor i in 0..n bounded 8 { }\nfor _ in 0..3 { }\n"
        "reveal E { a: 1, b }\nseal E { a }\nmatch x { 0 => { } true => { } _ => { } }\n"
        "asm(+1) { push 1 }\nf(x)\nreturn"
    )
    kinds = [type(s).__name__ for s in b.stmts]
    assert kinds == [
        "LetStmt",
        "LetStmt",
        "AssignStmt",
        "AssignStmt",
        "AssignStmt",
        "IfStmt",
        "ForStmt",
        "ForStmt",
        "EventStmt",
        "EventStmt",
        "MatchStmt",
        "AsmStmt",
        "ExprStmt",
        "ReturnStmt",
    ]
    let2, assign2 = b.stmts[1], b.stmts[3]
    assert [n for n, _ in let2.names] == ["a", "_", "c"] and let2.is_tuple
    assert assign2.is_tuple and isinstance(assign2.targets[1], A.Wildcard)
    elif_ = b.stmts[5].els
    assert isinstance(elif_.stmts[0], A.IfStmt)  # else-if = else { if }
    assert b.stmts[6].bound == 8 and b.stmts[7].var is None
    reveal = b.stmts[8]
    assert [(n, sexp(v)) for n, v, _ in reveal.fields] == [("a", "1"), ("b", "b")]
    assert [arm.pattern for arm in b.stmts[10].arms] == [0, True, "_"]
    assert b.stmts[11].body.effect == 1
    assert b.stmts[13].value is None


def test_tail_expression_vs_statement():
    b = body("f(x)\ng(y)")
    assert len(b.stmts) == 1 and sexp(b.tail) == "g(y)"


def test_let_single_name_in_parens_is_tuple_pattern():
    let = body("let (a) = t").stmts[0]
    assert let.is_tuple and [n for n, _ in let.names] == ["a"]


def test_no_struct_literal_in_if_head():
    # CF: `Ready { ... }` in an if head is the block, not a struct literal (spec §5)
    b = body("if Ready { x } else { y }")
    assert isinstance(b.stmts[0].cond, A.PathExpr)


def test_struct_literal_lookahead():
    lit = expr("P { x: 1, y }")
    assert isinstance(lit, A.StructLit) and [n for n, _, _ in lit.fields] == ["x", "y"]
    assert isinstance(expr("m.P {}"), A.StructLit)


@pytest.mark.parametrize(
    "src, line, col, message",
    [
        ("fn f() { }", 1, 1, "expected 'program' or 'module' declaration, found 'fn'"),
        ("module t\nfn f() { let x = 1; }", 2, 19, "expected expression, found ';'"),
        ("module t\nfn f() { }\nuse vm.io.io", 3, 1, "expected item, found 'use'"),
        ("module t\npub #[pure] fn f() { }", 2, 5, "expected item, found '#'"),
        ("module t\n#[inline] fn f() { }", 2, 3, "unknown attribute 'inline'"),
        ("module t\n#[test] struct S { }", 2, 1, "only allowed on functions"),
        ("module t\nfn f(a: 5) { }", 2, 9, "expected type, found integer '5'"),
        ("module t\nfn f(a: [Field; ]) { }", 2, 17, "expected array size"),
        ("module t\nfn f() { let x = { 1 } }", 2, 18, "expected expression, found '{'"),
        ("module t\nfn f() { let = 1 }", 2, 14, "expected identifier, found '='"),
        ("module t\nfn f( { }", 2, 7, "expected a parameter name"),
        ("module t\nfn f() { g(1 }", 2, 14, "expected ')', found '}'"),
        ("module t\nfn f() { a[0] = 1 }", 2, 10, "unsupported assignment target"),
        ("module t\nfn f() { (a, b.c) = t }", 2, 10, "unsupported assignment target"),
        ("module t\nfn f() { f(1) = 1 }", 2, 10, "unsupported assignment target"),
        ("module t\nfn f() { let t = (a,) }", 2, 21, "at least two elements"),
        ("module t\nfn f() { match x { S { a: 1 + 2 } => { } } }", 2, 29, "bad field pattern"),
        ('module t\nfn f() { match x { "a" => { } } }', 2, 20, "unexpected character"),
        ("module t\nfn f() {", 2, 9, "expected '}', found end of file"),
    ],
)
def test_parse_errors_with_position(src, line, col, message):
    err = error_of(src)
    assert (err.line, err.col) == (line, col), str(err)
    assert message in err.message


def test_parse_errors_collected_per_item():
    err = error_of("module t\nfn f() { let x = 1; }\nfn g() { ) }\nfn h() { }")
    assert [(e.line, e.message) for e in err.errors] == [
        (2, "expected expression, found ';'"),
        (3, "expected expression, found ')'"),
    ]


def test_nesting_depth_limit():
    deep = "if c { " * 300 + "}" * 300
    err = error_of(f"module t\nfn f(c: Bool) {{ {deep} }}")
    assert "nesting depth exceeded" in err.message
