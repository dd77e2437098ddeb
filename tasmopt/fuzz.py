"""Differential fuzzing of the whole compile (issue 33; the approach of Csmith and YARPGen for
C compilers: random well-typed programs, compiled, run against a reference, differences
minimized).

`generate` writes a random Trident ``program`` (spec/trident-language.md) from one of several
*families*: plain arithmetic with helper calls at several stack depths, branches on rare
("magic") values and asserts that fail on one input; RAM loops that look like the library
idioms the function-level passes rewrite, each with a variant that differs from the idiom in
one detail (an inner product whose arrays alias or overlap or whose accumulator is written
back inside the loop, an order-dependent accumulation, a copy between overlapping arrays, a
reversed walk, an absorb loop with a word out of place or a write in between, a search that
exits on a magic value); u32 arithmetic (``<``, ``/%``, ``&``, ``^``); hashing and the
sponge; extension-field arithmetic; ``divine``.

`check` compiles it with our frontend, then optimizes the TIR with every pass on
(`tasmopt.optimizer.compile`, rules and search), and runs the optimized TASM and the
unoptimized lowering of the same TIR (the reference) in the simulator on random inputs and
on inputs that take the rare paths (the program's magic values, lengths 0 and 1, aliasing
addresses). Observable: whether the run fails and, for a run that halts, the public output
and RAM below the compiler's scratch region (design §2; the scratch cells from 2^29 up are
private; a failing run's partial output proves nothing). A
difference is a `Finding`; `minimize` deletes statements while the difference stays.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tasmopt.errors import FrontendError
from tasmopt.isa import P
from tasmopt.report import CompileOptions, CompileResult

__all__ = [
    "FAMILIES",
    "FuzzProgram",
    "Finding",
    "Outcome",
    "generate",
    "input_sets",
    "check",
    "minimize",
    "compile_program",
    "SCRATCH_START",
]

#: Program families (`generate`); each run of the fuzzer cycles through them.
FAMILIES = (
    "arith",
    "calls",
    "sum",
    "dot",
    "copy",
    "reverse",
    "memset",
    "absorb",
    "xdot",
    "search",
    "u32",
    "early",
    "unroll",
    "chain",
    "hash",
    "xfield",
    "wide",
)

#: First address of the compiler's private scratch regions (design §2): left out of the
#: RAM comparison.
SCRATCH_START = 1 << 29

_MINUS_ONE = P - 1

#: The corpus (`corpus/` of the checkout): library modules a program may import.
CORPUS = Path(__file__).resolve().parents[1] / "corpus"


@dataclass(frozen=True)
class FuzzProgram:
    """One generated program.

    Attributes:
        seed, family: what generated it (`generate`).
        header: helper functions and ``fn main() {`` with the input reads.
        body: the statements of ``main``, one string each (`minimize` deletes them).
        inputs: the kind of each public input, in read order: ``addr`` (a small RAM
            address), ``len`` (a loop length, 0..8), ``u32``, ``val`` (a field element).
        secrets: secret inputs ``divine`` reads.
        magic: the rare values its branches and asserts compare against.
        spill: the frontend's spill policy (``next-use``, the CLI's default, on three
            seeds of four; ``lru``, upstream's, on the fourth).
    """

    seed: int
    family: str
    header: tuple[str, ...]
    body: tuple[str, ...]
    inputs: tuple[str, ...]
    secrets: int
    magic: tuple[int, ...]
    spill: str = "next-use"

    @property
    def source(self) -> str:
        return "\n".join((*self.header, *self.body, "}", ""))


@dataclass
class Finding:
    """A program and inputs on which the optimized program and the reference differ."""

    program: FuzzProgram
    public: list[int]
    secret: list[int]
    reference: tuple[Any, ...]
    optimized: tuple[Any, ...]
    tasm: str = ""


@dataclass
class Outcome:
    """What `check` saw on one program.

    Attributes:
        compiled: the frontend accepted it (a generator bug otherwise: ``error`` says why).
        runs: input sets compared; ``failing``: of them, runs where the reference failed.
        findings: differences (empty: none).
        rewrites: function-level passes whose rewrite was kept (`FunctionReport.rewrites`),
            counted; ``blocks``: straight-line blocks rewritten, by candidate source.
        cycles, baseline_cycles: of the measured functions (`CompileResult`).
    """

    compiled: bool
    error: str | None = None
    runs: int = 0
    failing: int = 0
    findings: list[Finding] = field(default_factory=list)
    rewrites: Counter[str] = field(default_factory=Counter)
    blocks: Counter[str] = field(default_factory=Counter)
    cycles: int = 0
    baseline_cycles: int = 0
    seconds: float = 0.0


# -- generation -------------------------------------------------------------------------------


class _Gen:
    def __init__(self, seed: int, family: str) -> None:
        self.rng = random.Random(seed * 7_919 + FAMILIES.index(family))
        self.family = family
        self.n = 0
        self.inputs: list[str] = []
        self.reads: list[str] = []
        self.secrets = 0
        self.magic: list[int] = []
        self.fields: list[str] = []  # Field variables in scope in main
        self.helpers: list[tuple[str, int]] = []
        self.header: list[str] = []
        self.uses: set[str] = set()  # corpus modules imported (`CORPUS`)

    def fresh(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def read(self, kind: str) -> str:
        name = self.fresh({"addr": "a", "len": "n", "u32": "u", "val": "x"}[kind])
        self.inputs.append(kind)
        if kind in ("len", "u32"):
            self.reads.append(f"    let {name} = as_u32(pub_read())")
        else:
            self.reads.append(f"    let {name} = pub_read()")
            if kind == "val":
                self.fields.append(name)
        return name

    def secret(self) -> str:
        name = self.fresh("s")
        self.secrets += 1
        self.reads.append(f"    let {name} = divine()")
        self.fields.append(name)
        return name

    def magic_value(self) -> int:
        m = self.rng.choice((7, 12345, 2**32 - 1, P - 1, self.rng.randrange(1, 10**6)))
        self.magic.append(m)
        return m

    def expr(self, depth: int = 0) -> str:
        r = self.rng.random()
        if depth > 2 or r < 0.3 or not self.fields:
            if self.fields and r < 0.7:
                return self.rng.choice(self.fields)
            return str(self.rng.randrange(0, 40))
        if self.helpers and r < 0.45:
            name, arity = self.rng.choice(self.helpers)
            return f"{name}({', '.join(self.expr(depth + 1) for _ in range(arity))})"
        op = self.rng.choice(("+", "*", "+"))
        return f"({self.expr(depth + 1)} {op} {self.expr(depth + 1)})"

    def helper(self) -> None:
        """A helper whose result depends on its arguments' order (calls at any depth)."""
        name = self.fresh("h")
        arity = self.rng.randrange(1, 4)
        params = [f"p{k}" for k in range(arity)]
        terms = [f"{p} * {self.rng.randrange(2, 9)}" for p in params]
        body = " + ".join(terms) + f" + {self.rng.randrange(0, 5)}"
        if self.rng.random() < 0.3 and arity >= 2:
            body = f"{params[0]} * {params[1]} + {body}"
        sig = ", ".join(f"{p}: Field" for p in params)
        self.header += [f"fn {name}({sig}) -> Field {{", f"    {body}", "}", ""]
        self.helpers.append((name, arity))

    def straight(self, out: list[str], k: int, indent: str = "    ") -> None:
        """``k`` plain statements: lets, assignments, outputs, magic branches, asserts."""
        for _ in range(k):
            r = self.rng.random()
            if r < 0.3 or not self.fields:
                v = self.fresh()
                out.append(f"{indent}let mut {v} = {self.expr()}")
                self.fields.append(v)
            elif r < 0.45:
                v = self.rng.choice([f for f in self.fields if f.startswith("v")] or [""])
                if v:
                    out.append(f"{indent}{v} = {self.expr()}")
            elif r < 0.7:
                out.append(f"{indent}pub_write({self.expr()})")
            elif r < 0.85:
                x = self.rng.choice(self.fields)
                m = self.magic_value()
                out.append(
                    f"{indent}if {x} == {m} {{ pub_write({self.expr()}) }} "
                    f"else {{ pub_write({self.expr()}) }}"
                )
            else:  # fails exactly on the magic value
                x = self.rng.choice(self.fields)
                m = self.magic_value()
                out.append(f"{indent}if {x} == {m} {{ assert({x} == {(m + 1) % P}) }}")

    # -- families ---------------------------------------------------------------------------
    def build(self) -> list[str]:
        for _ in range(self.rng.randrange(0, 3)):
            self.helper()
        for _ in range(self.rng.randrange(1, 4)):
            self.read("val")
        body: list[str] = []
        getattr(self, "_" + self.family)(body)
        if self.rng.random() < 0.5:
            self.straight(body, self.rng.randrange(1, 4))
        return body

    def _arith(self, body: list[str]) -> None:
        if self.rng.random() < 0.5:
            self.secret()
        self.straight(body, self.rng.randrange(4, 12))

    def _calls(self, body: list[str]) -> None:
        for _ in range(2):
            self.helper()
        self.straight(body, self.rng.randrange(2, 6))
        for _ in range(self.rng.randrange(2, 5)):  # calls nested at several stack depths
            body.append(f"    pub_write({self.expr()} + {self.expr(1)})")

    def _array(self, body: list[str], base: str, n: str, bound: int = 8) -> None:
        """Fill ``base[0..n)`` with values that depend on the index."""
        x, y = self.rng.choice(self.fields), self.rng.choice(self.fields)
        body += [
            f"    for i in 0..{n} bounded {bound} {{",
            f"        ram_write({base} + as_field(i), {x} * as_field(i) + {y})",
            "    }",
        ]

    def _sum(self, body: list[str]) -> None:
        a, n = self.read("addr"), self.read("len")
        self._array(body, a, n)
        acc = self.fresh("acc")
        step = self.rng.choice(
            (
                f"{acc} + ram_read({a} + as_field(i))",
                f"{acc} * 3 + ram_read({a} + as_field(i))",  # order-dependent
                f"{acc} + ram_read({a} + as_field(i)) * as_field(i)",
                f"{acc} * ram_read({a} + as_field(i))",
            )
        )
        body += [f"    let mut {acc} = 0", f"    for i in 0..{n} bounded 8 {{"]
        body += [f"        {acc} = {step}", "    }", f"    pub_write({acc})"]
        self.fields.append(acc)

    def _dot(self, body: list[str]) -> None:
        a, n = self.read("addr"), self.read("len")
        variant = self.rng.choice(("plain", "alias", "overlap", "writeback", "scaled"))
        b = self.read("addr") if variant in ("plain", "writeback", "scaled") else a
        if variant == "overlap":
            b = f"({a} + 1)"
        self._array(body, a, n)
        if b != a and not b.startswith("("):
            self._array(body, b, n)
        acc = self.fresh("acc")
        term = f"ram_read({a} + as_field(i)) * ram_read({b} + as_field(i))"
        if variant == "scaled":
            term = f"{self.rng.choice(self.fields)} * ram_read({b} + as_field(i))"
        body += [f"    let mut {acc} = 0", f"    for i in 0..{n} bounded 8 {{"]
        body.append(f"        {acc} = {acc} + {term}")
        if variant == "writeback":
            body.append(f"        ram_write({a} + as_field(i), {acc})")
        body += ["    }", f"    pub_write({acc})"]
        self.fields.append(acc)

    def _copy(self, body: list[str]) -> None:
        src, n = self.read("addr"), self.read("len")
        dst = self.rng.choice((self.read("addr"), f"{src} + 1", src))
        self._array(body, src, n)
        body += [
            f"    for i in 0..{n} bounded 8 {{",
            f"        ram_write({dst} + as_field(i), ram_read({src} + as_field(i)))",
            "    }",
            f"    pub_write(ram_read({dst}))",
        ]

    def _reverse(self, body: list[str]) -> None:
        a, n = self.read("addr"), self.read("len")
        self._array(body, a, n)
        acc = self.fresh("acc")
        body += [f"    let mut {acc} = 0", f"    for i in 0..{n} bounded 8 {{"]
        body.append(f"        {acc} = {acc} * 5 + ram_read({a} + as_field(i) * {_MINUS_ONE})")
        body += ["    }", f"    pub_write({acc})"]
        self.fields.append(acc)

    def _memset(self, body: list[str]) -> None:
        a, n = self.read("addr"), self.read("len")
        c = self.fresh("c")
        body.append(
            f"    let mut {c} = {self.rng.choice((str(self.rng.randrange(9)), self.expr()))}"
        )
        body += [f"    for i in 0..{n} bounded 8 {{", f"        ram_write({a} + as_field(i), {c})"]
        if self.rng.random() < 0.3:  # not a memset: the value changes
            body.append(f"        {c} = {c} + 1")
        body += ["    }", f"    pub_write(ram_read({a}) + ram_read({a} + 1))"]

    def _absorb(self, body: list[str]) -> None:
        """The library's absorb loop (10 reads of consecutive words, rate word 0 last) in a
        helper of its own, or that loop with a word out of place or a write in between."""
        a, n = self.read("addr"), self.read("len")
        x = self.rng.choice(self.fields)
        words = [f"ram_read(p + {k})" for k in range(9, -1, -1)]
        variant = self.rng.choice(("plain", "plain", "swapped", "write"))
        if variant == "swapped":  # a word out of place
            k = self.rng.randrange(9)
            words[k], words[k + 1] = words[k + 1], words[k]
        loop = [
            "fn absorb_ram(base: Field, chunks: U32) {",
            "    for c in 0..chunks bounded 8 {",
            "        let p = base + as_field(c) * 10",
        ]
        if variant == "write":
            loop.append("        ram_write(p + 3, p)")
        loop += [f"        sponge_absorb({', '.join(words)})", "    }", "}", ""]
        self.header += loop
        body += [
            "    for i in 0..80 {",
            f"        ram_write({a} + as_field(i), {x} + as_field(i) * 3)",
            "    }",
            "    sponge_init()",
            f"    absorb_ram({a}, {n})",
            "    let s = sponge_squeeze()",
            "    pub_write(s[9])",
            "    pub_write(s[5])",
        ]

    def _wide(self, body: list[str]) -> None:
        """A struct of 18-30 fields (more op-stack elements than the 16 reachable ones, and
        with two of them live more than a function check's first witnesses hold) built in
        ``main``, passed to a helper that reads some fields by value and to one that updates
        a field and returns the struct: deep arguments, spills and reloads of adjacent
        cells, and functions whose harness needs a deeper op stack."""
        fields = [f"f{k}" for k in range(self.rng.randrange(18, 31))]
        struct = "Wide" + self.fresh("")
        self.header += [f"struct {struct} {{", *[f"    {f}: Field," for f in fields], "}", ""]
        read = self.rng.sample(fields, k=self.rng.randrange(1, 4))
        terms = " + ".join(f"s.{f} * {self.rng.randrange(1, 9)}" for f in read)
        self.header += [f"fn get(s: {struct}) -> Field {{", f"    {terms}", "}", ""]
        bumped = self.rng.choice(fields)
        lit = ", ".join(f"{f}: s.{f} + x" if f == bumped else f"{f}: s.{f}" for f in fields)
        self.header += [
            f"fn put(s: {struct}, x: Field) -> {struct} {{",
            f"    {struct} {{ {lit} }}",
            "}",
            "",
        ]
        w, u = self.fresh("w"), self.fresh("w")
        values = ", ".join(f"{f}: {self.expr()}" for f in fields)
        body.append(f"    let {w} = {struct} {{ {values} }}")
        body.append(f"    let {u} = put({w}, {self.expr()})")
        body.append(f"    pub_write(get({u}))")
        body.append(f"    pub_write({u}.{self.rng.choice(fields)} + {w}.{bumped})")

    def _xdot(self, body: list[str]) -> None:
        """An inner product of extension-field arrays (X3 structs, 3 words each) in a helper:
        the idiom of ``ext.xpoly.inner_product``, or a base scalar times each element, or one
        detail off (a multiplied accumulator, a stride of 2, a write into an array)."""
        self.uses.add("ext.xarith")
        a, n = self.read("addr"), self.read("len")
        variant = self.rng.choice(("xx", "xx", "xb", "times", "stride", "write"))
        b = self.rng.choice((self.read("addr"), a, f"{a} + 1", f"{a} + 3"))
        term = "xarith.mul(xload(a + off), xload(b + off))"
        if variant == "xb":
            term = "xarith.scale(xload(b + off), ram_read(a + as_field(i)))"
        if variant == "stride":
            term = "xarith.mul(xload(a + as_field(i) * 2), xload(b + off))"
        step = "xarith.mul(acc, " + term + ")" if variant == "times" else f"xarith.add(acc, {term})"
        helper = [
            "fn xload(p: Field) -> xarith.X3 {",
            "    xarith.x3(ram_read(p), ram_read(p + 1), ram_read(p + 2))",
            "}",
            "",
            "fn xdot(a: Field, b: Field, n: U32) -> xarith.X3 {",
            "    let mut acc = xarith.x3(1, 2, 3)"
            if variant == "times"
            else "    let mut acc = xarith.zero()",
            "    for i in 0..n bounded 16 {",
            "        let off = as_field(i) * 3",
            f"        acc = {step}",
        ]
        if variant == "write":
            helper.append("        ram_write(b + off, acc.c0)")
        helper += ["    }", "    acc", "}", ""]
        self.header += helper
        x = self.rng.choice(self.fields)
        r = self.fresh("r")
        body += [
            "    for i in 0..60 {",
            f"        ram_write({a} + as_field(i), {x} * as_field(i) + 5)",
            "    }",
            f"    let {r} = xdot({a}, {b}, {n})",
            f"    pub_write({r}.c0)",
            f"    pub_write({r}.c1)",
            f"    pub_write({r}.c2)",
        ]

    def _search(self, body: list[str]) -> None:
        a, n = self.read("addr"), self.read("len")
        self._array(body, a, n)
        m = self.magic_value()
        found = self.fresh("f")
        body += [f"    let mut {found} = 0", f"    for i in 0..{n} bounded 8 {{"]
        body += [
            f"        if ram_read({a} + as_field(i)) == {m} {{",
            f"            {found} = {found} + as_field(i) + 1",
            "        }",
            "    }",
            f"    pub_write({found})",
        ]

    def _u32(self, body: list[str]) -> None:
        u, w = self.read("u32"), self.read("u32")
        k = self.rng.randrange(1, 40)
        q, r = self.fresh("q"), self.fresh("r")
        body += [
            f"    let ({q}, {r}) = {u} /% as_u32({k})",
            f"    pub_write(as_field({q}) + as_field({r}) * 7)",
            f"    pub_write(as_field({u} & {w}) + as_field({u} ^ {w}))",
            f"    if {u} < {w} {{ pub_write(1) }} else {{ pub_write(2) }}",
        ]

    def _early(self, body: list[str]) -> None:
        """Euclid's algorithm as a counted loop whose body is one guarded branch (it may
        leave once the guard fails), or the guard reading the counter (it may not)."""
        u, w = self.read("u32"), self.read("u32")
        a, b = self.fresh("a"), self.fresh("b")
        guard = self.rng.choice(("as_u32(0) < {b}", "as_u32(0) < {b}", "i < {b}"))
        body += [
            f"    let mut {a} = {u}",
            f"    let mut {b} = {w}",
            "    for i in 0..24 {",
            f"        if {guard.format(b=b)} {{",
            f"            let (q, r) = {a} /% {b}",
            f"            {a} = {b}",
            f"            {b} = r",
            "        }",
            "    }",
            f"    pub_write(as_field({a}))",
        ]

    def _unroll(self, body: list[str]) -> None:
        """A loop with a short constant trip count (unrolled where it pays)."""
        acc = self.fresh("acc")
        k = self.rng.randrange(1, 5)
        x = self.rng.choice(self.fields)
        body += [f"    let mut {acc} = {x}", f"    for i in 0..{k} {{"]
        body.append(
            self.rng.choice(
                (
                    f"        {acc} = {acc} * 2 + {x}",
                    f"        {acc} = {acc} * {acc} + as_field(i)",
                    "        pub_write(as_field(i))",
                )
            )
        )
        body += ["    }", f"    pub_write({acc})"]

    def _chain(self, body: list[str]) -> None:
        """An ``else if`` chain whose first test decides later ones (jump threading)."""
        x = self.rng.choice(self.fields)
        m = self.magic_value()
        tests = [m, m, (m + 1) % P, m, 0]
        self.rng.shuffle(tests)
        lines = [f"    if {x} == {tests[0]} {{ pub_write(1) }}"]
        for k, t in enumerate(tests[1:], 2):
            lines.append(f"    else if {x} == {t} {{ pub_write({k}) }}")
        lines.append(f"    else {{ pub_write({self.expr()}) }}")
        body.append(" ".join(ln.strip() for ln in lines).replace("} else", "} else"))

    def _hash(self, body: list[str]) -> None:
        args = ", ".join(self.expr(1) for _ in range(10))
        d = self.fresh("d")
        names = [self.fresh() for _ in range(5)]
        body += [f"    let {d} = hash({args})", f"    let ({', '.join(names)}) = {d}"]
        body += [f"    pub_write({v})" for v in names[: self.rng.randrange(1, 6)]]

    def _xfield(self, body: list[str]) -> None:
        self.uses.add("ext.xnative")
        f = self.fields
        x, y, z = self.fresh("X"), self.fresh("Y"), self.fresh("Z")
        parts = [self.rng.choice(f) for _ in range(3)]
        body.append(f"    let {x} = xfield({parts[0]}, {parts[1]}, {parts[2]} + 1)")
        body.append(f"    let {y} = {x} *. {self.expr()}")
        if self.rng.random() < 0.5:
            body.append(f"    let {z} = xinvert({y}) *. {self.rng.choice(f)}")
        else:
            body.append(f"    let {z} = {y} *. {self.rng.choice(f)}")
        c = [self.fresh() for _ in range(3)]
        body.append(f"    let ({', '.join(c)}) = xnative.words({z})")
        body += [f"    pub_write({v})" for v in c]


def generate(seed: int, family: str | None = None) -> FuzzProgram:
    """The program of ``seed`` (deterministic); ``family`` defaults to
    ``FAMILIES[seed % len(FAMILIES)]``. Raises ValueError for an unknown family."""
    family = family or FAMILIES[seed % len(FAMILIES)]
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}: one of {', '.join(FAMILIES)}")
    g = _Gen(seed, family)
    body = g.build()
    uses = [f"use {m}" for m in sorted(g.uses)]
    header = ["program fuzz", *uses, "", *g.header, "fn main() {", *g.reads]
    return FuzzProgram(
        seed,
        family,
        tuple(header),
        tuple(body),
        tuple(g.inputs),
        g.secrets,
        tuple(g.magic),
        "lru" if seed % 4 == 3 else "next-use",
    )


