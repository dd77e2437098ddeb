"""Expression parsing for Trident (spec/trident-language.md §5): token helpers, precedence
climbing over the six operator levels, primaries with the call rule (§1) and the CF rules
for generic arguments and struct literals.
"""

from __future__ import annotations

from tasmopt.frontend import ast as A
from tasmopt.frontend.lexer import Token
from tasmopt.frontend.source import Diagnostics, Pos

__all__ = ["ParseError", "ExpressionParser", "BINARY_PRECEDENCE"]

#: Binary operators and their level, loosest (1) to tightest (6); all left-associative.
BINARY_PRECEDENCE = {"==": 1, "<": 2, "+": 3, "*": 4, "*.": 4, "&": 5, "^": 5, "/%": 6}


class ParseError(Exception):
    """A parse error at a position (caught per item by the parser)."""

    def __init__(self, message: str, pos: Pos, help: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.help = help


class ExpressionParser:
    """Token cursor and expression grammar; `tasmopt.frontend.parser` adds the rest."""

    def __init__(self, tokens: list[Token], diags: Diagnostics) -> None:
        self.tokens = tokens
        self.i = 0
        self.diags = diags
        self.depth = 0

    # -- cursor -----------------------------------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def at(self, kind: str) -> bool:
        return self.peek().kind == kind

    def next(self) -> Token:
        tok = self.peek()
        if tok.kind != "EOF":
            self.i += 1
        return tok

    def accept(self, kind: str) -> Token | None:
        return self.next() if self.at(kind) else None

    def expect(self, kind: str, what: str | None = None) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            wanted = what or ("identifier" if kind == "IDENT" else f"'{kind}'")
            raise ParseError(f"expected {wanted}, found {self.describe(tok)}", tok.pos)
        return self.next()

    @staticmethod
    def describe(tok: Token) -> str:
        if tok.kind == "EOF":
            return "end of file"
        if tok.kind == "IDENT":
            return f"identifier '{tok.text}'"
        if tok.kind == "INT":
            return f"integer '{tok.text}'"
        if tok.kind == "ASM":
            return "asm block"
        return f"'{tok.text}'"

    def dotted(self, what: str) -> list[str]:
        """``IDENT ("." IDENT)*``; the path may continue across lines."""
        parts = [self.expect("IDENT", what).text]
        while self.at(".") and self.peek(1).kind == "IDENT":
            self.next()
            parts.append(self.next().text)
        return parts

    # -- expressions ------------------------------------------------------------------------

    def expr(self, no_struct: bool = False) -> A.Expr:
        """An expression; ``no_struct`` forbids struct literals at its top level (heads of
        ``if``/``for``/``match``)."""
        return self.binary(1, no_struct)

    def binary(self, min_prec: int, no_struct: bool) -> A.Expr:
        lhs = self.postfix(no_struct)
        while True:
            tok = self.peek()
            prec = BINARY_PRECEDENCE.get(tok.kind)
            if prec is None or prec < min_prec:
                return lhs
            self.next()
            rhs = self.binary(prec + 1, no_struct)
            lhs = A.BinExpr(tok.pos, op=tok.kind, lhs=lhs, rhs=rhs)

    def postfix(self, no_struct: bool) -> A.Expr:
        expr = self.primary(no_struct)
        while self.at("["):
            self.next()
            index = self.expr()
            self.expect("]")
            expr = A.IndexExpr(expr.pos, base=expr, index=index)
        return expr

    def primary(self, no_struct: bool) -> A.Expr:
        tok = self.peek()
        kind = tok.kind
        if kind == "INT":
            self.next()
            return A.IntLit(tok.pos, value=int(tok.value))  # type: ignore[arg-type]  # an INT token's value is its int
        if kind in ("true", "false"):
            self.next()
            return A.BoolLit(tok.pos, value=kind == "true")
        if kind == "_":
            self.next()
            return A.Wildcard(tok.pos)
        if kind == "(":
            return self.paren()
        if kind == "[":
            self.next()
            elems: list[A.Expr] = []
            while not self.at("]"):
                elems.append(self.expr())
                if not self.accept(","):
                    break
            self.expect("]")
            return A.ArrayExpr(tok.pos, elems=elems)
        if kind == "IDENT":
            return self.path_expr(no_struct)
        if kind == "{":
            raise ParseError(
                "expected expression, found '{'", tok.pos, "Trident has no block expressions"
            )
        raise ParseError(f"expected expression, found {self.describe(tok)}", tok.pos)

    def paren(self) -> A.Expr:
        open_ = self.next()
        first = self.expr()
        if not self.at(","):
            self.expect(")")
            return first
        elems = [first]
        while self.accept(","):
            if self.at(")"):
                break
            elems.append(self.expr())
        close = self.expect(")")
        if len(elems) < 2:
            raise ParseError("a tuple needs at least two elements", close.pos)
        return A.TupleExpr(open_.pos, elems=elems)

    def path_expr(self, no_struct: bool) -> A.Expr:
        first = self.peek()
        segments = tuple(self.dotted("identifier"))
        last_line = self.tokens[self.i - 1].end_line
        generics: list[A.SizeExpr] = []
        if self.at("<"):
            parsed = self.try_generics()
            if parsed is not None:
                generics, last_line = parsed
        tok = self.peek()
        if tok.kind == "(" and tok.line == last_line:
            self.next()
            args: list[A.Expr] = []
            while not self.at(")"):
                args.append(self.expr())
                if not self.accept(","):
                    break
            self.expect(")")
            return A.CallExpr(first.pos, segments=segments, generics=generics, args=args)
        if not no_struct and segments[-1][0].isupper() and self.struct_ahead():
            return A.StructLit(first.pos, segments=segments, fields=self.field_inits())
        return A.PathExpr(first.pos, segments=segments)

    def try_generics(self) -> tuple[list[A.SizeExpr], int] | None:
        """``<size, ...>`` directly followed by ``(`` on the same line, else None (and the
        cursor is left at ``<``: it is a less-than)."""
        save = self.i
        try:
            self.next()
            sizes = [self.size()]  # type: ignore[attr-defined]  # mixin: Parser provides size()
            while self.accept(","):
                sizes.append(self.size())  # type: ignore[attr-defined]  # mixin: Parser provides size()
            close = self.expect(">")
        except ParseError:
            self.i = save
            return None
        nxt = self.peek()
        if nxt.kind == "(" and nxt.line == close.line:
            return sizes, close.line
        self.i = save
        return None

    def struct_ahead(self) -> bool:
        """At ``{`` followed by ``}`` or by ``IDENT`` then ``:``/``,``/``}`` (spec §5)."""
        if not self.at("{"):
            return False
        t1, t2 = self.peek(1), self.peek(2)
        return t1.kind == "}" or (t1.kind == "IDENT" and t2.kind in (":", ",", "}"))

    def field_inits(self, pattern: bool = False) -> list[tuple[str, A.Expr, Pos]]:
        """``{ f: e, g, ... }`` (``g`` alone means ``g: g``); in a match pattern the values
        are only names or literals."""
        self.expect("{")
        fields: list[tuple[str, A.Expr, Pos]] = []
        while not self.at("}"):
            name = self.expect("IDENT", "a field name")
            if self.accept(":"):
                if pattern:
                    value = self.primary(no_struct=True)
                    bad = not isinstance(value, A.PathExpr | A.IntLit | A.BoolLit | A.Wildcard)
                    if bad or self.peek().kind not in (",", "}"):
                        raise ParseError(
                            "bad field pattern: expected a name or a literal",
                            value.pos if bad else self.peek().pos,
                        )
                else:
                    value = self.expr()
            else:
                value = A.PathExpr(name.pos, segments=(name.text,))
            fields.append((name.text, value, name.pos))
            if not self.accept(","):
                break
        self.expect("}")
        return fields
