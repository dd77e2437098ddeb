"""`compile`: TIR in, the cheapest verified TASM out, with a per-function cost report (design §1).

A compile runs the steps `PIPELINE` declares, in order (`tasmopt.optimizer.pipeline`: each
step says what it reads and may rewrite, which steps must come before it, and whether it can
lengthen the program; `validate` checks the order when this module loads). Each step is
timed in `CompileResult.timings` (seconds) under its name:

1. ``decode``, ``lower``, ``cache``, ``prepare`` — the TIR validated (`TirError` names the op
   path), our lowering and the client's text split by function (a function whose client
   text disagrees with our lowering is returned as sent and the mismatch reported), known
   functions answered from the result cache, the rewritable blocks.
2. The block stage: ``candidates`` (every candidate source proposes for every block, within
   `CANDIDATE_SHARE` of the time left), ``verify`` (every candidate checked against its
   block), ``rank`` (per block the best accepted candidate: valid, cycles <= baseline, no
   table taller), ``splice`` (blocks spliced back, each changed function proven and measured
   as a whole, falling back to its baseline if anything fails).
3. The function-level passes (``client``, ``conditions``, ``inline``, ``unroll``,
   ``early_exit``, ``branches``, ``loops``, ``pointers``, ``shortcuts``, ``hot``,
   ``reverse``, ``layouts``, ``absorb``, ``dots``, ``checks``): a function keeps a rewrite
   only when it is proven, cheaper in cycles and no table grows (those that lengthen the
   program: no table that grows with execution, nor the padded height). They run with
   ``rules`` among the sources and ``options.inline``; `CompileOptions.passes`, ``skip`` and
   ``pass_budget_s`` select them and bound their time.
4. ``settle`` (timed as ``splice``) — statuses and result-cache entries, the module
   assembled, the costs measured as returned.

The verifier is the authority: nothing reaches the output unless it was proven equivalent
to the baseline (or is the baseline). With a result cache (`FunctionCache`), functions
answered before in the same context (`tasmopt.optimizer.keys`) skip every later step;
`CompileResult.cache_entries` holds what this run computed for the caller to store.
`anytime` runs the pipeline in the tiers `tiers` plans, each function keeping the better
proven state: with a deadline the rules and the function-level passes first, answering on
their own — on the functions of highest expected saving before the rest of the module
(`tasmopt.optimizer.priority`: a tier of their own, where a module's weight is concentrated)
— then every requested source on the time left; the model, when it is among the
sources, in a tier of its own after the others (before the search under a deadline where it
is measured to pay more), so that adding it never costs cycles. Whatever the deadline cuts
keeps the best proven answer so far, at worst its baseline, and is reported ``improving``.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from typing import Any

from tasmopt.optimizer.absorb import absorb_stage
from tasmopt.optimizer.branches import branch_stage
from tasmopt.optimizer.checks import check_stage
from tasmopt.optimizer.conditions import condition_stage
from tasmopt.optimizer.dots import dot_stage
from tasmopt.optimizer.early_exit import early_exit_stage
from tasmopt.optimizer.hot import hot_stage
from tasmopt.optimizer.inline import inline_stage, run_memo
from tasmopt.optimizer.loops import loop_stage
from tasmopt.optimizer.pipeline import (
    PipelineError,
    Run,
    Step,
    execute,
    function_pass,
    selected,
    validate,
)
from tasmopt.optimizer.pointers import layout_stage, pointer_stage
from tasmopt.optimizer.prepare import entry_hazard
from tasmopt.optimizer.priority import FOCUS_WITHIN_S, focus
from tasmopt.optimizer.recheck import recheck
from tasmopt.optimizer.reverse import reverse_stage
from tasmopt.optimizer.shortcuts import shortcut_stage
from tasmopt.optimizer.state import (
    FunctionState,
    VerifyBackend,
    out_of_time,
    progress,
    rewritable,
)
from tasmopt.optimizer.steps import (
    CANDIDATE_SHARE,
    cache_step,
    candidates_step,
    client_step,
    decode_step,
    lower_step,
    prepare_step,
    rank_step,
    result_of,
    settle_step,
    splice_step,
    uses_cache,
    verify_step,
)
from tasmopt.optimizer.unroll import unroll_stage
from tasmopt.report import CompileOptions, CompileResult, FunctionCache
from tasmopt.rules import RulesSource
from tasmopt.search.source import SearchSource
from tasmopt.sources import SourceSet
from tasmopt.vm.equivalence import REJECTION_CLASSES, check_blocks, preload

__all__ = [
    "compile",
    "anytime",
    "tiers",
    "MODEL_SOURCE",
    "QUICK_SOURCES",
    "PIPELINE",
    "preload",
    "PASSES",
    "Step",
    "PipelineError",
    "describe",
    "progress",
    "default_sources",
    "VerifyBackend",
    "REJECTION_CLASSES",
    "entry_hazard",
    "CANDIDATE_SHARE",
    "recheck",
]

_BODIES = "the function's sections as they stand (spliced blocks, earlier passes' rewrites)"

#: The compile, step by step (see the module docstring). ``after`` is checked, not commented.
PIPELINE: tuple[Step, ...] = (
    Step("decode", decode_step, "the request's TIR", "nothing", kind="front"),
    Step("lower", lower_step, "the ops; the client's TASM", "nothing", ("decode",), kind="front"),
    Step(
        "cache",
        cache_step,
        "the functions' call closures",
        "answers known functions",
        ("lower",),
        kind="front",
        when=uses_cache,
    ),
    Step(
        "prepare",
        prepare_step,
        "our lowering, the client's text",
        "nothing (finds the blocks)",
        ("lower",),
        kind="front",
        timed=None,
    ),
    Step(
        "candidates",
        candidates_step,
        "every block",
        "nothing (proposals)",
        ("prepare",),
        why="at most CANDIDATE_SHARE of the time left: the proofs after it must fit",
        kind="block",
    ),
    Step(
        "verify", verify_step, "every proposal", "nothing (verdicts)", ("candidates",), kind="block"
    ),
    Step("rank", rank_step, "the verdicts", "the blocks chosen", ("verify",), kind="block"),
    Step(
        "splice",
        splice_step,
        "the blocks chosen",
        "functions: blocks spliced in where the whole is proven",
        ("rank",),
        kind="block",
    ),
    Step(
        "client",
        client_step,
        "mismatched functions' client text",
        "those functions; the text the later passes work on",
        ("splice",),
        when=lambda r: r.options.rewrite_mismatched,
    ),
    Step(
        "conditions",
        function_pass(condition_stage),
        "every path of a function",
        "branches decided by earlier ones",
        ("splice",),
    ),
    Step(
        "inline",
        function_pass(inline_stage),
        "calls of small callees",
        "callers (callees inlined)",
        ("splice",),
        why="callees as they will be returned: after the block stage",
        lengthens=True,
    ),
    Step(
        "unroll",
        function_pass(unroll_stage),
        "counted loops with a constant trip count",
        "their call sites (copies of the body)",
        ("splice",),
        lengthens=True,
    ),
    Step(
        "early_exit",
        function_pass(early_exit_stage),
        "counted loops whose body is one guarded branch",
        "the loop (leaves once the guard fails)",
        ("splice",),
    ),
    Step(
        "branches",
        function_pass(branch_stage),
        "small pure if/else",
        "the branch (a select)",
        ("early_exit",),
        why="early_exit needs the guarded call that branches would remove",
    ),
    Step(
        "loops",
        function_pass(loop_stage),
        "counted loops ending in recurse_or_return",
        "the loop (induction variable for the counter)",
        ("splice",),
    ),
    Step(
        "pointers",
        function_pass(pointer_stage),
        "loops walking RAM",
        "the loop (pointers carried on the stack)",
        ("loops",),
    ),
    Step(
        "shortcuts",
        function_pass(shortcut_stage),
        "calls of one-instruction sections",
        "the calls (the instruction in place)",
        ("inline", "unroll", "early_exit", "branches", "loops", "pointers"),
        why="the idioms of the passes before it need the calls",
    ),
    Step(
        "hot",
        function_pass(hot_stage),
        "loop bodies as returned",
        "loop bodies (searched again, deeper)",
        ("loops", "pointers", "shortcuts"),
    ),
    Step(
        "reverse",
        function_pass(reverse_stage),
        "loops walking RAM downward",
        "the loop (walks it upward)",
        ("hot",),
        why="against the deepest bodies",
    ),
    Step(
        "layouts",
        function_pass(layout_stage),
        "recurse_or_return loops",
        "the op-stack layout the loop carries",
        ("pointers", "hot", "reverse"),
        why="the loops' final bodies",
    ),
    Step(
        "absorb",
        function_pass(absorb_stage),
        "loops absorbing RAM words into the sponge",
        "the loop (sponge_absorb_mem)",
        ("pointers", "layouts"),
        why="the pointer loops' final bodies",
    ),
    Step(
        "dots",
        function_pass(dot_stage),
        "inner-product loops",
        "the loop (xx_dot_step / xb_dot_step)",
        ("pointers", "layouts"),
        why="the pointer loops' final bodies",
    ),
    Step(
        "checks",
        function_pass(check_stage),
        "zero checks",
        "the checks (cheaper forms)",
        ("hot", "absorb", "dots"),
        why="after every search of the bodies",
    ),
    Step(
        "settle",
        settle_step,
        _BODIES,
        "nothing (assembles, measures as returned)",
        ("splice",),
        kind="finish",
        timed="splice",
    ),
)
validate(PIPELINE)

#: The function-level passes, in pipeline order (what `CompileOptions.passes` and ``skip``
#: select).
PASSES: tuple[str, ...] = tuple(s.name for s in PIPELINE if s.kind == "pass")


def describe(options: CompileOptions | None = None) -> list[str]:
    """One line per step: on/off, its kind and name, what it reads and rewrites, what it
    comes after; on/off as ``options`` (default: the defaults) select it, without a result
    cache."""
    options = options or CompileOptions()
    probe = Run(None, None, options, check_blocks, SourceSet([]), None)  # no cache
    out = []
    for s in PIPELINE:
        on = "on " if selected(s, options) and (s.when is None or s.when(probe)) else "off"
        after = f" (after {', '.join(s.after)})" if s.after else ""
        longer = "; may lengthen" if s.lengthens else ""
        out.append(
            f"{on} {s.kind:6s} {s.name:10s} reads {s.reads}; rewrites {s.rewrites}{longer}{after}"
        )
    return out


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
        ValueError: ``options.passes`` or ``options.skip`` names no function-level pass.
    """
    options = options or CompileOptions()
    verify = verify or check_blocks
    sources = sources if sources is not None else default_sources()
    unknown = (set(options.passes or ()) | set(options.skip)) - set(PASSES)
    if unknown:
        raise ValueError(
            f"unknown function-level pass(es) {', '.join(sorted(unknown))}: "
            f"one of {', '.join(PASSES)}"
        )
    run = Run(tir, baseline_tasm, options, verify, sources, cache)
    with run_memo():  # a merged run optimized once per compile, not once per attempt
        if options.deadline is None:
            return anytime(run)  # one tier, or two when the model is among the sources
        with options.deadline.active():  # for the verifier's guard solving deep below
            return anytime(run)