# -- inputs -----------------------------------------------------------------------------------


def input_sets(
    prog: FuzzProgram, rng: random.Random, count: int
) -> list[tuple[list[int], list[int]]]:
    """``count`` (public, secret) input lists: the first half random by kind, the rest on the
    rare paths (magic values and their neighbours, lengths 0 and 1, equal addresses)."""
    out = []
    for k in range(count):
        rare = k >= count // 2
        addrs: list[int] = []
        public = []
        for kind in prog.inputs:
            if kind == "addr":
                a = rng.choice(addrs) if rare and addrs and rng.random() < 0.5 else 0
                a = a or rng.randrange(0, 2_000)
                if rare and addrs and rng.random() < 0.3:
                    a = addrs[-1] + rng.choice((1, -1, 10))
                addrs.append(a % P)
                public.append(a % P)
            elif kind == "len":
                public.append(rng.choice((0, 1)) if rare else rng.randrange(0, 9))
            elif kind == "u32":
                public.append(rng.choice((0, 1, 2**32 - 1)) if rare else rng.randrange(2**32))
            elif rare and prog.magic and rng.random() < 0.7:
                m = rng.choice(prog.magic)
                public.append((m + rng.choice((0, 0, 1, -1))) % P)
            else:
                public.append(rng.choice((rng.randrange(P), rng.randrange(100))))
        secret = [rng.randrange(P) for _ in range(prog.secrets)]
        out.append((public, secret))
    return out


