"""Trident parser: tokens to a `File` syntax tree (spec/trident-language.md §2.1, §3, §5).

Recursive descent for items and statements, precedence climbing for the six binary
operator levels. Parse errors are collected one per item (the parser skips to the next
item after an error). CF parse fixes (§5): generic call arguments ``f<N>(..)`` only when
the closing ``>`` is directly followed by ``(`` on the same line (so ``a < b + c`` and
``a < (b)`` are comparisons); no struct literals directly in ``if``/``for``/``match``
heads; assignment targets other than a variable, a field path or a tuple of names are an
error ("unsupported assignment target").
"""

from __future__ import annotations

from tasmopt.frontend import ast as A
from tasmopt.frontend.expressions import ExpressionParser, ParseError
from tasmopt.frontend.lexer import TYPE_KEYWORDS, Token
from tasmopt.frontend.source import Diagnostics, Pos

__all__ = ["parse_tokens", "KNOWN_ATTRIBUTES", "FN_ONLY_ATTRIBUTES"]

KNOWN_ATTRIBUTES = frozenset({"cfg", "intrinsic", "test", "pure", "requires", "ensures"})
FN_ONLY_ATTRIBUTES = frozenset({"intrinsic", "test", "pure", "requires", "ensures"})
_ITEM_START = frozenset({"fn", "pub", "const", "struct", "event", "#"})
#: Deepest block nesting accepted (spec §5).
MAX_NESTING = 256


