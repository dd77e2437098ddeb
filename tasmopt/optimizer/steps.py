"""The steps of a compile that are not function-level passes: ``decode``, ``lower``,
``cache``, ``prepare``, the block stage (``candidates``, ``verify``, ``rank``, ``splice``),
``client`` (re-search of a mismatched client text) and ``settle`` (statuses, cache entries,
assembly, the costs as returned). Each takes the shared `tasmopt.optimizer.pipeline.Run`;
`tasmopt.optimizer.PIPELINE` declares their order.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import Any

from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.blocks import split_functions
from tasmopt.module import ModuleText
from tasmopt.optimizer.candidates import build_checks, candidate_logprobs, propose
from tasmopt.optimizer.client_text import client_stage
from tasmopt.optimizer.contract import private_by_function
from tasmopt.optimizer.pipeline import Run
from tasmopt.optimizer.prepare import (
    cached_answers,
    decode_checked,
    lower_module,
    prepare_functions,
)
from tasmopt.optimizer.rank import rank
from tasmopt.optimizer.splice import (
    assemble,
    finish_function,
    mark_unmeasured,
    measure_with_callees,
)
from tasmopt.optimizer.state import (
    FunctionState,
    apply_costs,
    out_of_time,
    verify_within,
)
from tasmopt.report import CachedFunction, CompileOptions, CompileResult
from tasmopt.tir.codec import tir_hash
from tasmopt.vm.equivalence import Verdict, check_function

__all__ = [
    "CANDIDATE_SHARE",
    "decode_step",
    "lower_step",
    "cache_step",
    "prepare_step",
    "candidates_step",
    "verify_step",
    "rank_step",
    "splice_step",
    "client_step",
    "settle_step",
    "result_of",
]

log = logging.getLogger(__name__)

#: Share of the time left before a deadline that the candidate sources may use (the rest is
#: for verification, the whole-function proofs and the measurements).
CANDIDATE_SHARE = 0.5


def decode_step(r: Run) -> None:
    """JSON -> ops, validated (`TirError` names the op path)."""
    r.ops = decode_checked(r.tir, r.options)
    r.request_hash = tir_hash(r.ops)


def lower_step(r: Run) -> None:
    """Our lowering, its text by function, the client's text split the same way, and each
    function's private scratch cells (once per request)."""
    r.low, r.ours, r.client = lower_module(r.ops, r.baseline_tasm, r.options)
    r.labels = {name: f.label for name, f in r.ours.functions.items()}
    r.private = private_by_function(r.ours, r.client, r.options.isa)


def uses_cache(r: Run) -> bool:
    return r.cache is not None and r.options.use_cache


def cache_step(r: Run) -> None:
    """Result-cache keys of every function and the entries found."""
    assert r.cache is not None and r.low is not None and r.ours is not None
    r.keys, r.hits = cached_answers(r.cache, r.ops, r.low, r.ours, r.client, r.options, r.private)


def prepare_step(r: Run) -> None:
    """Per-function working state: references, cache hits, the rewritable blocks."""
    assert r.low is not None and r.ours is not None
    r.fns = prepare_functions(
        r.low, r.ours, r.client, r.options, r.timings, r.keys, r.hits, r.private, r.focus
    )
    chunks = {c.name: c.ops for c in split_functions(r.ops)}
    for f in r.fns:
        f.report.tir_hash = tir_hash(chunks.get(f.name, ()))
    r.tasks = [t for f in r.fns for t in f.tasks]


def candidates_step(r: Run) -> None:
    """Every source proposes for every block, within `CANDIDATE_SHARE` of the time left."""
    if not r.tasks or out_of_time(r.options) is not None:
        return
    dl = r.options.deadline
    share = dl if dl is None else dl.share(CANDIDATE_SHARE)
    r.proposals = propose(r.tasks, replace(r.options, deadline=share), r.sources)
    if share is not None and share.expired:
        for f in r.fns:
            if f.tasks:
                f.cut = f.cut or "candidate sources stopped by the deadline"


