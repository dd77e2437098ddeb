"""The observable-behaviour contract of one request (design §2): which scratch cells each
function's proofs may treat as unobservable.

A cell counts for a function when `tasmopt.vm.scratch.private_cells` proves it private to a
function of that function's call closure, on our lowering's text *and* on the client's
baseline text when one was sent (both are programs the proofs run on). Whatever either text
does not prove stays observable.
"""

from __future__ import annotations

from tasmopt.isa import IsaVariant
from tasmopt.module import ModuleText
from tasmopt.vm.scratch import ScratchAnalysis, private_cells

__all__ = ["analyse", "private_by_function"]


def analyse(text: ModuleText, isa: IsaVariant) -> ScratchAnalysis:
    """`private_cells` of one module text (every function's own sections; the lines outside
    every function too)."""
    owned = [False] * len(text.lines)
    functions: dict[str, list[str]] = {}
    for name, fn in text.functions.items():
        functions[name] = text.section_lines(name)
        for a, b in fn.sections:
            owned[a:b] = [True] * (b - a)
    other = [ln for ln, own in zip(text.lines, owned) if not own]
    return private_cells(functions, other, isa)


def private_by_function(
    ours: ModuleText, client: ModuleText | None, isa: IsaVariant
) -> dict[str, frozenset[int]]:
    """Per function of ``ours``: the private cells owned by its call closure, proven on both
    texts (a cell needs the same owner in each)."""
    a = analyse(ours, isa)
    owner = dict(a.owner)
    if client is not None:
        b = analyse(client, isa)
        owner = {c: f for c, f in owner.items() if b.owner.get(c) == f}
    if not owner:
        return {}
    out: dict[str, frozenset[int]] = {}
    for name in ours.functions:
        fs = set(ours.closure(name))
        cells = frozenset(c for c, f in owner.items() if f in fs)
        if cells:
            out[name] = cells
    return out