#: The candidate sources of an anytime compile's first tier (`anytime`): milliseconds per
#: module, and with the function-level passes most of what a full compile saves.
QUICK_SOURCES: tuple[str, ...] = ("rules",)

#: The candidate source that gets a tier of its own after the others (`tiers`).
MODEL_SOURCE = "model"


def tiers(r: Run) -> list[tuple[str, ...]]:
    """The candidate sources of each tier of ``r``, in the order they run; the last tier is
    the request's own sources.

    * Under a deadline, `QUICK_SOURCES` first (when requested with other sources).
    * The model, when requested and loaded with other sources, after them: the tier before
      it is exactly the compile without the model, so adding the model never returns more
      cycles than leaving it out (same request and seed; under a deadline, as long as the
      time does not run out before that tier ends). A model source whose measured saving
      per second beats the search's (``ahead_of_search``, from the checkpoint's marginal
      table: `tasmopt.model.source.ModelSource`) runs before the search under a deadline
      instead (issue 35: on the synchronous path when it pays).
    """
    names = r.options.sources
    deadline = r.options.deadline is not None
    model = r.sources.get(MODEL_SOURCE) if MODEL_SOURCE in names else None
    present = [n for n in names if r.sources.get(n) is not None]
    out: list[tuple[str, ...]] = []
    if deadline and set(QUICK_SOURCES) <= set(names):
        if any(n not in QUICK_SOURCES for n in present):
            out.append(QUICK_SOURCES)
    others = [n for n in present if n not in QUICK_SOURCES and n != MODEL_SOURCE]
    if model is not None and others:
        first = bool(getattr(model, "ahead_of_search", False)) and deadline
        keep = (MODEL_SOURCE,) if first else tuple(others)
        middle = tuple(n for n in names if n in QUICK_SOURCES or n in keep)
        if middle not in out:
            out.append(middle)
    if not out or out[-1] != tuple(names):
        out.append(tuple(names))
    return out


