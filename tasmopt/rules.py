"""Classical rewrite rules for straight-line TASM: a candidate source that is cheap and always on.

Two kinds of rules, both applied to a fixpoint:

* **peephole patterns** on adjacent instructions — ``swap 1; ..; swap k`` as ``pick k`` and
  ``swap k; ..; swap 1`` as ``place k``, redundant ``dup``/``push`` followed by
  ``pop``, ``swap i; swap i``, ``swap 1`` before a commutative operation, ``push c; add`` ->
  ``addi c``, merged ``pop``s and ``addi``s, multiplications by one, no-ops, RAM round trips
  of adjacent cells merged (``push a; write_mem 1; pop 1; push a+1; write_mem 1`` ->
  ``push a; write_mem 2``);
* **window re-synthesis**: a short window whose whole effect is to drop some stack elements
  and push constants or copies of surviving elements, with no side effect or failure (e.g.
  ``push c; split; pop 1`` -> ``push hi(c)``, ``dup 0; split; pop 3`` -> nothing), as the
  symbolic executor sees it, is replaced by the pops, pushes and dups that do just that.

Rules only *propose*: every candidate goes through the verifier before it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tasmopt.isa import P, instruction_set, names_where, swap_chain
from tasmopt.report import CompileOptions
from tasmopt.sources import BlockTask
from tasmopt.tasm.program import Instr
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.symbolic import run_symbolic

__all__ = ["RULES", "rewrite", "candidates", "RulesSource"]

_COMMUTATIVE = names_where(lambda i: i.commutative)

_MAX_FOLD_WINDOW = 6


def _is(ins: Instr, name: str, arg: object = None) -> bool:
    return ins.name == name and (arg is None or ins.arg == arg)


def _peephole(code: Sequence[Instr], i: int) -> tuple[list[Instr], int] | None:  # noqa: C901
    a = code[i]
    b = code[i + 1] if i + 1 < len(code) else None
    c = code[i + 2] if i + 2 < len(code) else None
    if a.name == "nop" or (a.name in ("swap", "pick", "place") and a.arg == 0):
        return [], 1
    if a.name == "addi" and a.arg == 0:
        return [], 1
    if b is None:
        return None
    chain = _swap_chain(code, i)
    if chain is not None:
        return chain
    merged = _memory_run(code, i)
    if merged is not None:
        return merged
    # a value pushed and dropped at once
    if a.name in ("push", "dup") and _is(b, "pop"):
        return ([Instr("pop", b.arg - 1)] if b.arg > 1 else []), 2
    if a.name == "swap" and _is(b, "swap", a.arg):
        return [], 2
    if _is(a, "pick", 1) or _is(a, "place", 1):
        if _is(b, "pick", 1) or _is(b, "place", 1):
            return [], 2
    if _is(a, "swap", 1) and b.name in _COMMUTATIVE:
        return [b], 2
    if a.name == "push" and _is(b, "add"):
        return ([Instr("addi", a.arg)] if a.arg else []), 2
    if a.name == "push" and _is(b, "mul") and a.arg == 1:
        return [], 2
    if a.name == "addi" and b.name == "addi":
        s = (a.arg + b.arg) % P
        return ([Instr("addi", s)] if s else []), 2
    if a.name == "push" and b.name == "addi":
        return [Instr("push", (a.arg + b.arg) % P)], 2
    if _is(a, "pop") and _is(b, "pop") and a.arg + b.arg <= 5:
        return [Instr("pop", a.arg + b.arg)], 2
    if _is(a, "dup", 0) and _is(b, "swap", 1):
        return [a], 2
    if c is not None and a.name == "push" and b.name == "push" and c.name in ("add", "mul"):
        v = (a.arg + b.arg) % P if c.name == "add" else a.arg * b.arg % P
        return [Instr("push", v)], 3
    if (
        c is not None
        and _is(a, "push", P - 1)
        and _is(b, "mul")
        and _is(c, "push", P - 1)
        and i + 3 < len(code)
        and _is(code[i + 3], "mul")
    ):
        return [], 4
    return None


def _swap_chain(code: Sequence[Instr], i: int) -> tuple[list[Instr], int] | None:
    """The longest ``pick``/``place`` chain of swaps at ``i`` (`tasmopt.isa.swap_chain`: the
    frontend's order-preserving moves) as one instruction."""
    args = []
    for ins in code[i:]:
        if ins.name != "swap" or not isinstance(ins.arg, int):
            break
        args.append(ins.arg)
    chain = swap_chain(args)
    return None if chain is None else ([Instr(chain[0], chain[1])], chain[2])


#: RAM pointer step per word of ``read_mem`` / ``write_mem`` (ISA table ``pointer_step``).
_POINTER_STEP = {i.name: i.pointer_step for i in instruction_set() if i.pointer_step}


def _memory_run(code: Sequence[Instr], i: int) -> tuple[list[Instr], int] | None:
    """Consecutive RAM round trips as one (a spill or reload of adjacent cells, word by word):

    * ``push a; write_mem m; pop 1; push a+m`` -> ``push a; write_mem m`` (the pointer the
      instruction leaves is the one pushed again; likewise ``read_mem`` with ``a-m``, and
      after several stores or loads in a row, with ``m`` their words together);
    * ``write_mem m; write_mem n`` -> ``write_mem m+n`` and ``read_mem m; read_mem n`` ->
      ``read_mem m+n`` for ``m + n <= 5``: the second continues at the pointer the first
      left, in the same direction and word order; for ``m + n > 5`` (``m < 5``) the words
      move to the first (``write_mem 5; write_mem m+n-5``), so a run of them packs into
      fives (twelve ``read_mem 4`` become nine ``read_mem 5`` and a ``read_mem 3``)."""
    a = code[i]
    b = code[i + 1]
    if a.name in _POINTER_STEP and b.name == a.name and a.arg < 5:
        if a.arg + b.arg <= 5:
            return [Instr(a.name, a.arg + b.arg)], 2
        return [Instr(a.name, 5), Instr(a.name, a.arg + b.arg - 5)], 2  # fill the first
    if a.name != "push" or b.name not in _POINTER_STEP:
        return None
    # push a; M k1; ..; M kj; pop 1; push a + step*(k1 + .. + kj) -> push a; M k1; ..; M kj
    j, moved = i + 1, 0
    while j < len(code) and code[j].name == b.name:
        moved += code[j].arg
        j += 1
    if (
        j + 1 < len(code)
        and _is(code[j], "pop", 1)
        and code[j + 1].name == "push"
        and code[j + 1].arg % P == (a.arg + _POINTER_STEP[b.name] * moved) % P
    ):
        return list(code[i:j]), j + 2 - i
    return None


def _simplify_window(code: Sequence[Instr], i: int) -> tuple[list[Instr], int] | None:
    """Re-synthesize ``code[i:i+k]`` when its whole effect is: drop some entry elements, then
    push constants and copies of entry elements still on the stack (no side effect, no
    failure). E.g. ``push c; split; pop 1`` -> ``push hi(c)``; ``dup 0; split; pop 3`` -> (nothing);
    ``dup 1; dup 0; swap 3; pop 3`` -> ``pop 1``."""
    for k in range(min(_MAX_FOLD_WINDOW, len(code) - i), 1, -1):
        window = code[i : i + k]
        if window[-1].name != "pop" and not any(ins.name == "push" for ins in window):
            continue
        ctx = ExprContext()
        run = run_symbolic(window, ctx)
        if (
            run.unsupported
            or run.guards
            or run.outputs
            or run.ram
            or run.sponge is not None
            or any(run.consumed.values())
        ):
            continue
        # the materialized region is: untouched entry elements at the bottom, then the rest
        stack = run.stack
        keep = 0
        while keep < len(stack) and stack[keep] is ctx.var("s", run.base - 1 - keep):
            keep += 1
        dropped = run.base - keep
        repl: list[Instr] = []
        left = dropped
        while left > 0:
            repl.append(Instr("pop", min(5, left)))
            left -= min(5, left)
        entry_depth = {ctx.var("s", j).id: j - dropped for j in range(dropped, run.base)}
        pushed = 0
        for v in stack[keep:]:
            if v.is_const:
                repl.append(Instr("push", v.const))
            elif v.id in entry_depth and entry_depth[v.id] + pushed <= 15:
                repl.append(Instr("dup", entry_depth[v.id] + pushed))
            else:
                repl = None  # type: ignore[assignment]  # a rule that does not apply returns None; the loop skips it
                break
            pushed += 1
        if repl is not None and len(repl) < k:
            return repl, k
    return None


#: A rule looks at ``code[i:]``; if it applies, it returns ``(replacement, k)``: the
#: instructions that replace ``code[i:i+k]``.
RULES: dict[str, Callable[[Sequence[Instr], int], tuple[list[Instr], int] | None]] = {
    "peephole": _peephole,
    "window": _simplify_window,
}


def rewrite(
    code: Sequence[Instr], rules: Sequence[str] = tuple(RULES), max_passes: int = 50
) -> list[Instr]:
    """Apply ``rules`` left to right, repeatedly, until nothing changes.

    Args:
        code: a straight-line fragment.
        rules: names from `RULES`.
        max_passes: bound on full passes (every rule shortens the code, except the one
            that packs memory words into the earlier of two ``read_mem``/``write_mem``,
            which moves words one way only, so a fixpoint is reached; the bound only guards
            against a rule that does neither).
    """
    out = list(code)
    for _ in range(max_passes):
        changed = False
        i = 0
        while i < len(out):
            for name in rules:
                hit = RULES[name](out, i)
                if hit is not None:
                    repl, k = hit
                    out[i : i + k] = repl
                    changed = True
                    i = max(0, i - 3)
                    break
            else:
                i += 1
        if not changed:
            break
    return out


def candidates(code: Sequence[Instr]) -> list[list[Instr]]:
    """Distinct rewrites of ``code`` worth verifying: all rules together, then each alone
    (so that one rule the verifier rejects does not hide the others' savings)."""
    seen = {tuple(code)}
    out: list[list[Instr]] = []
    for names in (tuple(RULES),) + tuple((n,) for n in RULES):
        cand = rewrite(code, names)
        key = tuple(cand)
        if key not in seen:
            seen.add(key)
            out.append(cand)
    return out


class RulesSource:
    """The rewrite rules as a candidate source (`tasmopt.sources.CandidateSource`)."""

    name = "rules"

    def propose(
        self, tasks: Sequence[BlockTask], options: CompileOptions
    ) -> list[list[list[Instr]]]:
        """The rules' candidates per block, in order; once ``options.deadline`` has expired,
        none for the blocks left (a 60-function module's rewrites take ~0.1 s: past a
        200 ms deadline that is an overshoot)."""
        dl = options.deadline
        return [[] if dl is not None and dl.expired else candidates(t.baseline) for t in tasks]