def verify_step(r: Run) -> None:
    """Every candidate checked against its baseline block (the ``verify`` backend)."""
    r.checks, r.owners = build_checks(r.tasks, r.proposals, r.options)
    r.verdicts = verify_within(r.verify, r.checks, r.options)
    for (ti, _), v in zip(r.owners, r.verdicts, strict=False):
        if not v.equivalent and (v.reason or "").startswith("unverified"):
            for f in r.fns:
                if r.tasks[ti] in f.tasks:
                    f.cut = f.cut or "checks left unverified at the deadline"
    if len(r.verdicts) != len(r.checks):
        log.error(
            "verify backend returned %d verdicts for %d checks", len(r.verdicts), len(r.checks)
        )
        r.verdicts = [Verdict(False, "rejected", "no verdict")] * len(r.checks)


def rank_step(r: Run) -> None:
    """Per block, the best accepted candidate."""
    model = r.sources.get("model") if "model" in r.proposals else None
    r.model_version = getattr(model, "version", None)
    logprobs = candidate_logprobs(r.tasks, r.proposals, r.sources)
    rank(r.fns, r.tasks, r.owners, r.checks, r.verdicts, logprobs, r.model_version)


def splice_step(r: Run) -> None:
    """Blocks spliced back; each changed function proven and measured as a whole."""
    assert r.ours is not None
    for f in r.fns:
        finish_function(f, r.ours, r.options)
    r.text = r.ours  # what the function-level passes work on


def client_step(r: Run) -> None:
    """Mismatched functions re-searched on the client's own text (opt-in)."""
    assert r.ours is not None
    r.text = client_stage(r.fns, r.ours, r.client, r.options, r.sources, r.verify)


def settle_step(r: Run) -> None:
    """Statuses and cache entries, the module assembled, the costs as returned."""
    assert r.low is not None and r.ours is not None
    r.entries = [_settle(f, r.options) for f in r.fns]
    r.module_text = assemble(r.fns, r.low, r.ours, r.client)
    out = ModuleText.from_text(r.module_text, r.labels)
    for f in r.fns:
        if f.name in out.functions:
            f.report.tasm = out.section_lines(f.name)
    measure_with_callees(r.fns, out, r.options)
    reference = r.client if r.client is not None else r.ours
    r.remeasured, r.unmeasured_hits = _costs_as_returned(
        r.fns, r.entries, out, reference, r.options
    )


def result_of(r: Run) -> CompileResult:
    """The `CompileResult` of a finished run."""
    assert r.low is not None
    reference_text = r.baseline_tasm if r.baseline_tasm is not None else r.low.text()
    return CompileResult(
        r.module_text,
        [f.report for f in r.fns],
        r.request_hash,
        reference_text,
        r.timings,
        model_version=r.model_version,
        cache_entries=[e for e in r.entries if e is not None] if r.keys else [],
        trajectories=[t for f in r.fns for t in f.trajectories],
        remeasured=r.remeasured if r.keys else {},
        unmeasured_hits=r.unmeasured_hits if r.keys else {},
    )


#: The note of a cache hit whose costs as returned there was no time to measure.
STALE_COSTS = (
    "costs measured with the callees' baseline code (cached before the callees were improved)"
)

#: Cost fields of a `FunctionReport` that depend on the callees' returned code.
_CALL_COSTS = (
    "cycles",
    "baseline_cycles",
    "halted",
    "heights",
    "baseline_heights",
    "padded_height",
    "baseline_padded_height",
    "own_cycles",
)


