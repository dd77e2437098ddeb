"""Which functions of a module an anytime compile looks at first (issue 34 item 1: order the
work by expected saving).

A module's cost, as a build pays it and as `tasmopt.optimizer.compile` reports it, is every
function measured with its callees: a function's own code runs once for itself and once for
every call path that reaches it from another function of the module. A leaf that many
functions call (keccak256's ``u32_pow2``, 351 cycles, under five layers of rotations) weighs
far more than its own size says. So the static weight of a function is

    weight(f) = own instructions(f) * paths(f),   paths(f) = 1 + sum over call sites g -> f
                                                                 of paths(g)

(``paths`` counts the call paths into ``f`` from every function of the module, each call site
once; loops are not unrolled, so it is a static estimate, not a profile). The focus of a
compile under a deadline is the heaviest `FOCUS_FUNCTIONS` function(s) whose weight is
concentrated (call paths at least `FOCUS_DENSITY` times the module's average per instruction),
within `FOCUS_SHARE` of the module's instructions: the first tier of `tasmopt.optimizer.anytime` proves what it can on them before
the rest of the module is even prepared, so that the answer at a short deadline carries the
rewrites worth most (the rest of the module follows in the next tier, each function keeping
the better proven state).
"""

from __future__ import annotations

from collections.abc import Iterable

from tasmopt.module import ModuleText, line_kind

__all__ = [
    "weights",
    "focus",
    "FOCUS_FUNCTIONS",
    "FOCUS_SHARE",
    "FOCUS_DENSITY",
    "FOCUS_MIN_INSTRUCTIONS",
    "FOCUS_SEARCH_INSTRUCTIONS",
    "FOCUS_SEARCH_WITHIN_S",
    "FOCUS_SEARCHED_FUNCTIONS",
    "FOCUS_WITHIN_S",
]

#: Most functions in a focus: the first tier should take a fraction of what the quick tier
#: over the whole module takes. One, not three: a cold keccak256 compile ended its focus tier
#: 260 ms in with ``u32_pow2``, ``shl_u32`` and ``xor_lane``, 190 ms in with ``u32_pow2``
#: alone, whose rewrite makes its callers cheap as returned too; on keccak256, sha256, coin and poseidon
#: (`benchmarks/anytime.py`, side by side) the answers at 0.15/0.2/0.5 s saved
#: 3,050/4,082/6,501 cycles as returned with one, 2,946/3,456/5,167 with three, the same at
#: 1 s; and the cold answers of `benchmarks/latency.py` 13% of the settled saving against 9%.
FOCUS_FUNCTIONS = 1

#: Most of the module's own instructions (a share) the focus may hold.
FOCUS_SHARE = 2 / 3

#: A focus tier runs only under a deadline at most this far off, seconds: a request's (the
#: service's default is 200 ms), not a deepening run's (`DEEPEN_TIMEOUT_S`, a safety bound:
#: there the quick tier over the whole module finishes and a focus tier only repeats part of
#: it). 10 s is what a full-effort compile of a real module may take (issue 34 item 3).
FOCUS_WITHIN_S = 10.0

#: A function joins the focus only when its call paths are at least this many times the
#: module's average (weighted by instructions): when its weight is concentrated, proving it
#: first is worth more per second than the module in order. Measured on the real modules
#: (`benchmarks/anytime.py`): a focus without concentration (coin: weight share 0.62 for an
#: instruction share of 0.52) only delays the quick tier.
FOCUS_DENSITY = 2.0

#: Below this many instructions in all, a module gets no focus tier (the quick tier over the
#: whole module is as short), unless its focus is small enough to be searched
#: (`FOCUS_SEARCH_INSTRUCTIONS`).
FOCUS_MIN_INSTRUCTIONS = 400

#: A focus of at most this many instructions gets the request's candidate sources in its
#: tier, the search too, not only the rules: a small function on many call paths is where a
#: cold answer's search pays most (std.crypto.poseidon's ``sbox``, 13 instructions on 55
#: call paths: 13 -> 7 cycles by the search in 65 ms, nothing by the rules). A large one
#: would spend the deadline searching (keccak256's ``u32_pow2``, 566 instructions: a cold
#: answer at 150 ms saved 0 cycles searched, 2,792 with the rules). Measured with
#: `benchmarks/anytime.py --deadlines 0.15` on the real modules: 3,687 cycles saved without
#: the searched focus, 3,919 with it, 4,232 with small modules searched too.
FOCUS_SEARCH_INSTRUCTIONS = 32

