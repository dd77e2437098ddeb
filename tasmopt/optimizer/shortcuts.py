"""Function-level pass ``shortcuts``: calls of one-instruction subroutines replaced by the
instruction, and the one unskippable call of a longer one by its body (issue 11, calls).

The lowering puts every branch body in a subroutine, ``skiz; call T`` with ``T: <body>;
return``, even when the body is one instruction (``if x != 0 { inv(x) }``: ``T: invert;
return``), and a body that only calls a function is ``T: call G; return``. Experts write
``skiz; invert`` (``skiz`` skips exactly the next instruction, whatever its size) and
``skiz; call G``. Per taken branch that saves the ``call``/``return`` pair (two cycles and
a jump-stack row), and the subroutine goes when nothing else reaches it.

Rewrites, for ``T`` a section of the function whose instructions are exactly ``X; return``:

* ``call T`` -> ``X`` when ``X`` is not control flow (``X`` runs, then control continues
  after the call, as after ``T``'s ``return``);
* ``call T`` -> ``call G`` when ``X`` is ``call G`` (``G`` returns to ``T``'s ``return``,
  which returns to the caller: the same place; ``G``'s own ``recurse`` targets ``G``'s
  frame either way).

* ``call T`` -> ``X1 ... Xn`` when ``T`` is ``X1 ... Xn; return`` with no control flow in
  it, this call is the only one of ``T`` in the module and no instruction before it may skip
  it (a ``for`` body left unguarded by ``early_exit``; the program does not grow: the ``call``
  and ``return`` words go).

The first two replace one instruction by one, so a ``skiz`` before it skips exactly the same
thing; the third is only made where nothing can skip the call.
Proof: Triton VM semantics of ``call``/``return`` (spec: ``call`` pushes the return address
and jumps, ``return`` pops it and jumps there); only the jump stack differs, which is not
observable (design §2). A section is deleted only when no ``call`` in the module targets it
any more and the section before it cannot fall through into it. The rewritten function is
also run against its reference on the verifier's witnesses (`check_function`) and kept only
when equivalent there, cheaper in cycles and with no taller table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, instruction_set, names_where
from tasmopt.module import ModuleText, line_kind
from tasmopt.optimizer.inline import INDENT, _Run
from tasmopt.optimizer.loops import (
    _instrs,
    _sections,
    _unskippable,
    called_labels,
    no_fall_through,
)
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet

__all__ = ["shortcut_calls", "shortcut_stage"]

#: The instruction that ends a subroutine: returns, never recurses, never halts (ISA table).
_RETURN = names_where(lambda i: i.ends_frame and i.may_return and not i.may_recurse)


def _target(line: str) -> str | None:
    """The label a ``call`` line targets, else None."""
    if line_kind(line) != "call":
        return None
    words = line.split("//", 1)[0].split()
    return words[1] if len(words) == 2 else None


def shortcut_calls(
    lines: Sequence[str],
    isa: IsaVariant = "release",
    others_call: frozenset[str] = frozenset(),
    *,
    forward_only: bool = False,
) -> tuple[list[str], list[str]] | None:
    """``lines`` (one function's sections) with every call of a one-instruction section
    replaced (module docstring) and the sections no longer reached removed, and the labels
    shortcut; None when there is nothing to do. ``others_call``: labels other functions
    call (their sections stay). ``forward_only``: only ``call T`` with ``T: call G; return``
    (a branch body kept a call, for the if/else idiom the ``branches`` pass reads)."""
    table = instruction_set(isa)
    sections = _sections(lines)
    single: dict[str, str] = {}  # label -> the line that replaces a call of it
    whole: dict[str, list[str]] = {}  # label -> its body, for its one unskippable call
    sites = Counter(_target(ln) for ln in lines)
    for k, (label, start, end) in enumerate(sections):
        if k == 0:
            continue  # the function's own entry: a call of it is a call of the function
        try:
            ins = [x for _, x in _instrs(lines, start + 1, end, isa)]
        except (TasmSyntaxError, ValueError):
            continue
        if not ins or ins[-1].name not in _RETURN:
            continue
        if len(ins) == 2:
            x = ins[0]
            if x.name == "call" and isinstance(x.arg, str) and x.arg != label:
                single[label] = f"call {x.arg}"
            elif not table[x.name].is_control_flow and not forward_only:
                single[label] = str(x)
        elif (
            len(ins) > 2
            and not forward_only
            and sites[label] == 1
            and label not in others_call
            and not any(table[x.name].is_control_flow for x in ins[:-1])
        ):
            whole[label] = [str(x) for x in ins[:-1]]
    if not single and not whole:
        return None
    out: list[list[str]] = [[ln] for ln in lines]
    done: list[str] = []
    for i, ln in enumerate(lines):
        lab = _target(ln)
        if lab is not None and lab in single:
            # a chain (T: call U; U: X; return) resolves one step per run of the pass
            out[i] = [INDENT + single[lab]]
            done.append(lab)
        elif lab is not None and lab in whole and _unskippable(lines, i, isa):
            out[i] = [INDENT + x for x in whole[lab]]
            done.append(lab)
    if not done:
        return None
    flat = [ln for group in out for ln in group]
    sections = _sections(flat)
    still = called_labels([flat]) | others_call
    keep = []
    for k, (label, start, end) in enumerate(sections):
        unreachable = label not in still and no_fall_through(flat, sections, k)
        if not (label in done and unreachable):
            keep.append((start, end))
    head_end = sections[0][1] if sections else len(flat)
    kept = flat[:head_end] + [ln for a, b in keep for ln in flat[a:b]]
    return kept, sorted(set(done))


def shortcut_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Shortcut the calls of one-instruction sections in every function worked on in this
    run; a function keeps its result so far unless the rewritten one is equivalent on the
    verifier's witnesses, takes fewer cycles and raises no table."""
    run = _Run(fns, ours, client, options, sources, verify)
    for f in run.workable(fns):
        cur = run.returned(f.name)
        others = called_labels(run.others(f))
        found = shortcut_calls(cur, options.isa, others)
        if found is None:
            continue
        cand, labels = found
        best = run.measure(f, cur)
        if best is None:
            continue
        # a shortcut never costs a cycle; where the measured witness takes none, the cycles
        # tie and the smaller program wins (design §2 ranking)
        names = ", ".join(labels)
        run.keep(
            f,
            cand,
            best,
            f"shortcuts {names}",
            f"shortcuts {names} called inline",
            tie_if_smaller=True,
        )