def anytime(r: Run) -> CompileResult:
    """Run the pipeline in the tiers of `tiers` and answer with the best: each tier is
    assembled and measured as an answer of its own, and each function keeps the better
    proven state of the tier before and its own (a function a tier cuts keeps the earlier
    one's, and says ``improving``); a later answer replaces an earlier one only if it takes
    no more cycles as returned. Under ``r.options.deadline`` the first tier is the rules and
    the function-level passes, so the answer at a deadline is at least what they prove by
    then, and a longer deadline only adds work (issue 34: anytime, no cliff); a tier that
    starts after the deadline does not run. Before that first tier, the functions of the
    module's `focus` (the heaviest, where its weight is concentrated) get a tier of their own,
    the rest returned unchanged and ``improving`` if the deadline ends it. The tiers share one
    decoded, lowered module. With one tier this is the plain pipeline."""
    opts = r.options
    plan: list[tuple[tuple[str, ...], frozenset[str] | None]] = [(n, None) for n in tiers(r)]
    if len(plan) == 1:
        return result_of(execute(r, PIPELINE))
    front = tuple(s for s in PIPELINE if s.kind == "front" and s.name != "prepare")
    blocks = tuple(s for s in PIPELINE if s.kind == "block" or s.name == "prepare")
    passes = tuple(s for s in PIPELINE if s.kind == "pass")
    finish = tuple(s for s in PIPELINE if s.kind == "finish")
    first = _tier_run(r, plan[0][0], last=False)
    first_at = 0  # the tier ``first`` runs
    execute(first, front)  # once per request: every tier shares the decoded, lowered module
    if (
        opts.deadline is not None
        and opts.deadline.remaining() <= FOCUS_WITHIN_S
        and plan[0][0] == QUICK_SOURCES
        and first.ours is not None
    ):
        open_ = [
            n
            for n in first.ours.functions
            if first.keys.get(n) not in first.hits and (opts.only is None or n in opts.only)
        ]
        heaviest, searched = focus(first.ours, open_, opts.deadline.remaining())
        if heaviest:  # first, in a tier of their own
            plan.insert(0, (tuple(opts.sources) if searched else QUICK_SOURCES, heaviest))
            first_at = 1 if searched else 0  # ``first`` stays the quick tier's
    prev: Run | None = None
    answer: CompileResult | None = None
    spliced: dict[str, Any] = {}
    own_cut: dict[str, str | None] = {}
    before: dict[str, int | None] = {}
    spent: dict[str, float] = {}
    for i, (names, fo) in enumerate(plan):
        last = i == len(plan) - 1
        run = first if i == first_at else _tier_run(r, names, last)
        if run is not first:
            _share_front(first, run, timings=last)
        run.focus = fo
        execute(run, blocks)
        if prev is None and fo is None and not any(_workable(f) for f in run.fns):
            # every function answered from the cache, passed through or cut: a later tier
            # would only repeat this one
            execute(run, passes)
            execute(run, finish)
            return result_of(run)
        by_name = {f.name: f for f in prev.fns} if prev is not None else {}
        mine = {f.name: f.new_lines for f in run.fns}
        for j, f in enumerate(run.fns):
            q = by_name.get(f.name)
            if (
                q is not None
                and prev is not None
                and prev.focus is None  # a focus tier's passes saw the rest at baseline code
                and rewritable(f)
                and f.name in spliced
                and spliced[f.name] == f.new_lines
            ):
                q.settled = True  # the same blocks as the tier before: its passes' result stands
                q.cut = f.cut or own_cut[q.name]
                _carry_judgements(q, f)
                run.fns[j] = q
        spliced = mine
        execute(run, passes)
        if prev is not None:
            run.fns = [_better(by_name.get(f.name), f, own_cut, before) for f in run.fns]
        own_cut = {f.name: f.cut for f in run.fns}
        before = {  # a state carried over from the tier before keeps that tier's figure
            f.name: before.get(f.name)
            if f is by_name.get(f.name)
            else (f.report.cycles if f.report.measured else None)
            for f in run.fns
        }
        if opts.deadline is not None and names == QUICK_SOURCES:
            for f in run.fns:  # the search has not run on them yet: worth deepening
                if f.tasks and f.cut is None and f.cached is None and not f.skipped:
                    f.cut = "request deadline reached before the search ran"
        execute(run, finish)
        if last:
            run.timings.update(spent)
            result = result_of(run)
        else:
            result = copy.deepcopy(result_of(run))  # later tiers go on with these states
            key = (
                "focus"
                if fo is not None
                else "quick"
                if names == QUICK_SOURCES
                else "tier:" + "+".join(names)
            )
            spent[key] = sum(result.timings.values())
        if answer is None or _answered(result, answer) <= _answered(answer, result):
            answer = result
        if out_of_time(opts) is not None:
            break
        prev = run
    assert answer is not None
    return answer


