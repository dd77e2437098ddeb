"""Mutation coverage of the function-level passes' proof obligations (issue 33 item 3).

Each function-level pass (`tasmopt.optimizer.PIPELINE`) keeps a rewrite only when its own
symbolic proof holds; the function check that follows runs on witnesses and cannot see a
difference on rare inputs. A check that can be dropped without any test noticing is a check
nobody has attacked. This module drops them one at a time (the method of mutation testing:
DeMillo, Lipton and Sayward, "Hints on test data selection", 1978; the "remove a guard"
operator of PIT and mutmut, restricted to the proofs):

- `OBLIGATIONS` lists, per pass, the functions whose checks make up its proof (the facts it
  proves and the shapes it recognises), and `KILLERS` the tests that must catch a dropped one.
- `mutants` reads each function's source and lists one `Mutant` per *check*: an ``if`` that
  rejects (its body returns a failure value, ``False``, ``None``, an empty tuple or list, or a
  reason string where success is ``None``, or ``continue``s past a candidate) is made never
  to fire, and so is each operand of its ``or`` (or each conjunct of ``not (a and b)``);
  each conjunct of a ``return a and b`` is dropped, and a final ``return <check>`` of a
  predicate becomes ``return True``.
- `apply` installs one mutant in the running interpreter (every ``tasmopt`` module that holds
  the function gets the mutated one); ``TASMOPT_MUTANT=<id>`` makes the tests' conftest apply
  it before any test runs. `benchmarks/proof_mutants.py` runs the killers for each mutant and
  lists the survivors.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "OBLIGATIONS",
    "KILLERS",
    "EQUIVALENT",
    "Mutant",
    "mutants",
    "apply",
    "obligation_functions",
]

_O = "tasmopt.optimizer."

#: Per pass, its proof obligations: ``module:function`` (``module:Class.method``).
OBLIGATIONS: dict[str, tuple[str, ...]] = {
    # what every loop pass builds on: a section entered only by call from its function,
    # and the call sites where T can go
    "sections": (
        f"{_O}loops:no_fall_through",
        f"{_O}loops:entered_sections",
        f"{_O}conjugate:call_sites",
        f"{_O}conjugate:guarded_enter_ok",
    ),
    "loops": tuple(
        f"{_O}loops:{f}"
        for f in (
            "_paths",
            "_body_facts",
            "_path_facts",
            "_unskippable",
            "_site_ok",
            "_site_counts_n",
            "_site_run",
            "loop_shapes",
        )
    ),
    "unroll": (f"{_O}unroll:_constant_counter", f"{_O}unroll:find_unrollings"),
    "early_exit": tuple(
        f"{_O}early_exit:{f}" for f in ("_guard_only", "_sites", "find_guarded_loops")
    ),
    "branches": tuple(
        f"{_O}branches:{f}"
        for f in (
            "_pure",
            "_one_pure",
            "_boolean_before",
            "_then_leaves_zero",
            "find_branches",
            "prove_select",
        )
    ),
    "pointers": tuple(
        f"{_O}pointers:{f}" for f in ("prove_change", "_site_insertion", "find_pointer_loops")
    ),
    "reverse": tuple(
        f"{_O}reverse:{f}"
        for f in (
            "_swap_ends_ok",
            "_walk_ends_ok",
            "_quiet",
            "_reductions",
            "_factor",
            "_dead_after",
            "_sites",
            "find_reversals",
        )
    ),
    "absorb": tuple(
        f"{_O}absorb:{f}" for f in ("_same", "_body_ok", "_new_body_ok", "find_absorptions")
    ),
    "dots": (f"{_O}dots:_proven", f"{_O}dots:find_dot_loops"),
    "shortcuts": (f"{_O}shortcuts:shortcut_calls",),
    "checks": (f"{_O}checks:zero_checks",),
    "conditions": (f"{_O}conditions:known_branches", f"{_O}conditions:_reachable"),
    "inline": (f"{_O}inline:straight_body", f"{_O}inline:_Run.attempt"),
}

#: End-to-end tests of a whole compile: their wrong rewrites are caught by the function
#: check on witnesses, which is not what a mutant of a proof must be caught by (and they are
#: the slow ones). Deselected from the killers with ``-k``.
_E2E = (
    "not the_optimizer and not function_check and not client_baseline"
    " and not select_and_a_counted_loop"
)

#: Per pass, the tests that must catch a dropped check: ``(test files, -k expression)``.
KILLERS: dict[str, tuple[tuple[str, ...], str]] = {
    name: (("tests/test_proof_obligations.py", *files), kexpr)
    for name, (files, kexpr) in {
        "sections": (
            tuple(
                f"tests/test_{p}.py"
                for p in ("loops", "early_exit", "absorb", "dots", "reverse", "pointers")
            ),
            _E2E,
        ),
        "loops": (("tests/test_loops.py",), _E2E),
        "unroll": (("tests/test_unroll.py",), ""),
        "early_exit": (("tests/test_early_exit.py",), ""),
        "branches": (("tests/test_branches.py",), _E2E),
        "pointers": (("tests/test_pointers.py",), _E2E),
        "reverse": (("tests/test_reverse.py",), ""),
        "absorb": (("tests/test_absorb.py",), _E2E),
        "dots": (("tests/test_dots.py",), _E2E),
        "shortcuts": (("tests/test_shortcuts.py",), ""),
        "checks": (("tests/test_checks.py",), ""),
        "conditions": (("tests/test_conditions.py",), ""),
        "inline": (("tests/test_inline.py",), ""),
    }.items()
}


#: Mutants no input can tell from the original, each with the check it drops (a part of
#: `Mutant.what`) and why: ``{id: (check, reason)}``. Kept current by a test.
EQUIVALENT: dict[str, tuple[str, str]] = {}


@dataclass(frozen=True)
class Mutant:
    """One dropped check.

    Attributes:
        id: ``<module>:<function>#<k>``, the k-th mutant of that function (source order).
        pass_name: the pass whose proof it weakens.
        line: the check's line in the module's source.
        what: the check as written (one line, shortened), and how it is dropped.
    """

    id: str
    pass_name: str
    line: int
    what: str


def obligation_functions() -> Iterator[tuple[str, str]]:
    """``(pass, "module:function")`` for every entry of `OBLIGATIONS`."""
    for name, fns in OBLIGATIONS.items():
        for fn in fns:
            yield name, fn


def _tree(module: str) -> tuple[ast.Module, str]:
    path = Path(importlib.import_module(module).__file__ or "")
    src = path.read_text()
    return ast.parse(src, str(path)), str(path)


def _find(tree: ast.Module, qual: str) -> ast.FunctionDef:
    """The ``def`` of ``qual`` (``f`` or ``Class.f``) at the top of ``tree``.

    Raises:
        LookupError: no such function.
    """
    body: list[ast.stmt] = tree.body
    *classes, name = qual.split(".")
    for c in classes:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == c), None)
        if cls is None:
            raise LookupError(qual)
        body = cls.body
    fn = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        raise LookupError(qual)
    return fn


def _fails_with_reason(fn: ast.FunctionDef) -> bool:
    """``fn`` answers why not as a string (success: None), like `prove_change`."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and n.value is not None:
            v = n.value
            if isinstance(v, ast.JoinedStr) or (
                isinstance(v, ast.Constant) and isinstance(v.value, str)
            ):
                return True
    return False


