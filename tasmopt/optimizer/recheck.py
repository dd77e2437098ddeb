"""Spot checks of the result cache: prove a stored answer again, on fresh witnesses.

A cache entry was proven when it was stored; a spot check repeats that proof for a sample of
served hits with a new witness seed, so that a verifier bug that let a wrong program in has a
second chance to be caught (the service then deletes the entry and logs an error).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.optimizer.contract import private_by_function
from tasmopt.optimizer.prepare import decode_tir
from tasmopt.report import CompileOptions
from tasmopt.vm.equivalence import FunctionVerdict, check_aligned, check_function

#: How `check_aligned` says that two programs have different control skeletons.
SKELETONS_DIFFER = "control skeletons differ"

__all__ = ["recheck", "measure_as_returned"]


def recheck(
    tir: Any,
    baseline_tasm: str | None,
    name: str,
    lines: Sequence[str],
    *,
    options: CompileOptions,
    rewrites: Sequence[str] = (),
) -> str | None:
    """Prove again that ``lines`` may replace function ``name`` of this request.

    The reference is what the entry was proven against: the client's program of the
    function's call closure when a baseline was sent, else our lowering's; the candidate is
    our lowering's closure with ``lines`` in place of the function. Both the differential
    check and the alignment proof run with ``options.seed`` (pick a fresh one) and
    ``options.witnesses``, within ``options.deadline``.

    ``rewrites``: the function-level passes whose rewrite the entry holds (its report's
    ``rewrites``). Such a rewrite may change the control skeleton (a branch folded, a loop
    rebuilt) and was proven by the pass's own obligations, which this check cannot replay:
    for it a failed alignment that says the skeletons differ is not a finding, and the
    differential check on the fresh witnesses is what the spot check repeats. Without
    rewrites the alignment proof must hold, as it did when the entry was stored.

    Returns:
        None when proven; else why not (``"unverified: deadline ..."`` when out of time).

    Raises:
        TirError, TasmSyntaxError: the request itself is malformed (it was not, when the
            entry was stored).
    """
    ops = decode_tir(tir)
    low = lower(ops, isa=options.isa)
    ours = ModuleText.from_lowering(low)
    if name not in ours.functions:
        return f"function {name!r} is not in this TIR"
    labels = {n: f.label for n, f in ours.functions.items()}
    client = None
    if baseline_tasm is not None:
        client = ModuleText.from_text(baseline_tasm, labels)
        if name not in client.functions:
            return f"function {name!r} is not in the baseline"
        reference = client.harness(name, options.isa)
    else:
        reference = ours.harness(name, options.isa)
    private = private_by_function(ours, client, options.isa).get(name, frozenset())
    try:
        candidate = ours.harness(name, options.isa, override={name: list(lines)})
    except TasmSyntaxError as exc:
        return f"stored lines do not assemble: {exc}"
    v = check_function(
        reference,
        candidate,
        witnesses=options.witnesses,
        seed=options.seed,
        deadline=options.deadline,
        private_cells=private,
    )
    if not v.equivalent:
        return v.reason or "differs"
    proof = check_aligned(
        reference,
        candidate,
        witnesses=options.witnesses,
        seed=options.seed,
        deadline=options.deadline,
        private_cells=private,
    )
    if proof.equivalent:
        return None
    if rewrites and SKELETONS_DIFFER in (proof.reason or ""):
        return None  # a pass's rewrite: its proof is not an alignment (docstring)
    return f"not proven: {proof.reason}"


def measure_as_returned(
    client: ModuleText, out: ModuleText, name: str, *, witnesses: int = 16, seed: int = 0
) -> FunctionVerdict | None:
    """Function ``name`` of a returned module run against the client's program of it, each
    with its callees as that module holds them (so the costs are what a build pays, callees'
    rewrites included, whatever the answer's report says), on the verifier's witnesses:
    ``cycles`` and ``baseline_cycles`` (clock cycles), ``witness >= 0`` when a witness shows
    them to differ (a verifier bug), ``halted == 0`` when no witness ran the client's program
    to its return. None when either closure does not assemble (upstream text of TIR we
    cannot lower). Used by the benchmarks that measure answers (`benchmarks/latency.py`,
    `benchmarks/anytime.py`)."""
    try:
        ref = client.harness(name, "release")
        cand = out.harness(name, "release")
    except TasmSyntaxError:
        return None
    return check_function(ref, cand, witnesses=witnesses, seed=seed)