def _tier_run(r: Run, names: tuple[str, ...], last: bool) -> Run:
    """The `Run` of one tier: ``r`` itself for the last (the request's own sources)."""
    if last:
        return r
    return Run(
        r.tir, r.baseline_tasm, replace(r.options, sources=names), r.verify, r.sources, r.cache
    )


#: What the ``front`` steps before ``prepare`` (decode, lower, cache) leave in a `Run`: the
#: same for every tier of a request, computed once (`anytime`).
_FRONT_FIELDS = (
    "ops",
    "request_hash",
    "low",
    "ours",
    "client",
    "labels",
    "private",
    "keys",
    "hits",
)


def _share_front(src: Run, dst: Run, *, timings: bool) -> None:
    """Give ``dst`` the front of ``src`` (nothing after ``cache`` changes these: the steps
    read them, and the tiers' own states are built from them by ``prepare``); ``timings``:
    and the time it took (for the last tier, whose timings show the whole request)."""
    for name in _FRONT_FIELDS:
        setattr(dst, name, getattr(src, name))
    if timings:
        for k in ("decode", "lower", "cache"):
            if k in src.timings:
                dst.timings[k] = src.timings[k]


def _workable(f: FunctionState) -> bool:
    """Whether a later tier could change ``f``: computed in this run (not a cache hit, not
    outside ``options.only``) and not passed through unchanged for want of a reference or
    of time."""
    return f.cached is None and not f.skipped and not (f.passthrough and not f.tasks)