def _costs_as_returned(
    fns: list[FunctionState],
    entries: list[CachedFunction | None],
    out: ModuleText,
    reference: ModuleText,
    options: CompileOptions,
) -> tuple[dict[str, tuple[list[str] | None, dict[str, Any]]], dict[str, str]]:
    """Cache entries keep the costs as returned (callees' returned code included) with a
    hash of the closure they were measured on; a hit reuses them where the closure returned
    now is the same, else it is measured again as returned against its reference (the
    ``reference`` module's closure: the client's text, or our lowering), and where time or
    witnesses do not allow that, it reports its own costs (callees at their baseline code)
    and says so. Returns the hits measured again: key -> (lines served, new
    ``as_returned``), for the caller to write back (`CompileResult.remeasured`); and the
    hits there was no time to measure: name -> key (`CompileResult.unmeasured_hits`)."""
    remeasured: dict[str, tuple[list[str] | None, dict[str, Any]]] = {}
    unmeasured: dict[str, str] = {}
    for f, entry in zip(fns, entries, strict=True):
        if f.name not in out.functions or (entry is None and f.cached is None):
            continue  # nothing to keep or reuse (a compile without a cache stops here)
        closure = hashlib.sha256(out.closure_text(f.name)[0].encode()).hexdigest()
        if entry is not None:
            entry.report["as_returned"] = {
                "closure": closure,
                **{k: getattr(f.report, k) for k in _CALL_COSTS},
            }
        elif f.cached is not None:
            kept = f.cached.report.get("as_returned")
            if kept is not None and kept.get("closure") == closure:
                for k in _CALL_COSTS:
                    setattr(f.report, k, kept[k])
            elif not out.closure(f.name)[1:]:
                continue
            elif _measure_hit(f, out, reference, options):
                remeasured[f.cached.key] = (
                    f.cached.lines,
                    {"closure": closure, **{k: getattr(f.report, k) for k in _CALL_COSTS}},
                )
            else:
                f.report.own_cycles = f.report.cycles
                f.report.notes.append(STALE_COSTS)
                unmeasured[f.name] = f.cached.key
    return remeasured, unmeasured


def _measure_hit(
    f: FunctionState, out: ModuleText, reference: ModuleText, options: CompileOptions
) -> bool:
    """Measure a cache hit as returned (its callees' code as returned now) against its
    reference; True when the costs were set."""
    if out_of_time(options) is not None or f.name not in reference.functions:
        return False
    try:
        ref = reference.harness(f.name, options.isa)
        final = out.harness(f.name, options.isa)
    except TasmSyntaxError:
        return False
    v = check_function(
        ref,
        final,
        witnesses=options.witnesses,
        seed=options.seed + 2,
        deadline=options.deadline,
        private_cells=f.private,
    )
    if not v.equivalent:
        if v.witness >= 0:  # every function was proven: this would be a verifier bug
            log.error("function %s differs from its reference as returned: %s", f.name, v.reason)
        return False
    rep = f.report
    rep.own_cycles = rep.cycles if rep.cycles != v.cycles else None
    apply_costs(rep, v)
    return True


def _settle(f: FunctionState, options: CompileOptions) -> CachedFunction | None:
    """Set the function's `Status`; return the cache entry of a result computed in full, or
    a placeholder (`CachedFunction.measured` False) for one the deadline cut (None for one
    served from the cache, outside ``options.only``, or with no key). An entry's report is
    its own measurement (callees at their baseline code)."""
    rep = f.report
    if f.cached is not None:
        return None
    if f.skipped:
        rep.status = "improving"
        mark_unmeasured(rep, "outside the request's functions (options.only): not measured")
        return None
    searched = options.search_budget_s >= options.final_budget_s
    rep.status = "improving" if f.cut is not None or (f.tasks and not searched) else "final"
    if f.key is None:
        return None
    if f.cut is not None and f.new_lines is None and not rep.measured:
        # a placeholder, until deepening measures it (a function measured before the cut,
        # e.g. by a focus tier that found nothing, keeps its measurement in a non-final entry)
        return CachedFunction(
            key=f.key,
            name=f.name,
            lines=None,
            report={**rep.to_dict(), "cache": "off", "latency_s": 0.0},
            final=False,
            budget_s=0.0,
            source=rep.source,
            measured=False,
        )
    if f.reference is None:
        return None
    return CachedFunction(
        key=f.key,
        name=f.name,
        lines=list(f.new_lines) if f.new_lines is not None else None,
        report={**rep.to_dict(), "cache": "off", "latency_s": 0.0},
        final=rep.status == "final",
        budget_s=options.search_budget_s,
        source=rep.source,
    )
