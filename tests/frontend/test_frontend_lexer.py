"""Lexical structure (spec/trident-language.md §1): tokens, longest match, comments, asm,
the call rule, and every lexer error with its position."""

from __future__ import annotations

import pytest
from frontend_util import error_of

from tasmopt.errors import FrontendError
from tasmopt.frontend.lexer import AsmBody, tokenize
from tasmopt.frontend.source import Diagnostics, Source


def lex(text: str) -> list[tuple[str, str]]:
    diags = Diagnostics(Source("t.tri", text))
    toks = tokenize(Source("t.tri", text), diags)
    diags.raise_if_any()
    return [(t.kind, t.text) for t in toks[:-1]]


def test_keywords_identifiers_and_wildcard():
    assert lex("let mut x_1 _ _y Field U32 input") == [
        ("let", "let"),
        ("mut", "mut"),
        ("IDENT", "x_1"),
        ("_", "_"),
        ("IDENT", "_y"),
        ("Field", "Field"),
        ("U32", "U32"),
        ("IDENT", "input"),
    ]


def test_longest_match_symbols():
    kinds = [k for k, _ in lex("a..b -> => == *. /% = . * < > & ^ # ( ) { } [ ] , : ;")]
    assert kinds == [
        "IDENT",
        "..",
        "IDENT",
        "->",
        "=>",
        "==",
        "*.",
        "/%",
        "=",
        ".",
        "*",
        "<",
        ">",
        "&",
        "^",
        "#",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        ";",
    ]


def test_integers_decimal_leading_zeros_and_u64():
    diags = Diagnostics(Source("t", "007 18446744073709551615"))
    toks = tokenize(Source("t", "007 18446744073709551615"), diags)
    assert [t.value for t in toks[:-1]] == [7, 2**64 - 1]


def test_comments_and_newlines_are_not_tokens():
    assert lex("a // b c\n  d") == [("IDENT", "a"), ("IDENT", "d")]


def test_token_positions_are_1_based():
    diags = Diagnostics(Source("t", "a\n  bc"))
    toks = tokenize(Source("t", "a\n  bc"), diags)
    assert [(t.pos.line, t.pos.col) for t in toks] == [(1, 1), (2, 3), (2, 5)]


def test_asm_token_with_annotation_and_braces():
    diags = Diagnostics(Source("t", "asm(triton, -2) {\n  pop 1\n { nested }\n}\nx"))
    toks = tokenize(Source("t", "asm(triton, -2) {\n  pop 1\n { nested }\n}\nx"), diags)
    assert toks[0].kind == "ASM"
    assert toks[0].value == AsmBody("triton", -2, ("pop 1", "{ nested }"))
    assert (toks[1].kind, toks[1].pos.line) == ("IDENT", 5)
    assert lex("asm { nop }") == [("ASM", "asm")]


@pytest.mark.parametrize(
    "src, line, col, message",
    [
        ("module t\nfn f(a: Field, b: Field) -> Field { a - b }", 2, 39, "no subtraction operator"),
        ("module t\nfn f() { let x = 4 / 2 }", 2, 20, "no division operator"),
        ("module t\n/* block */", 2, 1, "no division operator"),
        ("module t\nfn f() -> Field { 0x1F }", 2, 19, "hex literals are not supported"),
        ("module t\nfn f() -> Field { 18446744073709551616 }", 2, 19, "too large"),
        ('module t\nfn f() { let s = "x" }', 2, 18, "unexpected character '\"'"),
        ("module t\nfn f() { let a = 1 | 2 }", 2, 20, "unexpected character '|'"),
        ("module t\nfn f() { asm(triton pop 1 }", 2, 10, "missing ')'"),
        ("module t\nfn f() { asm nop }", 2, 10, "expected '{' after 'asm'"),
        ("module t\nfn f() { asm { nop ", 2, 10, "unterminated asm body"),
    ],
)
def test_lexer_errors_with_position(src, line, col, message):
    err = error_of(src)
    assert (err.file, err.line, err.col) == ("t.tri", line, col)
    assert message in err.message
    assert str(err).startswith(f"t.tri:{line}:{col}: error: ")


def test_all_lexer_errors_collected_then_stop():
    err = error_of("module t\nfn f() { a - b }\nfn g() { c / d ! }")
    assert [(e.line, e.col) for e in err.errors] == [(2, 12), (3, 12), (3, 16)]
    assert str(err).count("error:") == 3


def test_diagnostic_renders_source_line_and_caret():
    err = error_of("module t\nfn f(a: Field, b: Field) -> Field {\n\ta - b }")
    assert str(err) == (
        "t.tri:3:4: error: there is no subtraction operator '-'\n"
        "  \ta - b }\n"
        "  \t  ^\n"
        "  help: use sub(a, b) (or field.sub) for a - b"
    )
    assert isinstance(err, FrontendError)
    assert err.source_line == "\ta - b }"


def test_call_rule_same_line_is_a_call():
    src = "module t\nfn inc(x: Field) -> Field { x + 1 }\nfn f(x: Field) -> Field { inc(x) }"
    from frontend_util import raw

    assert "Call(inc)" in raw(src, "f")


def test_call_rule_paren_on_next_line_is_not_a_call():
    # `inc` is then a variable (undefined) and `(x)` a new statement (spec §10.24)
    err = error_of(
        "module t\nfn inc(x: Field) -> Field { x }\n"
        "fn f(x: Field) -> Field {\n    let v = inc\n    (x)\n}"
    )
    assert err.errors[0].message == "undefined variable 'inc'"
    assert (err.errors[0].line, err.errors[0].col) == (4, 13)


def test_dotted_path_continues_across_lines():
    src = "module t\nstruct P { x: Field }\nfn f(p: P) -> Field {\n    p\n    .x\n}"
    from frontend_util import raw

    assert raw(src) == "Dup(0) Swap(1) Pop(1)"