def _answered(result: CompileResult, other: CompileResult) -> int:
    """Cycles of ``result`` as returned: a measured function at its cycles, an unmeasured
    one (returned unchanged) at its baseline as ``other`` measured it (0 if neither did)."""
    base = {f.name: f.baseline_cycles for f in other.functions if f.measured}
    return sum(f.cycles if f.measured else base.get(f.name, 0) for f in result.functions)


def _better(
    quick: FunctionState | None,
    full: FunctionState,
    own_cut: dict[str, str | None],
    before: dict[str, int | None],
) -> FunctionState:
    """The state of the tier whose proven answer takes fewer cycles (the full tier's on a
    tie); a function the full tier cut keeps its reason (``improving``: worth deepening).
    ``before``: the earlier tier's cycles of each function at the same point of the pipeline
    (after the function-level passes, before ``settle``: its own state has been settled
    since, and settling measures as returned, with the callees' final code)."""
    if quick is None or quick is full or full.cached is not None or full.skipped:
        return full
    mine = full.report.cycles if full.report.measured else None
    theirs = before.get(quick.name)
    if theirs is None or (mine is not None and mine <= theirs):
        return full
    quick.cut = full.cut or own_cut.get(quick.name)
    _carry_judgements(quick, full)
    return quick


def _carry_judgements(kept: FunctionState, later: FunctionState) -> None:
    """A later tier judged the same blocks with more sources: its per-block candidate counts,
    rejections and judged candidates (the replay buffer's) go with the state that is kept,
    so that the answer reports every source that proposed (the model included) and Stage 3
    learns from every candidate judged."""
    if not later.trajectories:
        return
    counts = {b.index: b.candidates for b in later.report.blocks}
    for b in kept.report.blocks:
        if b.index in counts:
            b.candidates = dict(counts[b.index])
    kept.report.rejections = dict(later.report.rejections)
    kept.trajectories = list(later.trajectories)