class _Parser(ExpressionParser):
    """Items, types and statements; expressions come from `ExpressionParser`."""

    # -- file and items ---------------------------------------------------------------------

    def file(self) -> A.File | None:
        tok = self.peek()
        if tok.kind not in ("program", "module"):
            self.diags.error(
                f"expected 'program' or 'module' declaration, found {self.describe(tok)}", tok.pos
            )
            return None
        try:
            self.next()
            name_tok = self.peek()
            if tok.kind == "program":
                name = self.expect("IDENT", "a program name").text
            else:
                name = ".".join(self.dotted("a module name"))
            uses: list[A.Use] = []
            while self.at("use"):
                pos = self.next().pos
                uses.append(A.Use(tuple(self.dotted("a module path")), pos))
            io: list[A.IoDecl] = []
            while self.io_decl_ahead():
                io.append(self.io_decl())
        except ParseError as err:
            self.diags.error(err.message, err.pos, err.help)
            return None
        items: list = []
        while not self.at("EOF"):
            try:
                item = self.item()
                if item is not None:
                    items.append(item)
            except ParseError as err:
                self.diags.error(err.message, err.pos, err.help)
                self.sync_item()
        return A.File(tok.kind, name, name_tok.pos, uses, io, items)

    def sync_item(self) -> None:
        """Skip to the next token that starts an item at the start of a line."""
        self.next()
        while not self.at("EOF"):
            tok = self.peek()
            if tok.kind in _ITEM_START and tok.pos.col == 1:
                return
            self.next()

    def io_decl_ahead(self) -> bool:
        t0, t1, t2 = self.peek(), self.peek(1), self.peek(2)
        if t1.kind != "IDENT" or t2.kind != ":":
            return False
        return (t0.kind == "pub" and t1.text in ("input", "output")) or (
            t0.kind == "sec" and t1.text in ("input", "ram")
        )

    def io_decl(self) -> A.IoDecl:
        first = self.next()
        what = self.next().text
        self.expect(":")
        kind = f"{first.kind} {what}"
        if kind != "sec ram":
            return A.IoDecl(kind, self.type(), [], first.pos)
        self.expect("{")
        slots: list[tuple[int, A.TypeExpr]] = []
        while not self.at("}"):
            addr = self.expect("INT", "a RAM address")
            self.expect(":")
            slots.append((int(addr.value), self.type()))  # type: ignore[arg-type]  # an INT token's value is its int
            if not self.accept(","):
                break
        self.expect("}")
        return A.IoDecl(kind, None, slots, first.pos)

    def item(self) -> A.ConstItem | A.StructItem | A.EventItem | A.FnItem | None:
        attrs = self.attributes()
        pub = self.accept("pub") is not None
        tok = self.peek()
        if tok.kind == "fn":
            return self.fn_item(attrs, pub)
        for attr in attrs:
            if attr.name in FN_ONLY_ATTRIBUTES:
                raise ParseError(
                    f"attribute '#[{attr.name}]' is only allowed on functions", attr.pos
                )
        if tok.kind == "const":
            self.next()
            name = self.expect("IDENT", "a constant name")
            self.expect(":")
            ty = self.type()
            self.expect("=")
            return A.ConstItem(name.text, ty, self.expr(), name.pos, pub, attrs)
        if tok.kind in ("struct", "event"):
            self.next()
            name = self.expect("IDENT", f"a {tok.kind} name")
            fields = self.field_decls()
            cls = A.StructItem if tok.kind == "struct" else A.EventItem
            return cls(name.text, fields, name.pos, pub, attrs)
        help_ = None
        if tok.kind == "use":
            help_ = "'use' declarations must come directly after the program/module header"
        elif tok.kind == "#" and pub:
            help_ = "attributes go before 'pub': #[...] pub fn"
        raise ParseError(f"expected item, found {self.describe(tok)}", tok.pos, help_)

    def attributes(self) -> list[A.Attribute]:
        attrs: list[A.Attribute] = []
        while self.at("#"):
            pos = self.next().pos
            self.expect("[")
            name = self.expect("IDENT", "an attribute name")
            if name.text not in KNOWN_ATTRIBUTES:
                raise ParseError(
                    f"unknown attribute '{name.text}'",
                    name.pos,
                    "known: " + ", ".join(sorted(KNOWN_ATTRIBUTES)),
                )
            arg: str | None = None
            if self.accept("("):
                parts, depth = [], 1
                while True:
                    tok = self.peek()
                    if tok.kind == "EOF":
                        raise ParseError("expected ')' to close the attribute", tok.pos)
                    if tok.kind == "(":
                        depth += 1
                    elif tok.kind == ")":
                        depth -= 1
                        if depth == 0:
                            self.next()
                            break
                    parts.append(self.next().text)
                arg = " ".join(parts)
            self.expect("]")
            attrs.append(A.Attribute(name.text, arg, pos))
        return attrs

    def field_decls(self) -> list[A.FieldDecl]:
        self.expect("{")
        fields: list[A.FieldDecl] = []
        while not self.at("}"):
            pub = self.accept("pub") is not None
            name = self.expect("IDENT", "a field name")
            self.expect(":")
            fields.append(A.FieldDecl(name.text, self.type(), name.pos, pub))
            if not self.accept(","):
                break
        self.expect("}")
        return fields

    def fn_item(self, attrs: list[A.Attribute], pub: bool) -> A.FnItem:
        self.expect("fn")
        name = self.expect("IDENT", "a function name")
        generics: list[tuple[str, Pos]] = []
        if self.accept("<"):
            while True:
                g = self.expect("IDENT", "a size parameter")
                generics.append((g.text, g.pos))
                if not self.accept(","):
                    break
            self.expect(">")
        self.expect("(")
        params: list[A.Param] = []
        while not self.at(")"):
            p = self.expect("IDENT", "a parameter name")
            self.expect(":")
            params.append(A.Param(p.text, self.type(), p.pos))
            if not self.accept(","):
                break
        self.expect(")")
        ret = self.type() if self.accept("->") else None
        body = self.block() if self.at("{") else None
        return A.FnItem(name.text, generics, params, ret, body, name.pos, pub, attrs)

    # -- types ------------------------------------------------------------------------------

    def type(self) -> A.TypeExpr:
        tok = self.peek()
        if tok.kind in TYPE_KEYWORDS:
            self.next()
            return A.PrimT(tok.kind, tok.pos)
        if tok.kind == "[":
            self.next()
            elem = self.type()
            self.expect(";")
            size = self.size()
            self.expect("]")
            return A.ArrayT(elem, size, tok.pos)
        if tok.kind == "(":
            self.next()
            elems = [self.type()]
            while self.accept(","):
                if self.at(")"):
                    break
                elems.append(self.type())
            self.expect(")")
            return A.TupleT(elems, tok.pos)
        if tok.kind == "IDENT":
            return A.NamedT(tuple(self.dotted("a type name")), tok.pos)
        raise ParseError(f"expected type, found {self.describe(tok)}", tok.pos)

    def size(self) -> A.SizeExpr:
        lhs = self.size_term()
        while self.at("+"):
            pos = self.next().pos
            lhs = A.SizeBin("+", lhs, self.size_term(), pos)
        return lhs

    def size_term(self) -> A.SizeExpr:
        lhs = self.size_atom()
        while self.at("*"):
            pos = self.next().pos
            lhs = A.SizeBin("*", lhs, self.size_atom(), pos)
        return lhs

    def size_atom(self) -> A.SizeExpr:
        tok = self.peek()
        if tok.kind == "INT":
            self.next()
            return A.SizeLit(int(tok.value), tok.pos)  # type: ignore[arg-type]  # an INT token's value is its int
        if tok.kind == "IDENT":
            self.next()
            return A.SizeName(tok.text, tok.pos)
        if tok.kind == "(":
            self.next()
            inner = self.size()
            self.expect(")")
            return inner
        raise ParseError(f"expected array size, found {self.describe(tok)}", tok.pos)

    # -- blocks and statements --------------------------------------------------------------

    def block(self) -> A.Block:
        open_ = self.expect("{")
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ParseError(f"nesting depth exceeded (more than {MAX_NESTING} blocks)", open_.pos)
        stmts: list[A.Stmt] = []
        tail: A.Expr | None = None
        while not self.at("}"):
            tok = self.peek()
            if tok.kind == "EOF":
                raise ParseError("expected '}', found end of file", tok.pos)
            stmt = self.statement()
            if isinstance(stmt, A.ExprStmt) and self.at("}"):
                tail = stmt.expr
                break
            stmts.append(stmt)
        self.expect("}")
        self.depth -= 1
        return A.Block(stmts, tail, open_.pos)

    def statement(self) -> A.Stmt:
        tok = self.peek()
        kind = tok.kind
        if kind == "let":
            return self.let_stmt()
        if kind == "if":
            return self.if_stmt()
        if kind == "for":
            return self.for_stmt()
        if kind == "return":
            self.next()
            value = None if self.at("}") else self.expr()
            return A.ReturnStmt(tok.pos, value)
        if kind in ("reveal", "seal"):
            self.next()
            name = self.expect("IDENT", "an event name")
            return A.EventStmt(tok.pos, kind, name.text, name.pos, self.field_inits())
        if kind == "match":
            return self.match_stmt()
        if kind == "ASM":
            self.next()
            return A.AsmStmt(tok.pos, tok.value)  # type: ignore[arg-type]  # an ASM token's value is its text
        expr = self.expr()
        if self.at("="):
            eq = self.next()
            return self.assignment(expr, eq, self.expr())
        return A.ExprStmt(tok.pos, expr)

    def assignment(self, target: A.Expr, eq: Token, value: A.Expr) -> A.AssignStmt:
        if isinstance(target, A.PathExpr):
            return A.AssignStmt(target.pos, [target], False, value)
        if isinstance(target, A.TupleExpr) and all(
            isinstance(e, A.Wildcard) or (isinstance(e, A.PathExpr) and len(e.segments) == 1)
            for e in target.elems
        ):
            return A.AssignStmt(target.pos, list(target.elems), True, value)
        raise ParseError(
            "unsupported assignment target",
            target.pos,
            "assign to a variable, a struct field path (p.x) or a tuple of names ((a, b) = ...)",
        )

    def let_stmt(self) -> A.LetStmt:
        pos = self.expect("let").pos
        mutable = self.accept("mut") is not None
        names: list[tuple[str, Pos]] = []
        is_tuple = False
        if self.accept("("):
            is_tuple = True
            while True:
                names.append(self.pattern_name())
                if not self.accept(","):
                    break
            self.expect(")")
        else:
            names.append(self.pattern_name())
        ann = self.type() if self.accept(":") else None
        self.expect("=")
        return A.LetStmt(pos, mutable, names, is_tuple, ann, self.expr())

    def pattern_name(self) -> tuple[str, Pos]:
        tok = self.peek()
        if tok.kind in ("IDENT", "_"):
            self.next()
            return tok.text, tok.pos
        raise ParseError(f"expected identifier, found {self.describe(tok)}", tok.pos)

    def if_stmt(self) -> A.IfStmt:
        pos = self.expect("if").pos
        cond = self.expr(no_struct=True)
        then = self.block()
        els: A.Block | None = None
        if self.accept("else"):
            if self.at("if"):
                inner = self.if_stmt()
                els = A.Block([inner], None, inner.pos)
            else:
                els = self.block()
        return A.IfStmt(pos, cond, then, els)

    def for_stmt(self) -> A.ForStmt:
        pos = self.expect("for").pos
        tok = self.peek()
        if tok.kind not in ("IDENT", "_"):
            raise ParseError(f"expected identifier, found {self.describe(tok)}", tok.pos)
        self.next()
        self.expect("in")
        start = self.expr(no_struct=True)
        self.expect("..")
        end = self.expr(no_struct=True)
        bound = None
        if self.accept("bounded"):
            bound = int(self.expect("INT", "a loop bound").value)  # type: ignore[arg-type]  # an INT token's value is its int
        body = self.block()
        return A.ForStmt(
            pos, tok.text if tok.kind == "IDENT" else None, tok.pos, start, end, bound, body
        )

    def match_stmt(self) -> A.MatchStmt:
        pos = self.expect("match").pos
        scrutinee = self.expr(no_struct=True)
        self.expect("{")
        arms: list[A.MatchArm] = []
        while not self.at("}"):
            tok = self.peek()
            if tok.kind == "INT":
                self.next()
                pattern: object = int(tok.value)  # type: ignore[arg-type]  # an INT token's value is its int
            elif tok.kind in ("true", "false"):
                self.next()
                pattern = tok.kind == "true"
            elif tok.kind == "_":
                self.next()
                pattern = "_"
            elif tok.kind == "IDENT":
                path = tuple(self.dotted("a struct name"))
                pattern = ("struct", path, self.field_inits(pattern=True))
            else:
                raise ParseError(f"expected match pattern, found {self.describe(tok)}", tok.pos)
            self.expect("=>")
            arms.append(A.MatchArm(pattern, tok.pos, self.block()))
            self.accept(",")
        self.expect("}")
        return A.MatchStmt(pos, scrutinee, arms)


def parse_tokens(tokens: list[Token], diags: Diagnostics) -> A.File | None:
    """Parse one file's tokens; errors go to ``diags`` (one per failing item).

    Returns None when the header itself does not parse.
    """
    return _Parser(tokens, diags).file()