#: A focus is searched only under a deadline at most this far off, seconds: there the quick
#: tier over the whole module does not end in time for most modules and the search tier
#: never starts. With more time the search in the focus tier only delays the quick tier
#: (`benchmarks/anytime.py`, 0.5 s: std.crypto.poseidon 934 cycles saved with it, 1,249
#: without).
FOCUS_SEARCH_WITHIN_S = 0.3

#: Most functions in a searched focus (the next densest join while the focus stays within
#: `FOCUS_SEARCH_INSTRUCTIONS`): sha256's ``rotr`` (16 instructions, 61 call paths) and
#: ``add32`` (12, 48): 399 cycles saved as returned at 0.15 s against 147 with ``rotr``
#: alone; a third function changed nothing measurable (4,484 against 4,480 in all).
FOCUS_SEARCHED_FUNCTIONS = 2


def _own(text: ModuleText, name: str, by_label: dict[str, str]) -> tuple[int, dict[str, int]]:
    """(own instruction lines, call sites per callee of this module) of function ``name``;
    ``by_label``: function name by label."""
    size = 0
    calls: dict[str, int] = {}
    for line in text.section_lines(name):
        kind = line_kind(line)
        if kind is None or kind == ":":
            continue
        size += 1
        if kind == "call":
            parts = line.split("//", 1)[0].split()
            callee = by_label.get(parts[1]) if len(parts) > 1 else None
            if callee is not None and callee != name:
                calls[callee] = calls.get(callee, 0) + 1
    return size, calls


def weights(text: ModuleText) -> dict[str, tuple[int, int]]:
    """Per function of ``text``: (own instructions, call paths into it from every function of
    the module, itself included). A function on a call cycle counts the paths found before
    the cycle closes (a cycle cannot run to a return anyway)."""
    by_label = {f.label: f.name for f in text.functions.values()}
    own = {name: _own(text, name, by_label) for name in text.functions}
    callers: dict[str, list[tuple[str, int]]] = {name: [] for name in text.functions}
    for g, (_, calls) in own.items():
        for f, n in calls.items():
            callers[f].append((g, n))
    paths: dict[str, int] = {}

    def count(name: str, seen: frozenset[str]) -> int:
        if name in paths:
            return paths[name]
        total = 1
        for g, n in callers[name]:
            if g not in seen:
                total += n * count(g, seen | {name})
        if not seen:
            paths[name] = total
        return total

    for name in text.functions:
        count(name, frozenset())
    return {name: (own[name][0], paths[name]) for name in text.functions}


def focus(
    text: ModuleText, workable: Iterable[str], remaining_s: float
) -> tuple[frozenset[str], bool]:
    """The heaviest of the ``workable`` functions by `weights` (own instructions times call
    paths) with call paths at least `FOCUS_DENSITY` times the average, in that order, at most
    `FOCUS_FUNCTIONS`, up to the first that would take their own instructions past
    `FOCUS_SHARE` of the workable functions'; and whether its tier searches it: a focus of at
    most `FOCUS_SEARCH_INSTRUCTIONS` instructions with at most `FOCUS_SEARCH_WITHIN_S`
    seconds left (``remaining_s``), which then takes up to `FOCUS_SEARCHED_FUNCTIONS` of the
    densest within that size. Empty when no function's weight is concentrated, or when
    the module is too small to need a focus (`FOCUS_MIN_INSTRUCTIONS`) and it would not be
    searched."""
    w = weights(text)
    names = [n for n in workable if n in w and w[n][0] > 0]
    total = sum(w[n][0] for n in names)
    if not total:
        return frozenset(), False
    average = sum(w[n][0] * w[n][1] for n in names) / total
    dense = [n for n in names if w[n][1] >= FOCUS_DENSITY * average]
    order = sorted(dense, key=lambda n: (-w[n][0] * w[n][1], n))
    chosen: list[str] = []
    size = 0
    for n in order[:FOCUS_FUNCTIONS]:
        if size + w[n][0] > total * FOCUS_SHARE:
            break
        size += w[n][0]
        chosen.append(n)
    searched = bool(chosen) and size <= FOCUS_SEARCH_INSTRUCTIONS
    searched = searched and remaining_s <= FOCUS_SEARCH_WITHIN_S
    if searched:
        for n in order[len(chosen) : FOCUS_SEARCHED_FUNCTIONS]:
            if size + w[n][0] > FOCUS_SEARCH_INSTRUCTIONS:
                break
            size += w[n][0]
            chosen.append(n)
    if total < FOCUS_MIN_INSTRUCTIONS and not searched:
        return frozenset(), False  # the quick tier over the whole module is as short
    return frozenset(chosen), searched
