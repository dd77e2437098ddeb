"""Trident lexer: source text to tokens, with every lexical error collected
(spec/trident-language.md §1).

Token kinds are the keyword or symbol text itself (``"let"``, ``"/%"``), or ``IDENT``,
``INT``, ``ASM`` (the whole ``asm(...) { ... }`` block) and ``EOF``. Newlines are not
tokens; each token carries its line so the parser can apply the call rule (§1).
"""

from __future__ import annotations

from dataclasses import dataclass

from tasmopt.frontend.source import Diagnostics, Pos, Source

__all__ = ["Token", "AsmBody", "KEYWORDS", "TYPE_KEYWORDS", "tokenize"]

KEYWORDS = frozenset(
    {
        "program",
        "module",
        "use",
        "fn",
        "pub",
        "sec",
        "let",
        "mut",
        "const",
        "struct",
        "if",
        "else",
        "for",
        "in",
        "bounded",
        "return",
        "true",
        "false",
        "event",
        "reveal",
        "seal",
        "match",
    }
)
TYPE_KEYWORDS = frozenset({"Field", "XField", "Bool", "U32", "Digest"})

#: Two-character symbols, matched before single ones (longest match).
_SYMBOLS2 = ("..", "->", "=>", "==", "*.", "/%")
_SYMBOLS1 = "(){}[],:;.=+*<>&^#"
_WHITESPACE = " \t\n\r\f"
U64_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class AsmBody:
    """The parts of an ``asm`` token: target tag (or None), declared stack effect, raw lines."""

    target: str | None
    effect: int
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Token:
    """One token.

    Attributes:
        kind: keyword/symbol text, or ``IDENT``, ``INT``, ``ASM``, ``EOF``.
        text: the source text (for ``ASM`` just ``asm``).
        pos: line and column of the first character.
        end_line: line of the last character (differs from ``pos.line`` only for ``ASM``).
        value: the integer of an ``INT`` token, the `AsmBody` of an ``ASM`` token.
    """

    kind: str
    text: str
    pos: Pos
    end_line: int
    value: int | AsmBody | None = None

    @property
    def line(self) -> int:
        return self.pos.line


