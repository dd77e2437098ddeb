"""`compile`: TIR in, the cheapest verified TASM out, with a per-function cost report (design §1).

Stages (each timed in `CompileResult.timings`, seconds):

1. ``decode`` — JSON -> ops, validation (`TirError` names the op path).
2. ``lower`` — our baseline lowering; the client's ``baseline_tasm`` split by function.
   Where the client sent a baseline that disagrees with our lowering on a witness, that
   function is returned exactly as the client sent it and the mismatch is reported.
3. ``candidates`` — every registered source proposes rewrites of every block (one batch).
4. ``verify`` — every candidate is checked against its baseline block (`verify` backend:
   in-process by default, the RQ worker pool in production).
5. ``rank`` — per block, the best accepted candidate: valid, cycles <= baseline, no table
   taller; ranked by cycles, then the sum of the other tables, then size.
6. ``splice`` — blocks spliced back; each changed function is re-verified as a whole on
   fresh witnesses against its baseline and falls back to the baseline if anything fails.
7. ``inline``, ``unroll``, ``early_exit``, ``branches``, ``loops``, ``pointers``,
   ``shortcuts``, ``hot``, ``reverse``, ``layouts``, ``absorb``, ``dots`` and ``checks`` —
   the function-level passes (`tasmopt.optimizer.inline`, `.unroll`, `.early_exit`,
   `.branches`, `.loops`, `.pointers` (also ``layouts``), `.shortcuts`, `.hot`, `.reverse`,
   `.absorb`, `.dots`, `.checks`): a
   function keeps a rewrite only when it is proven, cheaper in cycles and no table grows
   (those that lengthen the program to save cycles: no table that grows with execution, nor
   the padded height).

The verifier is the authority: nothing reaches the output unless it was proven equivalent
to the baseline (or is the baseline).

With a result cache (`FunctionCache`), functions answered before in the same context
(`tasmopt.optimizer.keys`) are served from it after ``lower`` and skip every later stage;
`CompileResult.cache_entries` holds what this run computed for the caller to store. With a
deadline, the candidate sources get at most `CANDIDATE_SHARE` of the time left, so that the
proofs and measurements after them still fit; whatever the deadline cuts keeps its baseline
and is reported ``improving``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import replace
from typing import Any

from tasmopt.deadline import Deadline
from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.blocks import split_functions
from tasmopt.module import ModuleText
from tasmopt.optimizer.absorb import absorb_stage
from tasmopt.optimizer.branches import branch_stage
from tasmopt.optimizer.candidates import build_checks, candidate_logprobs, propose
from tasmopt.optimizer.checks import check_stage
from tasmopt.optimizer.client_text import client_stage
from tasmopt.optimizer.conditions import condition_stage
from tasmopt.optimizer.contract import private_by_function
from tasmopt.optimizer.dots import dot_stage
from tasmopt.optimizer.early_exit import early_exit_stage
from tasmopt.optimizer.hot import hot_stage
from tasmopt.optimizer.inline import inline_stage
from tasmopt.optimizer.loops import loop_stage
from tasmopt.optimizer.pointers import layout_stage, pointer_stage
from tasmopt.optimizer.prepare import (
    cached_answers,
    decode_checked,
    entry_hazard,
    lower_module,
    prepare_functions,
)
from tasmopt.optimizer.rank import rank
from tasmopt.optimizer.recheck import recheck
from tasmopt.optimizer.reverse import reverse_stage
from tasmopt.optimizer.shortcuts import shortcut_stage
from tasmopt.optimizer.splice import assemble, finish_function, measure_with_callees
from tasmopt.optimizer.state import (
    FunctionState,
    VerifyBackend,
    apply_costs,
    out_of_time,
    progress,
    stage,
    verify_within,
)
from tasmopt.optimizer.unroll import unroll_stage
from tasmopt.report import CachedFunction, CompileOptions, CompileResult, FunctionCache
from tasmopt.rules import RulesSource
from tasmopt.search.source import SearchSource
from tasmopt.sources import SourceSet
from tasmopt.tir.codec import tir_hash
from tasmopt.vm.equivalence import (
    REJECTION_CLASSES,
    Verdict,
    check_blocks,
    check_function,
)

__all__ = [
    "compile",
    "progress",
    "default_sources",
    "VerifyBackend",
    "REJECTION_CLASSES",
    "entry_hazard",
    "CANDIDATE_SHARE",
    "recheck",
]

log = logging.getLogger(__name__)

#: Share of the time left before a deadline that the candidate sources may use (the rest is
#: for verification, the whole-function proofs and the measurements).
CANDIDATE_SHARE = 0.5


@functools.cache
def _shared_search() -> SearchSource:
    # one search source per process, so its per-block result cache is shared by every caller
    return SearchSource()


def default_sources() -> SourceSet:
    """A new `SourceSet` with the built-in sources: ``rules`` and ``search`` (the model is
    added by whoever loads a checkpoint, e.g. the service's model watcher)."""
    return SourceSet([RulesSource(), _shared_search()])


def compile(
    tir: Any,
    baseline_tasm: str | None = None,
    *,  # noqa: A001 - the service's verb
    options: CompileOptions | None = None,
    verify: VerifyBackend | None = None,
    sources: SourceSet | None = None,
    cache: FunctionCache | None = None,
) -> CompileResult:
    """Optimize a TIR module or function.

    Args:
        tir: ops (tuple of `Op`), their JSON value (list), or JSON text.
        baseline_tasm: the client's compiler output for the same TIR, if it sent one: what
            we must beat and what we fall back to.
        options: `CompileOptions` (ISA, witnesses, seed, candidate sources, budgets).
        verify: the block verification backend (default: in-process `check_blocks`).
        sources: the candidate sources that may propose, by name (default:
            `default_sources()`, rules and search); ``options.sources`` picks among them.
        cache: the per-function result cache to answer from (None: compute everything).
            Lookups that raise are logged and count as misses.

    Returns:
        CompileResult with the module TASM and one FunctionReport per function.

    Raises:
        TirError: malformed or invalid TIR (path of the offending op in the message), or
            (``options.strict``) ops that cannot be lowered.
        TasmSyntaxError: ``baseline_tasm`` does not parse outside functions whose TIR cannot
            be lowered anyway (line and column in the client's text).
        BaselineError: ``baseline_tasm`` defines none of the TIR's functions.
    """
    options = options or CompileOptions()
    verify = verify or check_blocks
    sources = sources if sources is not None else default_sources()
    if options.deadline is None:
        return _compile(tir, baseline_tasm, options, verify, sources, cache)
    with options.deadline.active():  # for the verifier's guard solving deep below
        return _compile(tir, baseline_tasm, options, verify, sources, cache)


def _compile(
    tir: Any,
    baseline_tasm: str | None,
    options: CompileOptions,
    verify: VerifyBackend,
    sources: SourceSet,
    cache: FunctionCache | None,
) -> CompileResult:
    timings: dict[str, float] = {}
    with stage(timings, "decode"):
        ops = decode_checked(tir, options)
        request_hash = tir_hash(ops)
    with stage(timings, "lower"):
        low, ours, client = lower_module(ops, baseline_tasm, options)
        labels = {name: f.label for name, f in ours.functions.items()}
        private = private_by_function(ours, client, options.isa)  # once per request
    keys: dict[str, str] = {}
    hits: dict[str, CachedFunction] = {}
    if cache is not None and options.use_cache:
        with stage(timings, "cache"):
            keys, hits = cached_answers(cache, ops, low, ours, client, options, private)
    fns = prepare_functions(low, ours, client, options, timings, keys, hits, private)
    chunks = {c.name: c.ops for c in split_functions(ops)}
    for f in fns:
        f.report.tir_hash = tir_hash(chunks.get(f.name, ()))
    tasks = [t for f in fns for t in f.tasks]
    with stage(timings, "candidates"):
        proposals: dict[str, Any] = {}
        if tasks and out_of_time(options) is None:
            share = _candidate_deadline(options)
            proposals = propose(tasks, replace(options, deadline=share), sources)
            if share is not None and share.expired:
                for f in fns:
                    if f.tasks:
                        f.cut = f.cut or "candidate sources stopped by the deadline"
    with stage(timings, "verify"):
        checks, owners = build_checks(tasks, proposals, options)
        verdicts = verify_within(verify, checks, options)
        for (ti, _), v in zip(owners, verdicts, strict=False):
            if not v.equivalent and (v.reason or "").startswith("unverified"):
                for f in fns:
                    if tasks[ti] in f.tasks:
                        f.cut = f.cut or "checks left unverified at the deadline"
        if len(verdicts) != len(checks):
            log.error(
                "verify backend returned %d verdicts for %d checks", len(verdicts), len(checks)
            )
            verdicts = [Verdict(False, "rejected", "no verdict")] * len(checks)
    model = sources.get("model") if "model" in proposals else None
    model_version = getattr(model, "version", None)
    with stage(timings, "rank"):
        logprobs = candidate_logprobs(tasks, proposals, sources)
        rank(fns, tasks, owners, checks, verdicts, logprobs, model_version)
    with stage(timings, "splice"):
        for f in fns:
            finish_function(f, ours, options)
    passes = ours  # the text the function-level passes work on
    with stage(timings, "client"):
        if options.rewrite_mismatched and options.inline and "rules" in options.sources:
            passes = client_stage(fns, ours, client, options, sources, verify)
    with stage(timings, "conditions"):
        if options.inline and "rules" in options.sources:  # a rewrite rule, at function level
            condition_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "inline"):
        if options.inline and "rules" in options.sources:  # a rewrite rule, at function level
            inline_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "unroll"):
        if options.inline and "rules" in options.sources:  # a rewrite rule, at function level
            unroll_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "early_exit"):
        if options.inline and "rules" in options.sources:  # before branches: needs the call
            early_exit_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "branches"):
        if options.inline and "rules" in options.sources:  # a rewrite rule, at function level
            branch_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "loops"):
        if options.inline and "rules" in options.sources:  # a rewrite rule, at function level
            loop_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "pointers"):
        if options.inline and "rules" in options.sources:  # a rewrite rule, at function level
            pointer_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "shortcuts"):
        if options.inline and "rules" in options.sources:  # last: the idioms above need the calls
            shortcut_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "hot"):
        if options.inline and "rules" in options.sources:  # last: the loop bodies as returned
            hot_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "reverse"):
        if options.inline and "rules" in options.sources:  # last: against the deepest bodies
            reverse_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "layouts"):
        if options.inline and "rules" in options.sources:  # the loops' final bodies
            layout_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "absorb"):
        if options.inline and "rules" in options.sources:  # the pointer loops' final bodies
            absorb_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "dots"):
        if options.inline and "rules" in options.sources:  # the pointer loops' final bodies
            dot_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "checks"):
        if options.inline and "rules" in options.sources:  # after every search of the bodies
            check_stage(fns, passes, client, options, sources, verify)
    with stage(timings, "splice"):
        entries = [_settle(f, options) for f in fns]
        text = assemble(fns, low, ours, client)
        out = ModuleText.from_text(text, labels)
        for f in fns:
            if f.name in out.functions:
                f.report.tasm = out.section_lines(f.name)
        measure_with_callees(fns, out, options)
        _costs_as_returned(fns, entries, out, client if client is not None else ours, options)
    reference_text = baseline_tasm if baseline_tasm is not None else low.text()
    return CompileResult(
        text,
        [f.report for f in fns],
        request_hash,
        reference_text,
        timings,
        model_version=model_version,
        cache_entries=[e for e in entries if e is not None] if keys else [],
        trajectories=[t for f in fns for t in f.trajectories],
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
) -> None:
    """Cache entries keep the costs as returned (callees' returned code included) with a
    hash of the closure they were measured on; a hit reuses them where the closure returned
    now is the same, else it is measured again as returned against its reference (the
    ``reference`` module's closure: the client's text, or our lowering), and where time or
    witnesses do not allow that, it reports its own costs (callees at their baseline code)
    and says so."""
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
            elif out.closure(f.name)[1:] and not _measure_hit(f, out, reference, options):
                f.report.own_cycles = f.report.cycles
                f.report.notes.append(
                    "costs measured with the callees' baseline code (cached before the callees "
                    "were improved)"
                )


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


def _candidate_deadline(options: CompileOptions) -> Deadline | None:
    dl = options.deadline
    if dl is None or dl.remaining() == float("inf"):
        return dl
    return Deadline(dl.remaining() * CANDIDATE_SHARE, within=dl)


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
        rep.measured = False
        rep.reason = rep.reason or "outside the request's functions (options.only): not measured"
        return None
    searched = options.search_budget_s >= options.final_budget_s
    rep.status = "improving" if f.cut is not None or (f.tasks and not searched) else "final"
    if f.key is None:
        return None
    if f.cut is not None and f.new_lines is None:  # a placeholder, until deepening measures it
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