# -- checking ---------------------------------------------------------------------------------


def _observe(result: Any) -> tuple[Any, ...]:
    """What a run shows (design §2): whether it failed; for a run that halts, its public
    output and RAM below the scratch region. A failing run's partial output is not
    observable (a failed execution has no proof)."""
    if result.error is not None:
        return (True,)
    cells = tuple(sorted((a, v) for a, v in result.ram.items() if a < SCRATCH_START))
    return (False, tuple(result.public_output), cells)


def compile_program(prog: FuzzProgram) -> tuple[Any, ...]:
    """The program's linked TIR (its corpus imports included), through our frontend; raises
    FrontendError."""
    import tempfile

    from tasmopt.frontend import compile_modules, link

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{prog.seed}.tri"
        path.write_text(prog.source)
        return link(compile_modules(path, [CORPUS], spill=prog.spill))


def check(
    prog: FuzzProgram,
    options: CompileOptions | None = None,
    *,
    runs: int = 8,
    seed: int = 0,
    step_limit: int = 200_000,
) -> Outcome:
    """Compile ``prog`` (frontend, then `tasmopt.optimizer.compile` with ``options``,
    default: rules and search, 0.2 s of search) and compare the optimized program with the
    unoptimized lowering on `input_sets` (``runs`` of them)."""
    import time

    from tasmopt.lower.triton import lower
    from tasmopt.optimizer import compile as compile_tir
    from tasmopt.tasm.parser import parse
    from tasmopt.vm.simulator import VmInput, run

    t0 = time.perf_counter()
    try:
        ops = compile_program(prog)
    except FrontendError as exc:
        return Outcome(False, error=str(exc).splitlines()[0])
    options = options or CompileOptions(sources=("rules", "search"), search_budget_s=0.2)
    low = lower(ops)
    reference = parse(low.text())
    result: CompileResult = compile_tir(ops, None, options=replace(options, seed=seed))
    optimized = parse(result.tasm)
    out = Outcome(True, cycles=result.cycles, baseline_cycles=result.baseline_cycles)
    for f in result.functions:
        out.rewrites.update(f.rewrites)
        out.blocks.update(b.source for b in f.blocks if b.tasm != b.baseline_tasm)
    rng = random.Random(prog.seed * 31 + seed)
    for public, secret in input_sets(prog, rng, runs):
        vin = VmInput(public_input=public, secret_input=secret)
        want = _observe(run(reference, vin, step_limit=step_limit))
        got = _observe(run(optimized, vin, step_limit=step_limit))
        out.runs += 1
        out.failing += int(want[0])
        if want != got:
            out.findings.append(Finding(prog, public, secret, want, got, result.tasm))
    out.seconds = time.perf_counter() - t0
    return out