class _Lexer:
    def __init__(self, source: Source, diags: Diagnostics) -> None:
        self.src = source.text
        self.diags = diags
        self.i = 0
        self.line = 1
        self.line_start = 0
        self.tokens: list[Token] = []

    def pos(self, i: int | None = None) -> Pos:
        i = self.i if i is None else i
        return Pos(self.line, i - self.line_start + 1)

    def advance_to(self, j: int) -> None:
        """Move to index j, keeping line bookkeeping for newlines passed over."""
        while self.i < j:
            if self.src[self.i] == "\n":
                self.line += 1
                self.line_start = self.i + 1
            self.i += 1

    def add(self, kind: str, text: str, pos: Pos, value: int | AsmBody | None = None) -> None:
        self.tokens.append(Token(kind, text, pos, self.line, value))

    def run(self) -> list[Token]:
        src, n = self.src, len(self.src)
        while self.i < n:
            c = src[self.i]
            if c in _WHITESPACE:
                self.advance_to(self.i + 1)
            elif src.startswith("//", self.i):
                end = src.find("\n", self.i)
                self.i = n if end < 0 else end
            elif c.isascii() and (c.isalpha() or c == "_"):
                self.word()
            elif c.isascii() and c.isdigit():
                self.number()
            else:
                self.symbol(c)
        self.add("EOF", "", self.pos())
        return self.tokens

    def word(self) -> None:
        src, start = self.src, self.i
        j = start
        while j < len(src) and src[j].isascii() and (src[j].isalnum() or src[j] == "_"):
            j += 1
        text = src[start:j]
        pos = self.pos()
        self.i = j
        if text == "asm":
            self.asm(pos)
        elif text == "_":
            self.add("_", text, pos)
        elif text in KEYWORDS or text in TYPE_KEYWORDS:
            self.add(text, text, pos)
        else:
            self.add("IDENT", text, pos)

    def number(self) -> None:
        src, start = self.src, self.i
        pos = self.pos()
        j = start
        while j < len(src) and src[j].isdigit() and src[j].isascii():
            j += 1
        text = src[start:j]
        if text == "0" and j < len(src) and src[j] in "xX":
            k = j + 1
            while k < len(src) and src[k].isascii() and (src[k].isalnum() or src[k] == "_"):
                k += 1
            self.diags.error(
                f"hex literals are not supported: '{src[start:k]}'",
                pos,
                help="write the value in decimal",
            )
            self.i = k
            return
        self.i = j
        value = int(text)
        if value > U64_MAX:
            self.diags.error(f"integer literal '{text}' is too large (more than 2^64 - 1)", pos)
            value = 0
        self.add("INT", text, pos, value)

    def symbol(self, c: str) -> None:
        src, pos = self.src, self.pos()
        two = src[self.i : self.i + 2]
        if two in _SYMBOLS2:
            self.add(two, two, pos)
            self.i += 2
        elif c in _SYMBOLS1:
            self.add(c, c, pos)
            self.i += 1
        elif c == "-":
            self.diags.error(
                "there is no subtraction operator '-'",
                pos,
                help="use sub(a, b) (or field.sub) for a - b",
            )
            self.i += 1
        elif c == "/":
            self.diags.error(
                "there is no division operator '/'",
                pos,
                help="use a /% b for (quotient, remainder) of U32 values",
            )
            self.i += 1
        else:
            shown = c if c.isprintable() and c.isascii() else f"U+{ord(c):04X}"
            self.diags.error(f"unexpected character '{shown}'", pos)
            self.i += 1

    def asm(self, pos: Pos) -> None:
        """``asm``, an optional ``( target? ,? ±N? )`` annotation, a brace-balanced body."""
        src, n = self.src, len(self.src)
        self.skip_space()
        target: str | None = None
        effect = 0
        if self.i < n and src[self.i] == "(":
            close = src.find(")", self.i)
            if close < 0 or "{" in src[self.i : close]:
                self.diags.error("missing ')' after the asm annotation", pos)
                return
            effect, target = self.asm_annotation(src[self.i + 1 : close], pos)
            self.advance_to(close + 1)
            self.skip_space()
        if self.i >= n or src[self.i] != "{":
            self.diags.error("expected '{' after 'asm'", pos)
            return
        depth, j = 0, self.i
        while j < n:
            if src[j] == "{":
                depth += 1
            elif src[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:
            self.diags.error("unterminated asm body (missing '}')", pos)
            self.advance_to(n)
            return
        body = src[self.i + 1 : j]
        lines = tuple(line.strip() for line in body.split("\n") if line.strip())
        self.advance_to(j + 1)
        self.add("ASM", "asm", pos, AsmBody(target, effect, lines))

    def asm_annotation(self, text: str, pos: Pos) -> tuple[int, str | None]:
        effect, target = 0, None
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            if part[0] in "+-" and part[1:].isdigit():
                effect = int(part)
            elif part.isidentifier():
                target = part
            else:
                self.diags.error(
                    f"malformed asm annotation '{part}'",
                    pos,
                    help="write asm(target), asm(+N), asm(-N) or asm(target, +N)",
                )
        return effect, target

    def skip_space(self) -> None:
        while self.i < len(self.src) and self.src[self.i] in _WHITESPACE:
            self.advance_to(self.i + 1)


def tokenize(source: Source, diags: Diagnostics) -> list[Token]:
    """Tokens of ``source`` (ending with ``EOF``); errors go to ``diags`` and lexing goes on.

    Errors (spec §1): unexpected character, lone ``-``/``/``, integer literal too large,
    hex literal (CF), asm missing ``)``/``{``, unterminated asm body.
    """
    return _Lexer(source, diags).run()
