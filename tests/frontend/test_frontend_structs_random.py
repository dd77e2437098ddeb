"""Differential test of the builder's stack allocation on struct-heavy programs (issue 36):
random programs with many live struct variables (a 3-field struct and a nested one of 5
elements), field reads and writes at every depth, whole and nested-struct assignments,
struct literals, destructuring, calls that take and return structs, branches and loops,
compiled, lowered and run against a direct Python interpretation of the same program.

Every form the ``next-use`` builder can keep is run on its own (`builder.FORMS`): the
declared form, the scalarized one (struct variables split into leaf variables,
`tasmopt.frontend.scalarize`) and the default choice between them; ``lru`` (upstream's
shape) too. Field values are distinct per field (the generator mixes each field with its
own multiplier), so a field read from the wrong slot, or two fields swapped, shows."""

from __future__ import annotations

import random

import pytest
from frontend_util import P, run_ops
from test_frontend_random import assert_runs_like_python

from tasmopt.frontend import compile_source

HEADER = """program s
struct Pt {
    a: Field,
    b: Field,
    c: Field,
}
struct Qd {
    p: Pt,
    d: Field,
    e: Field,
}
fn pmix(x: Pt, k: Field) -> Pt {
    Pt { a: x.b + k, b: x.c * 2, c: x.a + 3 * x.b }
}
fn qsum(q: Qd) -> Field {
    q.p.a + 2 * q.p.b + 3 * q.p.c + 5 * q.d + 7 * q.e
}
fn qmk(p: Pt, d: Field) -> Qd {
    Qd { p: p, d: d, e: p.a * d + p.c }
}
fn swapq(q: Qd, x: Field) -> (Field, Qd) {
    (q.e + x, Qd { p: Pt { a: q.p.c, b: q.p.a, c: q.d }, d: q.p.b, e: x })
}
"""


def _pmix(x, k):
    a, b, c = x
    return ((b + k) % P, (c * 2) % P, (a + 3 * b) % P)


def _qsum(q):
    (a, b, c), d, e = q
    return (a + 2 * b + 3 * c + 5 * d + 7 * e) % P


def _qmk(p, d):
    return (p, d, (p[0] * d + p[2]) % P)


def _swapq(q, x):
    (a, b, c), d, e = q
    return ((e + x) % P, ((c, a, d), b, x))


