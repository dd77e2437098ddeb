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


def _in(module: str, *functions: str) -> tuple[str, ...]:
    """``tasmopt.optimizer.<module>:<function>`` for each of ``functions``."""
    return tuple(f"tasmopt.optimizer.{module}:{f}" for f in functions)


#: Per pass, its proof obligations: ``module:function`` (``module:Class.method``).
OBLIGATIONS: dict[str, tuple[str, ...]] = {
    # what every loop pass builds on: a section entered only by call from its function,
    # and the call sites where T can go
    "sections": (
        *_in("loops", "no_fall_through", "entered_sections"),
        *_in("conjugate", "call_sites", "guarded_enter_ok", "_quiet"),
    ),
    "loops": _in(
        "loops",
        "_paths",
        "_body_facts",
        "_path_facts",
        "_unskippable",
        "_site_ok",
        "_site_counts_n",
        "_site_run",
        "loop_shapes",
    ),
    "unroll": _in("unroll", "_constant_counter", "find_unrollings"),
    "early_exit": _in("early_exit", "_guard_only", "_sites", "find_guarded_loops"),
    "branches": _in(
        "branches",
        "_pure",
        "_one_pure",
        "_boolean_before",
        "_then_leaves_zero",
        "find_branches",
        "prove_select",
    ),
    "pointers": _in("pointers", "prove_change", "_site_insertion", "find_pointer_loops"),
    "reverse": _in(
        "reverse",
        "_swap_ends_ok",
        "_walk_ends_ok",
        "_reductions",
        "_factor",
        "_dead_after",
        "_sites",
        "find_reversals",
    ),
    "absorb": _in("absorb", "_same", "_body_ok", "_new_body_ok", "find_absorptions"),
    "dots": _in("dots", "_proven", "find_dot_loops"),
    "shortcuts": _in("shortcuts", "shortcut_calls"),
    "checks": _in("checks", "zero_checks"),
    "conditions": _in("conditions", "known_branches", "_reachable"),
    "inline": _in("inline", "straight_body", "_Run.attempt"),
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
EQUIVALENT: dict[str, tuple[str, str]] = {
    "tasmopt.optimizer.conjugate:guarded_enter_ok#1": (
        "drop a.delta != b.delta",
        "the stacks are compared below to a depth past both deltas: another delta shows there as a different element",
    ),
    "tasmopt.optimizer.conjugate:_quiet#0": (
        "drop run.unsupported is None",
        "every caller refuses control flow (the only code that does not run symbolically) before, or runs fixed straight-line templates",
    ),
    "tasmopt.optimizer.pointers:prove_change#1": (
        "drop run.delta != 0",
        "the restore check below compares every element: another delta shows there",
    ),
    "tasmopt.optimizer.pointers:prove_change#2": (
        "never: if run.unsupported is not None or run.delta != 0",
        "T is straight-line (change_code) and the restore check below compares every element",
    ),
    "tasmopt.optimizer.reverse:_walk_ends_ok#0": (
        "drop run.unsupported is not None",
        "the template is straight-line",
    ),
    "tasmopt.optimizer.reverse:_dead_after#3": (
        "drop run.unsupported is not None",
        "control flow after the call is refused before the run (the check above)",
    ),
    "tasmopt.optimizer.reverse:_sites#1": (
        "drop line_kind(ln) != 'call'",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.reverse:_sites#2": (
        "drop len(words) != 2",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.reverse:find_reversals#0": (
        "is_control_flow",
        "_reductions refuses a body whose symbolic run stops at control flow (`_quiet`)",
    ),
    "tasmopt.optimizer.checks:zero_checks#1": (
        "drop line_kind(lines[code[0]]) != ':'",
        "without its label first, the helper's label built from the first line is no label, and the closing fall-through check refuses the result",
    ),
    "tasmopt.optimizer.conditions:known_branches#3": (
        "steps > MAX_STEPS",
        "a work limit, not a proof: without it the exploration runs longer and answers the same",
    ),
    "tasmopt.optimizer.conditions:known_branches#4": (
        "deadline.expired",
        "the request's deadline, not a proof: without it the exploration answers the same, later",
    ),
    "tasmopt.optimizer.conditions:known_branches#8": (
        "p.run.unsupported",
        "only control flow does not run symbolically, and it is handled before",
    ),
    "tasmopt.optimizer.conditions:known_branches#12": (
        "drop not isinstance(ins.arg, str)",
        "an int argument is never one of the labels",
    ),
    "tasmopt.optimizer.conditions:known_branches#15": (
        "len(p.ret) >= MAX_DEPTH",
        "a work limit, not a proof: without it the exploration runs longer and answers the same (MAX_STEPS still bounds a call cycle)",
    ),
    "tasmopt.optimizer.conditions:known_branches#17": (
        "paths > MAX_PATHS",
        "a work limit, not a proof: without it the exploration runs longer and answers the same",
    ),
    "tasmopt.optimizer.loops:no_fall_through#0": (
        "if k == 0",
        "for the first section the slice before it is empty, so `bool(prev)` already answers False",
    ),
    "tasmopt.optimizer.loops:entered_sections#0": (
        "drop k == 0",
        "no_fall_through (the next operand) is False for the first section",
    ),
    "tasmopt.optimizer.conjugate:call_sites#1": (
        "drop line_kind(ln) != 'call'",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.conjugate:call_sites#2": (
        "drop len(words) != 2",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.conjugate:call_sites#3": (
        "never:",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.conjugate:call_sites#5": (
        "drop earlier is None",
        "a guarded site's skiz always has a line before it: at least the function's label",
    ),
    "tasmopt.optimizer.loops:_paths#3": (
        "drop nxt.name == 'call'",
        "no instruction but `call` has a label argument, so `nxt.arg in helpers` already fails",
    ),
    "tasmopt.optimizer.loops:_paths#4": (
        "drop isinstance(nxt.arg, str)",
        "an int argument is never a helper's label",
    ),
    "tasmopt.optimizer.loops:_path_facts#0": (
        "drop before.unsupported",
        "the code is straight-line here (control flow is refused or cut off before the run), and every other instruction runs symbolically",
    ),
    "tasmopt.optimizer.loops:_path_facts#3": (
        "drop run.unsupported",
        "the code is straight-line here (control flow is refused or cut off before the run), and every other instruction runs symbolically",
    ),
    "tasmopt.optimizer.loops:_path_facts#8": (
        "_GUARD_KINDS",
        "every guard kind the symbolic VM records is in _GUARD_KINDS; the check fails closed on a kind added later",
    ),
    "tasmopt.optimizer.loops:_site_run#0": (
        "kind not in table",
        "a line that parses is an instruction of the table; a label stops the prefix first",
    ),
    "tasmopt.optimizer.loops:_site_run#2": (
        "if not prefix",
        "an empty prefix leaves st0 an entry variable: _site_ok, _site_counts_n and _constant_counter all refuse it",
    ),
    "tasmopt.optimizer.loops:_site_run#3": (
        "run.unsupported",
        "control flow stops the prefix before the run",
    ),
    "tasmopt.optimizer.loops:loop_shapes#0": (
        "if k == 0",
        "no_fall_through refuses the first section further down",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#1": (
        "drop run.unsupported",
        "the ISA pre-check before the run refuses control flow, the only instructions that do not run symbolically",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#2": (
        "drop run.delta != 1",
        "the next check (every entry element one deeper) fails for any other delta",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#3": (
        "drop run.outputs",
        "the ISA pre-check refuses every instruction with a side effect (output, RAM, input, sponge) before the run",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#4": (
        "drop run.ram",
        "the ISA pre-check refuses every instruction with a side effect before the run",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#5": (
        "never:",
        "the ISA pre-check and the shift check below refuse everything this one does",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#6": (
        "drop run.sponge",
        "the ISA pre-check refuses every instruction with a side effect before the run",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#7": (
        "drop any(run.consumed",
        "the ISA pre-check refuses every instruction with a side effect before the run",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#8": (
        "never:",
        "the ISA pre-check refuses every instruction with a side effect before the run",
    ),
    "tasmopt.optimizer.early_exit:_guard_only#10": (
        "_GUARD_KINDS",
        "every guard kind the symbolic VM records is in _GUARD_KINDS; the check fails closed on a kind added later",
    ),
    "tasmopt.optimizer.early_exit:_sites#1": (
        "drop line_kind(ln) != 'call'",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.early_exit:_sites#2": (
        "drop len(words) != 2",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.early_exit:_sites#3": (
        "never:",
        "only a `call` names a label in TASM, and `call L x` does not parse",
    ),
    "tasmopt.optimizer.early_exit:_sites#4": (
        "if nxt is None",
        "a `call` is never the last line of a function's text: each section ends in a terminator",
    ),
    "tasmopt.optimizer.early_exit:_sites#6": (
        "drop len(after) != 2",
        "`pop` takes exactly one numeric argument in TASM that parses",
    ),
    "tasmopt.optimizer.early_exit:_sites#7": (
        "drop not after[1].isdigit()",
        "`pop` takes exactly one numeric argument in TASM that parses",
    ),
    "tasmopt.optimizer.early_exit:_sites#8": (
        "drop after[1] == '0'",
        "`pop 0` is no instruction (pop takes 1 to 5)",
    ),
    "tasmopt.optimizer.pointers:prove_change#0": (
        "drop run.unsupported",
        "T and T^-1 are straight-line stack code (change_code)",
    ),
    "tasmopt.optimizer.pointers:prove_change#10": (
        "never: if run.unsupported is not None",
        "T is straight-line stack code (change_code)",
    ),
    "tasmopt.optimizer.pointers:prove_change#12": (
        "drop k % P == 0",
        "change_code raises for a test scale of 0 first",
    ),
    "tasmopt.optimizer.pointers:_site_insertion#0": (
        "drop kind not in table",
        "a line before a call is an instruction of the table, or a label (which ends the search first)",
    ),
    "tasmopt.optimizer.pointers:find_pointer_loops#0": (
        "is_control_flow",
        "_changes extracts the body's dataflow, which refuses control flow: no change, no loop",
    ),
    "tasmopt.optimizer.pointers:find_pointer_loops#1": (
        "drop not sites",
        "a loop no call reaches: rewriting it changes no execution",
    ),
    "tasmopt.optimizer.absorb:_same#5": (
        "drop a.delta == b.delta",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.absorb:_same#6": (
        "drop a.guards == b.guards",
        "_body_ok allows the old body no guard but sponge_initialized, and guarded_enter_ok and _new_body_ok allow the templates none",
    ),
    "tasmopt.optimizer.absorb:_body_ok#0": (
        "drop old.delta != 0",
        "a pre-check of what _same establishes (delta, sponge, guards, stack)",
    ),
    "tasmopt.optimizer.absorb:_body_ok#1": (
        "drop old.sponge is None",
        "a pre-check of what _same establishes (the new body absorbs: the sponges differ)",
    ),
    "tasmopt.optimizer.absorb:_body_ok#2": (
        "drop old.guards",
        "a pre-check of what _same establishes (the guards compared)",
    ),
    "tasmopt.optimizer.absorb:_body_ok#3": (
        "never:",
        "a pre-check of what _same establishes (delta, sponge, guards)",
    ),
    "tasmopt.optimizer.absorb:_body_ok#4": (
        "never:",
        "a pre-check of what _same establishes (the stacks compared)",
    ),
    "tasmopt.optimizer.absorb:_new_body_ok#0": (
        "drop run.unsupported",
        "the templates are straight-line",
    ),
    "tasmopt.optimizer.absorb:_new_body_ok#1": (
        "drop run.delta != 0",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.absorb:_new_body_ok#8": (
        "drop both.unsupported",
        "the templates are straight-line",
    ),
    "tasmopt.optimizer.absorb:_new_body_ok#9": (
        "drop both.delta != -under",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.absorb:find_absorptions#1": (
        "_ABSORB_MEM",
        "a re-entry guard: a loop already in the new shape would go through the same proofs",
    ),
    "tasmopt.optimizer.dots:_proven#2": (
        "drop lhs.delta == rhs.delta",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.dots:_proven#8": (
        "drop run.unsupported",
        "the templates are straight-line",
    ),
    "tasmopt.optimizer.dots:_proven#9": (
        "drop run.delta != -under",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.dots:find_dot_loops#0": (
        "_DOTS",
        "a re-entry guard: a loop already in the new shape would go through the same proofs",
    ),
    "tasmopt.optimizer.reverse:_swap_ends_ok#0": (
        "drop run.unsupported",
        "the template is straight-line",
    ),
    "tasmopt.optimizer.reverse:_swap_ends_ok#1": (
        "drop run.delta != 0",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.reverse:_walk_ends_ok#1": (
        "drop run.delta != 0",
        "the stack comparison that follows sees any other stack delta",
    ),
    "tasmopt.optimizer.reverse:_reductions#1": (
        "drop run.delta != 0",
        "the element checks below (st6 kept, every changed element a constant step or the accumulator) fail for any other delta",
    ),
    "tasmopt.optimizer.reverse:_factor#0": (
        "never:",
        "the closing check (a * D is p) fails for a term without the accumulator",
    ),
    "tasmopt.optimizer.reverse:_dead_after#1": (
        "if kind == ':'",
        "a label line does not parse as an instruction: refused just below",
    ),
    "tasmopt.optimizer.reverse:_dead_after#2": (
        "is_control_flow",
        "the symbolic run stops at control flow: `run.unsupported` refuses it below",
    ),
    "tasmopt.optimizer.branches:_pure#0": (
        "drop len(body) <= MAX_BODY",
        "a size limit, not a proof: prove_select is exact for bodies of any length",
    ),
    "tasmopt.optimizer.branches:_one_pure#0": (
        "if text.endswith(':')",
        "a label does not parse as an instruction: refused just below",
    ),
    "tasmopt.optimizer.branches:_one_pure#1": (
        "drop len(ins) == 1",
        "the text is one line: one instruction or a parse error",
    ),
    "tasmopt.optimizer.branches:_boolean_before#0": (
        "drop not prev",
        "a skiz is never the first line of a function: its label is",
    ),
    "tasmopt.optimizer.branches:_boolean_before#1": (
        "drop line_kind(lines[prev[-1]]) == ':'",
        "a label's text is no boolean instruction: refused just below",
    ),
    "tasmopt.optimizer.branches:_boolean_before#2": (
        "never:",
        "a skiz has a line before it, and a label's text is no boolean instruction",
    ),
    "tasmopt.optimizer.branches:_then_leaves_zero#0": (
        "drop run.unsupported",
        "the path is pure straight-line code (_pure)",
    ),
    "tasmopt.optimizer.shortcuts:shortcut_calls#0": (
        "if k == 0",
        "a call of a one-instruction section is that instruction, the entry's too; the entry section is never removed (no_fall_through is False for it)",
    ),
    "tasmopt.optimizer.shortcuts:shortcut_calls#4": (
        "if not single and (not whole)",
        "an early exit: with nothing to replace, `done` stays empty and the function returns None below",
    ),
    "tasmopt.optimizer.inline:straight_body#1": (
        "drop parts[1]",
        "helpers are reached only by call, and a main body with a call is refused by the loop below",
    ),
    "tasmopt.optimizer.inline:straight_body#3": (
        "drop n is None",
        "`None not in table` refuses it in the next operand",
    ),
    "tasmopt.optimizer.inline:straight_body#4": (
        "drop n not in table",
        "the main body holds no labels (inline_parts), so every line's kind is an instruction",
    ),
    "tasmopt.optimizer.inline:straight_body#6": (
        "drop table[n].may_skip_next",
        "skiz is control flow: refused by the operand before",
    ),
    "tasmopt.optimizer.inline:_Run.attempt#0": (
        "if not spans",
        "an early exit: with nothing inlined the candidate is the function itself, which refusal never keeps (not fewer cycles)",
    ),
    "tasmopt.optimizer.inline:_Run.attempt#1": (
        "if ref_sites != sites",
        "an early exit: check_aligned refuses a candidate whose call skeleton differs from the reference's",
    ),
}


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
_Edit = tuple[ast.If | ast.Return, Any]


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


def _operands(node: ast.If | ast.Return) -> list[ast.expr]:
    """The operands a ``("drop", k)`` mutant picks from: of the test's ``or`` or
    ``not (and)``, or of the returned ``and``."""
    e = node.test if isinstance(node, ast.If) else node.value
    if isinstance(e, ast.UnaryOp):
        e = e.operand
    assert isinstance(e, ast.BoolOp)
    return e.values


def _describe(node: ast.If | ast.Return, how: Any) -> str:
    """What the mutant drops, then where: ``"drop `b` from: if a or b"``, shortened."""
    if isinstance(node, ast.If):
        where = f"if {ast.unparse(node.test)}"
        first = "never" if how == "never" else None
    else:
        assert node.value is not None
        where = f"return {ast.unparse(node.value)}"
        first = "True for" if how == "true" else None
    if first is None:
        first = f"drop {ast.unparse(_operands(node)[how[1]])} from"
    shown = f"{first}: {where}"
    return shown if len(shown) <= 200 else shown[:197] + "..."


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


def _mutate(node: ast.If | ast.Return, how: Any) -> None:
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
