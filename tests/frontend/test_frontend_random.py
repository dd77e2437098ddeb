"""Differential test of the builder's stack model: random programs with many live Field and
Digest variables (spills past 16 elements inside branches and loops, assignments, nested
loops reading the loop variable) compiled, lowered and run, against a direct Python
interpretation of the same program."""

from __future__ import annotations

import random

import pytest
from frontend_util import P, run_ops, show

from tasmopt.frontend import compile_source


class Gen:
    """Generates a program as source text and, alongside, a Python closure that runs it."""

    def __init__(self, seed: int, calls: bool = False) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        #: also call `MIX` (argument order matters) with plain and composite arguments
        self.calls = calls

    def fresh(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def expr(self, scope: dict[str, str], depth: int = 0):
        r = self.rng.random()
        fields = [v for v, t in scope.items() if t == "F"]
        if depth > 1 or r < 0.3 or not fields:
            if fields and r < 0.6 + 0.4 * (depth > 1):
                v = self.rng.choice(fields)
                return v, lambda env, v=v: env[v]
            c = self.rng.randrange(0, 50)
            return str(c), lambda env, c=c: c
        if self.calls and r > 0.7:
            args = [self.expr(scope, depth + 1) for _ in range(3)]
            src = f"mix({', '.join(a for a, _ in args)})"
            fs = [f for _, f in args]
            return src, lambda env, fs=fs: (fs[0](env) + 2 * fs[1](env) + 5 * fs[2](env)) % P
        a, fa = self.expr(scope, depth + 1)
        b, fb = self.expr(scope, depth + 1)
        if self.rng.random() < 0.5:
            return f"({a} + {b})", lambda env: (fa(env) + fb(env)) % P
        return f"({a} * {b})", lambda env: (fa(env) * fb(env)) % P

    def block(self, scope: dict[str, str], n: int, depth: int, indent: str):
        """Statements; returns (lines, runner(env, out))."""
        scope = dict(scope)
        lines: list[str] = []
        steps = []
        for _ in range(n):
            kind = self.rng.random()
            fields = [v for v, t in scope.items() if t == "F" and not v.startswith("i")]
            digests = [v for v, t in scope.items() if t == "D"]
            if kind < 0.3 or not fields:
                v = self.fresh()
                src, f = self.expr(scope)
                lines.append(f"{indent}let mut {v} = {src}")
                steps.append(lambda env, out, v=v, f=f: env.__setitem__(v, f(env)))
                scope[v] = "F"
            elif kind < 0.4:
                v = self.fresh()
                parts = [self.expr(scope) for _ in range(5)]
                lines.append(f"{indent}let mut {v}: Digest = ({', '.join(p for p, _ in parts)})")
                steps.append(
                    lambda env, out, v=v, fs=[f for _, f in parts]: env.__setitem__(
                        v, [f(env) for f in fs]
                    )
                )
                scope[v] = "D"
            elif kind < 0.5 and digests:
                d = self.rng.choice(digests)
                names = [self.fresh() for _ in range(5)]
                lines.append(f"{indent}let mut ({', '.join(names)}) = {d}")
                steps.append(
                    lambda env, out, d=d, names=names: env.update(zip(names, env[d], strict=True))
                )
                scope.update({x: "F" for x in names})
            elif kind < 0.6:
                v = self.rng.choice(fields)
                src, f = self.expr(scope)
                lines.append(f"{indent}{v} = {src}")
                steps.append(lambda env, out, v=v, f=f: env.__setitem__(v, f(env)))
            elif kind < 0.65 and digests:
                d = self.rng.choice(digests)
                parts = [self.expr(scope) for _ in range(5)]
                lines.append(f"{indent}{d} = ({', '.join(p for p, _ in parts)})")
                steps.append(
                    lambda env, out, d=d, fs=[f for _, f in parts]: env.__setitem__(
                        d, [f(env) for f in fs]
                    )
                )
            elif kind < 0.8:
                src, f = self.expr(scope)
                lines.append(f"{indent}pub_write({src})")
                steps.append(lambda env, out, f=f: out.append(f(env)))
            elif kind < 0.9 and depth < 2:
                src, f = self.expr(scope)
                c = self.rng.randrange(0, 3)
                t_lines, t_run = self.block(
                    scope, self.rng.randrange(1, 5), depth + 1, indent + "    "
                )
                e_lines, e_run = self.block(
                    scope, self.rng.randrange(0, 4), depth + 1, indent + "    "
                )
                lines += [
                    f"{indent}if {src} == {c} {{",
                    *t_lines,
                    f"{indent}}} else {{",
                    *e_lines,
                    f"{indent}}}",
                ]

                def run_if(env, out, f=f, c=c, t=t_run, e=e_run):
                    (t if f(env) == c else e)(env, out)

                steps.append(run_if)
            elif depth < 2:
                i = f"i{self.fresh()}"
                k = self.rng.randrange(0, 4)
                inner = dict(scope)
                inner[i] = "U"
                b_lines, b_run = self.block(
                    inner, self.rng.randrange(1, 4), depth + 1, indent + "    "
                )
                use = self.rng.random() < 0.5
                if use:
                    b_lines.append(f"{indent}    pub_write(as_field({i}))")
                lines += [f"{indent}for {i} in 0..{k} {{", *b_lines, f"{indent}}}"]

                def run_for(env, out, i=i, k=k, b=b_run, use=use):
                    for n in range(k):
                        env[i] = n
                        b(env, out)
                        if use:
                            out.append(n)

                steps.append(run_for)

        def run(env, out):
            saved = dict(env)
            for s in steps:
                s(env, out)
            # block-local names disappear; assignments to outer names stay
            for name in list(env):
                if name not in saved:
                    del env[name]

        return lines, run


def random_program(seed: int, *, calls: bool = False, statements: int = 28):
    """(source, expected public output) of `Gen`'s program for ``seed`` (with ``calls``:
    calls of `MIX` too)."""
    g = Gen(seed, calls=calls)
    lines, run = g.block({}, statements, 0, "    ")
    src = "program r\n" + (MIX if calls else "") + "fn main() {\n" + "\n".join(lines) + "\n}\n"
    expected: list[int] = []
    run({}, expected)
    return src, expected


def assert_runs_like_python(src: str, expected: list[int], spill: str = "next-use"):
    """Compile ``src`` with the frontend, run it, and require Python's output; the ops."""
    ops = compile_source(src, "r.tri", spill=spill)
    res = run_ops(ops, step_limit=2_000_000)
    assert res.error is None, (res.error, src)
    assert list(res.public_output) == expected, src
    return ops


@pytest.mark.parametrize("spill", ["lru", "next-use"])
@pytest.mark.parametrize("seed", range(24))
def test_random_programs_match_python(seed, spill):
    """Both spill policies: ``next-use`` also drops dead variables (module stack.py)."""
    assert_runs_like_python(*random_program(seed), spill)


def test_next_use_policy_drops_dead_variables_in_the_random_programs():
    """The differential test above exercises the drop path: over the 24 programs the
    ``next-use`` builder stores to the spill region less often than ``lru``."""
    stores = {"lru": 0, "next-use": 0}
    for seed in range(24):
        src, _ = random_program(seed)
        for spill in stores:
            text = show(compile_source(src, f"r{seed}.tri", spill=spill, optimized=False))
            stores[spill] += text.count("WriteMem(1)")
    assert stores["next-use"] < stores["lru"], stores


def _trials():
    from tasmopt.frontend.builder import TRIALS

    return TRIALS


@pytest.mark.parametrize(
    "trial", _trials(), ids=[f"eager{e}-joins{j}-late{r}" for e, j, r in _trials()]
)
def test_every_next_use_trial_build_matches_python(monkeypatch, trial):
    """``next-use`` keeps the cheapest of several builds per function; each of them must be
    right on its own (the choice depends on the cost proxy, not on correctness)."""
    from tasmopt.frontend import builder

    monkeypatch.setattr(builder, "TRIALS", (trial,))
    monkeypatch.setattr(builder, "LAZY_TRIALS", ())
    for seed in range(100, 112):
        assert_runs_like_python(*random_program(seed))


def _lazy_trials():
    from tasmopt.frontend.builder import LAZY_TRIALS

    return LAZY_TRIALS


@pytest.mark.parametrize(
    "trial", _lazy_trials(), ids=[f"lazy-eager{e}-joins{j}" for e, j, _ in _lazy_trials()]
)
def test_every_lazy_trial_build_that_succeeds_matches_python(monkeypatch, trial):
    """A lazy build (`StackModel.lazy`: variables left out of reach while they sleep) either
    fails with an out-of-reach error, and is dropped, or is right; some of them succeed
    where values do go out of reach (the path under test runs)."""
    from tasmopt.frontend import builder
    from tasmopt.frontend.stack import StackModel

    monkeypatch.setattr(builder, "TRIALS", ())
    monkeypatch.setattr(builder, "LAZY_TRIALS", (trial,))
    slept = 0
    real = StackModel.sleeps

    def spy(self, n):
        nonlocal slept
        out = real(self, n)
        slept += out
        return out

    monkeypatch.setattr(StackModel, "sleeps", spy)
    kept = 0  # lazy builds that let a value sleep out of reach and succeeded
    real_build = builder._FnBuilder.build

    def build(self):
        nonlocal kept
        before = slept
        ops = real_build(self)
        kept += self.model.lazy and slept > before
        return ops

    monkeypatch.setattr(builder._FnBuilder, "build", build)
    for seed in range(100, 124):
        assert_runs_like_python(*random_program(seed))
    assert kept > 0


#: a function whose result depends on the order of its arguments
MIX = "fn mix(a: Field, b: Field, c: Field) -> Field {\n    a + 2 * b + 5 * c\n}\n"


@pytest.mark.parametrize("late", [False, True])
def test_calls_with_plain_and_composite_arguments_match_python(monkeypatch, late):
    """A call's leading plain arguments evaluated last (the ``late`` trial builds) and
    rotated under the others: every argument still lands in its parameter, in random
    programs full of calls that mix variable reads, literals and composite arguments."""
    from tasmopt.frontend import build_expr, builder

    trials = tuple(t for t in builder.TRIALS if t[2] is late)
    monkeypatch.setattr(builder, "TRIALS", trials[:2])
    rotations: list[int] = []
    real = build_expr.ExprBuilder._rotate

    def counted(self, n: int, k: int) -> None:
        rotations.append(k)
        real(self, n, k)

    monkeypatch.setattr(build_expr.ExprBuilder, "_rotate", counted)
    for seed in range(200, 216):
        assert_runs_like_python(*random_program(seed, calls=True, statements=24))
    assert bool(rotations) is late  # the path under test ran (only) in the late builds


def test_reordered_sum_and_product_chains_match_python(monkeypatch):
    """``next-use`` evaluates a chain of Field ``+`` (or ``*``) reads in the order the
    variables sit on the stack (`_FnBuilder.operands`); the random programs' nested sums
    and products exercise it (counted) and still print what Python computes."""
    from tasmopt.frontend import builder

    used = 0
    real = builder._FnBuilder.operands

    def spy(self, e):
        nonlocal used
        out = real(self, e)
        used += out is not None
        return out

    monkeypatch.setattr(builder._FnBuilder, "operands", spy)
    for seed in range(300, 324):
        assert_runs_like_python(*random_program(seed))
    assert used > 0