def minimize(
    finding: Finding,
    still_fails: Callable[[FuzzProgram], bool] | None = None,
    options: CompileOptions | None = None,
) -> FuzzProgram:
    """Delete ``main``'s statements one at a time (helpers are left as they are) while
    ``still_fails`` holds (default: the program compiles and `check` finds a difference on
    its generated inputs, which depend only on the seed and the input reads, kept); the
    smallest such program."""

    def default(p: FuzzProgram) -> bool:
        o = check(p, options)
        return o.compiled and bool(o.findings)

    fails = still_fails or default
    prog = finding.program
    i = 0
    while i < len(prog.body):
        trial = replace(prog, body=_drop_statement(prog.body, i))
        if trial.body != prog.body and fails(trial):
            prog = trial
        else:
            i += 1
    return prog


def _drop_statement(body: Sequence[str], i: int) -> tuple[str, ...]:
    """``body`` without the statement starting at line ``i`` (a ``{`` ... ``}`` block whole)."""
    line = body[i]
    if line.strip() == "}":
        return tuple(body)
    depth = line.count("{") - line.count("}")
    j = i + 1
    while depth > 0 and j < len(body):
        depth += body[j].count("{") - body[j].count("}")
        j += 1
    return tuple(body[:i]) + tuple(body[j:])