class StructGen:
    """Generates a program as source text and a Python closure that runs it."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def names(self, scope: dict[str, str], kind: str) -> list[str]:
        return [v for v, t in scope.items() if t == kind]

    # -- expressions: (source, closure over env) -------------------------------------------

    def field(self, scope: dict[str, str], depth: int = 0):
        r = self.rng.random()
        ps, qs, fs = self.names(scope, "P"), self.names(scope, "Q"), self.names(scope, "F")
        if depth > 1 or r < 0.35:
            choices = []
            for v in ps:
                for i, f in enumerate("abc"):
                    choices.append((f"{v}.{f}", lambda env, v=v, i=i: env[v][i]))
            for v in qs:
                for i, f in enumerate("abc"):
                    choices.append((f"{v}.p.{f}", lambda env, v=v, i=i: env[v][0][i]))
                choices.append((f"{v}.d", lambda env, v=v: env[v][1]))
                choices.append((f"{v}.e", lambda env, v=v: env[v][2]))
            for v in fs:
                choices.append((v, lambda env, v=v: env[v]))
            if choices and self.rng.random() < 0.85:
                return self.rng.choice(choices)
            c = self.rng.randrange(1, 60)
            return str(c), lambda env, c=c: c
        if qs and r < 0.45:
            q, fq = self.quad(scope, depth + 1)
            return f"qsum({q})", lambda env, fq=fq: _qsum(fq(env))
        a, fa = self.field(scope, depth + 1)
        b, fb = self.field(scope, depth + 1)
        if self.rng.random() < 0.5:
            return f"({a} + {b})", lambda env: (fa(env) + fb(env)) % P
        return f"({a} * {b})", lambda env: (fa(env) * fb(env)) % P

    def point(self, scope: dict[str, str], depth: int = 0):
        ps, qs = self.names(scope, "P"), self.names(scope, "Q")
        r = self.rng.random()
        if ps and r < 0.3:
            v = self.rng.choice(ps)
            return v, lambda env, v=v: env[v]
        if qs and r < 0.45:
            v = self.rng.choice(qs)
            return f"{v}.p", lambda env, v=v: env[v][0]
        if ps and r < 0.7 and depth < 2:
            x, fx = self.point(scope, depth + 1)
            k, fk = self.field(scope, 1)
            return f"pmix({x}, {k})", lambda env, fx=fx, fk=fk: _pmix(fx(env), fk(env))
        parts = [self.field(scope, 1) for _ in range(3)]
        src = "Pt { " + ", ".join(f"{n}: {p}" for n, (p, _) in zip("abc", parts, strict=True))
        return src + " }", lambda env, fs=[f for _, f in parts]: tuple(f(env) for f in fs)

    def quad(self, scope: dict[str, str], depth: int = 0):
        qs = self.names(scope, "Q")
        r = self.rng.random()
        if qs and r < 0.4:
            v = self.rng.choice(qs)
            return v, lambda env, v=v: env[v]
        if r < 0.7 or depth > 1:
            p, fp = self.point(scope, depth + 1)
            d, fd = self.field(scope, 1)
            return f"qmk({p}, {d})", lambda env, fp=fp, fd=fd: _qmk(fp(env), fd(env))
        p, fp = self.point(scope, depth + 1)
        d, fd = self.field(scope, 1)
        e, fe = self.field(scope, 1)
        src = f"Qd {{ p: {p}, d: {d}, e: {e} }}"
        return src, lambda env, fp=fp, fd=fd, fe=fe: (fp(env), fd(env), fe(env))

    # -- statements -------------------------------------------------------------------------

    def block(self, scope: dict[str, str], n: int, depth: int, indent: str):
        scope = dict(scope)
        lines: list[str] = []
        steps = []

        def let(kind: str, src: str, f) -> None:
            v = self.fresh(kind.lower())
            ty = {"P": ": Pt", "Q": ": Qd", "F": ""}[kind]
            lines.append(f"{indent}let mut {v}{ty} = {src}")
            steps.append(lambda env, out, v=v, f=f: env.__setitem__(v, f(env)))
            scope[v] = kind

        for _ in range(n):
            k = self.rng.random()
            ps, qs = self.names(scope, "P"), self.names(scope, "Q")
            if k < 0.15 or not ps:
                let("P", *self.point(scope))
            elif k < 0.25 or not qs:
                let("Q", *self.quad(scope))
            elif k < 0.32:
                let("F", *self.field(scope))
            elif k < 0.4:  # a field of a point
                v, i = self.rng.choice(ps), self.rng.randrange(3)
                src, f = self.field(scope)
                lines.append(f"{indent}{v}.{'abc'[i]} = {src}")

                def set_p(env, out, v=v, i=i, f=f):
                    x = list(env[v])
                    x[i] = f(env)
                    env[v] = tuple(x)

                steps.append(set_p)
            elif k < 0.48:  # a nested field or the nested struct of a quad
                v = self.rng.choice(qs)
                if self.rng.random() < 0.5:
                    src, f = self.point(scope)
                    lines.append(f"{indent}{v}.p = {src}")
                    steps.append(
                        lambda env, out, v=v, f=f: env.__setitem__(v, (f(env), *env[v][1:]))
                    )
                else:
                    i = self.rng.randrange(3)
                    src, f = self.field(scope)
                    lines.append(f"{indent}{v}.p.{'abc'[i]} = {src}")

                    def set_q(env, out, v=v, i=i, f=f):
                        p, d, e = env[v]
                        x = list(p)
                        x[i] = f(env)
                        env[v] = (tuple(x), d, e)

                    steps.append(set_q)
            elif k < 0.54:  # whole assignments
                if self.rng.random() < 0.5:
                    v = self.rng.choice(ps)
                    src, f = self.point(scope)
                else:
                    v = self.rng.choice(qs)
                    src, f = self.quad(scope)
                lines.append(f"{indent}{v} = {src}")
                steps.append(lambda env, out, v=v, f=f: env.__setitem__(v, f(env)))
            elif k < 0.6:  # destructuring a call that returns (Field, Qd)
                q, fq = self.quad(scope)
                x, fx = self.field(scope)
                a, b = self.fresh("f"), self.fresh("q")
                lines.append(f"{indent}let mut ({a}, {b}) = swapq({q}, {x})")

                def run_swap(env, out, a=a, b=b, fq=fq, fx=fx):
                    env[a], env[b] = _swapq(fq(env), fx(env))

                steps.append(run_swap)
                scope[a], scope[b] = "F", "Q"
            elif k < 0.8:
                src, f = self.field(scope)
                lines.append(f"{indent}pub_write({src})")
                steps.append(lambda env, out, f=f: out.append(f(env)))
            elif k < 0.9 and depth < 2:
                src, f = self.field(scope)
                t_lines, t_run = self.block(
                    scope, self.rng.randrange(1, 5), depth + 1, indent + "    "
                )
                e_lines, e_run = self.block(
                    scope, self.rng.randrange(0, 4), depth + 1, indent + "    "
                )
                c = self.rng.randrange(0, 3)
                lines += [f"{indent}if {src} == {c} {{", *t_lines, f"{indent}}} else {{"]
                lines += [*e_lines, f"{indent}}}"]

                def run_if(env, out, f=f, c=c, t=t_run, e=e_run):
                    (t if f(env) == c else e)(env, out)

                steps.append(run_if)
            elif depth < 2:
                i = self.fresh("i")
                trips = self.rng.randrange(0, 4)
                b_lines, b_run = self.block(
                    scope, self.rng.randrange(1, 4), depth + 1, indent + "    "
                )
                lines += [f"{indent}for {i} in 0..{trips} {{", *b_lines, f"{indent}}}"]

                def run_for(env, out, trips=trips, b=b_run):
                    for _ in range(trips):
                        b(env, out)

                steps.append(run_for)

        def run(env, out):
            saved = set(env)
            for s in steps:
                s(env, out)
            for name in list(env):
                if name not in saved:
                    del env[name]

        return lines, run


def _program(seed: int, statements: int = 24) -> tuple[str, list[int]]:
    g = StructGen(seed)
    lines, run = g.block({}, statements, 0, "    ")
    expected: list[int] = []
    run({}, expected)
    return HEADER + "fn main() {\n" + "\n".join(lines) + "\n}\n", expected


@pytest.mark.parametrize(
    "spill,forms",
    [
        ("lru", None),
        ("next-use", ("declared",)),
        ("next-use", ("scalarized",)),
        ("next-use", None),
    ],
    ids=["lru", "declared", "scalarized", "cheapest"],
)
@pytest.mark.parametrize("seed", range(16))
def test_struct_programs_match_python(monkeypatch, seed, spill, forms):
    from tasmopt.frontend import builder

    if forms is not None:
        monkeypatch.setattr(builder, "FORMS", forms)
    assert_runs_like_python(*_program(seed), spill)


def test_the_struct_programs_exercise_the_scalarized_form(monkeypatch):
    """The test above runs what it means to: the scalarized builds differ from the declared
    ones and are kept for some functions (fewer instructions, by the builder's proxy)."""
    from tasmopt.frontend import builder
    from tasmopt.frontend.builder import weighted_cost

    costs = {}
    for forms in (("declared",), ("scalarized",), ("declared", "scalarized")):
        monkeypatch.setattr(builder, "FORMS", forms)
        total = 0.0
        for seed in range(16):
            src, _ = _program(seed)
            total += weighted_cost(compile_source(src, f"s{seed}.tri", spill="next-use"))
        costs[forms] = total
    declared, split, both = costs.values()
    assert split != declared
    assert both < declared and both <= split, costs


def test_the_chunked_ram_layout_is_exercised_and_right(monkeypatch):
    """``next-use`` stores and reads spilled variables in chunks of up to five words
    (`StackModel.chunked`: element i at home + w - 1 - i). Over the random struct programs
    (declared form: whole structs spill) every chunked path runs, words of several elements
    at once included, and the programs still print what Python computes."""
    from tasmopt.frontend import builder
    from tasmopt.frontend.stack import StackModel

    monkeypatch.setattr(builder, "FORMS", ("declared",))
    seen: dict[str, int] = {"spill": 0, "read": 0, "store": 0}
    spill, read, store = (
        StackModel._spill_chunked,
        StackModel.emit_ram_read,
        StackModel.store_top_to,
    )

    def spy_spill(self, i, above, addr, store_):
        seen["spill"] += self.entries[i].width > 1 and store_
        return spill(self, i, above, addr, store_)

    def spy_read(self, var, first, width):
        seen["read"] += self.chunked and width > 1
        return read(self, var, first, width)

    def spy_store(self, var, first, w):
        seen["store"] += self.chunked and w > 1
        return store(self, var, first, w)

    monkeypatch.setattr(StackModel, "_spill_chunked", spy_spill)
    monkeypatch.setattr(StackModel, "emit_ram_read", spy_read)
    monkeypatch.setattr(StackModel, "store_top_to", spy_store)
    for seed in range(16):
        assert_runs_like_python(*_program(seed))
    assert all(seen.values()), seen


def test_copies_become_moves_and_updates_happen_in_place_in_the_random_programs(monkeypatch):
    """Two rewrites of ``next-use`` run on the random programs and keep them right: a struct
    copy ``let b = a`` whose later reads of ``a`` can read ``b`` becomes a move
    (`scalarize.forward_copies`, then `rename`), and ``x = e(x)`` picks the old value up and
    places the new one into its slot (`replaced_in_place`)."""
    from frontend_util import show
    from test_frontend_random import random_program

    from tasmopt.frontend import builder, scalarize

    used = {"forward": 0, "place": 0}
    real = scalarize.forward_copies

    def spy(params, body):
        out = real(params, body)
        used["forward"] += out is not None
        return out

    monkeypatch.setattr(builder, "forward_copies", spy)
    for seed in range(16):
        assert_runs_like_python(*_program(seed))
    for seed in range(24):
        text = show(assert_runs_like_python(*random_program(seed)))
        used["place"] += text.count("Swap(2) Swap(1)") + text.count("Swap(3) Swap(2) Swap(1)")
    assert used["forward"] > 0 and used["place"] > 0, used


@pytest.mark.parametrize(
    "body,public,want,forwarded",
    [
        # b.a written before a.a is read: a.a must not read b's slot
        (
            "let mut b = a\n    b.a = 5\n    pub_write(a.a)\n    pub_write(b.a + b.c)",
            [7],
            [7, 26],
            False,
        ),
        # the right side is read before the write: forwarding is fine here
        (
            "let mut b = a\n    b.a = b.a + a.a\n    pub_write(b.a)\n    pub_write(a.b)",
            [7],
            [14, 11],
            True,
        ),
        # inside a loop any write counts as before any read
        (
            "let mut b = a\n    for i in 0..2 {\n        pub_write(a.a)\n        b.a = b.a + 1\n"
            "    }\n    pub_write(b.a)",
            [7],
            [7, 7, 9],
            False,
        ),
        # a whole read of a after a field of b was written
        (
            "let mut b = a\n    b.c = 0\n    pub_write(qsum(qmk(a, 1)))\n    pub_write(b.c)",
            [2],
            None,
            False,
        ),
    ],
)
def test_a_copy_is_forwarded_only_where_no_write_comes_first(body, public, want, forwarded):
    """Adversarial cases of `scalarize.forward_copies`: each program's output under
    ``next-use`` (every form) equals ``lru``'s (no rewrite) and, where given, the value
    worked out by hand."""
    src = HEADER + (
        "fn main() {\n    let x = pub_read()\n    let a: Pt = Pt { a: x, b: x + 4, c: x * 3 }\n    "
        + body
        + "\n}\n"
    )
    lru = run_ops(compile_source(src, "f.tri", spill="lru"), public, step_limit=100_000)
    nu = run_ops(compile_source(src, "f.tri", spill="next-use"), public, step_limit=100_000)
    assert lru.error is None and nu.error is None
    assert list(nu.public_output) == list(lru.public_output)
    if want is not None:
        assert list(nu.public_output) == want
    from tasmopt.frontend.checker import check_module
    from tasmopt.frontend.modules import load_project
    from tasmopt.frontend.scalarize import forward_copies
    from tasmopt.frontend.source import Source

    env = check_module(load_project(Source("f.tri", src), None, ())[-1], {})
    decl = next(s for s in env.build if s.name == "main").decl
    assert (forward_copies(decl.param_vars, decl.body) is not None) is forwarded