def _is_failure(stmt: ast.stmt, reason: bool) -> bool:
    """``stmt`` rejects: ``continue``, or returns a failure value."""
    if isinstance(stmt, ast.Continue):
        return True
    if not isinstance(stmt, ast.Return):
        return False
    v = stmt.value
    if reason:
        return isinstance(v, ast.JoinedStr) or (
            isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    if v is None:
        return True
    if isinstance(v, ast.Constant):
        return v.value is None or v.value is False
    return isinstance(v, ast.Tuple | ast.List) and not v.elts


def _returns_bool(fn: ast.FunctionDef) -> bool:
    return isinstance(fn.returns, ast.Name) and fn.returns.id == "bool"


# A mutation: (node, how) where how is "never" (the if's test becomes False), ("drop", k)
# (operand k of the test's `or`, or conjunct k of its `not (and)`, or of a returned `and`),
# or "true" (a returned check becomes True).
_Edit = tuple[ast.AST, Any]


def _edits(fn: ast.FunctionDef) -> list[_Edit]:
    reason = _fails_with_reason(fn)
    out: list[_Edit] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and not node.orelse and _is_failure(node.body[-1], reason):
            out.append((node, "never"))
            t = node.test
            if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.Or):
                out += [(node, ("drop", k)) for k in range(len(t.values))]
            elif (
                isinstance(t, ast.UnaryOp)
                and isinstance(t.op, ast.Not)
                and isinstance(t.operand, ast.BoolOp)
                and isinstance(t.operand.op, ast.And)
            ):
                out += [(node, ("drop", k)) for k in range(len(t.operand.values))]
        elif (
            isinstance(node, ast.Return)
            and _returns_bool(fn)
            and node.value is not None
            and not isinstance(node.value, ast.Constant)
        ):
            v = node.value
            if isinstance(v, ast.BoolOp) and isinstance(v.op, ast.And):
                out += [(node, ("drop", k)) for k in range(len(v.values))]
            else:
                out.append((node, "true"))
    # ast.walk is breadth-first: order by source position for stable, readable ids
    return sorted(out, key=lambda e: (e[0].lineno, e[0].col_offset, str(e[1])))


def _describe(node: ast.AST, how: Any) -> str:
    if isinstance(node, ast.If):
        text = ast.unparse(node.test)
        if how == "never":
            shown = f"if {text}: (never)"
        else:
            t = node.test
            ops = t.operand.values if isinstance(t, ast.UnaryOp) else t.values  # type: ignore[attr-defined]
            shown = f"if {text}: (without {ast.unparse(ops[how[1]])})"
    else:
        assert isinstance(node, ast.Return) and node.value is not None
        text = ast.unparse(node.value)
        if how == "true":
            shown = f"return {text} (-> True)"
        else:
            shown = f"return {text} (without {ast.unparse(node.value.values[how[1]])})"  # type: ignore[attr-defined]
    return shown if len(shown) <= 160 else shown[:157] + "..."


def mutants(passes: tuple[str, ...] | None = None) -> list[Mutant]:
    """Every mutant of the obligations of ``passes`` (all when None), in `OBLIGATIONS`
    order, then source order.

    Raises:
        LookupError: an obligation names a function that does not exist (the registry is
            stale).
    """
    out = []
    for name, ref in obligation_functions():
        if passes is not None and name not in passes:
            continue
        module, qual = ref.split(":")
        tree, _ = _tree(module)
        for k, (node, how) in enumerate(_edits(_find(tree, qual))):
            out.append(Mutant(f"{ref}#{k}", name, node.lineno, _describe(node, how)))
    return out


def _mutate(node: ast.AST, how: Any) -> None:
    if isinstance(node, ast.If):
        if how == "never":
            node.test = ast.Constant(False)
            return
        t = node.test
        if isinstance(t, ast.BoolOp):  # a or b: drop one operand
            rest = [v for j, v in enumerate(t.values) if j != how[1]]
            node.test = rest[0] if len(rest) == 1 else ast.BoolOp(ast.Or(), rest)
        else:  # not (a and b): drop one conjunct
            assert isinstance(t, ast.UnaryOp) and isinstance(t.operand, ast.BoolOp)
            rest = [v for j, v in enumerate(t.operand.values) if j != how[1]]
            inner = rest[0] if len(rest) == 1 else ast.BoolOp(ast.And(), rest)
            node.test = ast.UnaryOp(ast.Not(), inner)
        return
    assert isinstance(node, ast.Return) and node.value is not None
    if how == "true":
        node.value = ast.Constant(True)
        return
    v = node.value
    assert isinstance(v, ast.BoolOp)
    rest = [x for j, x in enumerate(v.values) if j != how[1]]
    node.value = rest[0] if len(rest) == 1 else ast.BoolOp(ast.And(), rest)


def apply(mutant_id: str) -> None:
    """Install mutant ``mutant_id`` (`Mutant.id`) in this interpreter: the mutated function
    replaces the original in its module (or class) and in every loaded ``tasmopt`` module
    that imported it by name. For a test run or a benchmark process, not for a service.

    Raises:
        LookupError, ValueError: no such function or mutant.
    """
    ref, _, k = mutant_id.partition("#")
    module, qual = ref.split(":")
    tree, path = _tree(module)
    fn = _find(tree, qual)
    edits = _edits(fn)
    if not k.isdigit() or int(k) >= len(edits):
        raise ValueError(f"{mutant_id}: {ref} has {len(edits)} mutants")
    _mutate(*edits[int(k)])
    ast.fix_missing_locations(fn)
    mod = importlib.import_module(module)
    code = compile(
        ast.Module([fn], []),
        path,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    *classes, name = qual.split(".")
    owner: Any = mod
    for c in classes:
        owner = getattr(owner, c)
    original = inspect.getattr_static(owner, name)
    if classes:  # a method: its function is defined in a copy of the module's namespace
        space: dict[str, Any] = dict(vars(mod))
        exec(code, space)  # noqa: S102 - our own source, one check removed
        setattr(owner, name, space[name])
        return
    # a module function: defined in the module's own namespace, so its callers there see it
    exec(code, vars(mod))  # noqa: S102 - our own source, one check removed
    new = getattr(mod, name)
    for other in list(sys.modules.values()):
        if getattr(other, "__name__", "").startswith("tasmopt") and other is not mod:
            if getattr(other, name, None) is original:
                setattr(other, name, new)
