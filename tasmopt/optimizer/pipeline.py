"""The optimizer's pipeline as data (issue 37): each stage of a compile is a `Step` that says
what it reads, what it may rewrite, which steps must have run before it and whether it can
lengthen the program; `tasmopt.optimizer.PIPELINE` lists them in order, `validate` checks
that order, and `execute` runs the steps one manager times, reports and selects
(`CompileOptions.passes` / ``skip`` / ``pass_budget_s``), in the manner of LLVM's pass
manager: passes declared, run by one manager.

Candidate sources (rules, search, the model) are not steps: the ``candidates`` step asks
them. The function-level passes all have one signature (`FunctionPass`) and are wrapped by
`function_pass`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tasmopt.deadline import Deadline
from tasmopt.lower.triton import Lowering
from tasmopt.module import ModuleText
from tasmopt.optimizer.state import FunctionState, VerifyBackend, stage
from tasmopt.report import CachedFunction, CompileOptions, FunctionCache
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tir.ops import Op
from tasmopt.vm.equivalence import BlockCheck, Verdict

__all__ = [
    "Run",
    "Step",
    "FunctionPass",
    "PipelineError",
    "function_pass",
    "validate",
    "execute",
    "pass_options",
    "selected",
]

#: A function-level pass: ``(functions, the text it works on, the client's text, options,
#: sources, verify)``; it rewrites `FunctionState`\ s in place through
#: `tasmopt.optimizer.state.adopt`.
FunctionPass = Callable[
    [
        list[FunctionState],
        ModuleText,
        "ModuleText | None",
        CompileOptions,
        SourceSet,
        VerifyBackend,
    ],
    Any,
]


@dataclass
class Run:
    """What the steps of one compile share, filled in step by step.

    Attributes:
        tir, baseline_tasm, options, verify, sources, cache: the compile's inputs
            (`tasmopt.optimizer.compile`).
        timings: seconds per step (`CompileResult.timings`).
        ops, request_hash: the decoded TIR and its sha256 (``decode``).
        low, ours, client, labels, private: our lowering, its text, the client's text,
            function labels, private scratch cells per function (``lower``).
        keys, hits: result-cache keys and entries found (``cache``).
        focus: the functions ``prepare`` looks at (None: all; the first tier of an anytime
            compile, `tasmopt.optimizer.priority`).
        fns, tasks: per-function working state and the rewritable blocks (``prepare``).
        proposals, checks, owners, verdicts: candidates, their checks, and the verdicts
            (``candidates``, ``verify``).
        model_version: the checkpoint that proposed, if the model ran (``rank``).
        text: the module text the function-level passes work on (``client`` may replace it).
        entries, module_text: cache entries and the assembled module (``settle``).
        remeasured: hits measured again as returned (`CompileResult.remeasured`).
        unmeasured_hits: hits that had no time for it (`CompileResult.unmeasured_hits`).
    """

    tir: Any
    baseline_tasm: str | None
    options: CompileOptions
    verify: VerifyBackend
    sources: SourceSet
    cache: FunctionCache | None
    timings: dict[str, float] = field(default_factory=dict)
    ops: tuple[Op, ...] = ()
    request_hash: str = ""
    low: Lowering | None = None
    ours: ModuleText | None = None
    client: ModuleText | None = None
    labels: dict[str, str] = field(default_factory=dict)
    private: dict[str, frozenset[int]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    hits: dict[str, CachedFunction] = field(default_factory=dict)
    focus: frozenset[str] | None = None
    fns: list[FunctionState] = field(default_factory=list)
    tasks: list[BlockTask] = field(default_factory=list)
    proposals: dict[str, Any] = field(default_factory=dict)
    checks: list[BlockCheck] = field(default_factory=list)
    owners: list[tuple[int, Any]] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    model_version: str | None = None
    text: ModuleText | None = None
    entries: list[CachedFunction | None] = field(default_factory=list)
    module_text: str = ""
    remeasured: dict[str, tuple[list[str] | None, dict[str, Any]]] = field(default_factory=dict)
    unmeasured_hits: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One declared stage of a compile.

    Attributes:
        name: its name (the key of its timing, and what `CompileOptions.passes`/``skip``
            select for a function-level pass).
        run: ``run(Run)``, mutating the run.
        reads, rewrites: what it reads and what it may change (documentation, shown by
            ``tasmopt.optimizer.describe``).
        after: steps that must come before it in the pipeline (checked by `validate`).
        why: the reason for its place, where ``after`` alone does not say it.
        lengthens: whether it may make the program longer (to save cycles; such rewrites
            are kept only when no table that grows with execution, nor the padded height,
            grows).
        kind: ``front`` (decode, lower, cache, prepare), ``block`` (the block stage:
            candidates, verify, rank, splice), ``pass`` (a function-level pass: runs only
            with ``rules`` among the sources and ``options.inline``, and is selectable),
            ``finish`` (assembly and the final measurements).
        timed: the timing key (default: ``name``); None: not timed.
        when: an extra condition on the run (default: always).
    """

    name: str
    run: Callable[[Run], None]
    reads: str
    rewrites: str
    after: tuple[str, ...] = ()
    why: str = ""
    lengthens: bool = False
    kind: Literal["front", "block", "pass", "finish"] = "pass"
    timed: str | None = ""
    when: Callable[[Run], bool] | None = None


class PipelineError(ValueError):
    """A pipeline declaration that cannot run as declared (a step before one it needs, a
    name twice, an unknown name in ``after``)."""


def function_pass(fn: FunctionPass) -> Callable[[Run], None]:
    """Wrap a function-level pass for `Step.run`: it works on ``Run.text``."""

    def run(r: Run) -> None:
        assert r.text is not None, "function passes run after the block stage"
        fn(r.fns, r.text, r.client, r.options, r.sources, r.verify)

    return run


def validate(steps: Sequence[Step]) -> None:
    """Raise `PipelineError` unless every step's ``after`` names steps that come earlier,
    and every name is unique."""
    seen: set[str] = set()
    names = {s.name for s in steps}
    for s in steps:
        if s.name in seen:
            raise PipelineError(f"step {s.name!r} is declared twice")
        for need in s.after:
            if need not in names:
                raise PipelineError(f"step {s.name!r} needs {need!r}, which is not declared")
            if need not in seen:
                raise PipelineError(f"step {s.name!r} runs before {need!r}, which it needs")
        seen.add(s.name)


def selected(step: Step, options: CompileOptions) -> bool:
    """Whether ``step`` runs under ``options``: every front, block and finish step; a
    function-level pass when ``rules`` is a source, ``options.inline`` is on, it is in
    ``options.passes`` (None: all) and not in ``options.skip``."""
    if step.kind != "pass":
        return True
    return (
        options.inline
        and "rules" in options.sources
        and (options.passes is None or step.name in options.passes)
        and step.name not in options.skip
    )


def pass_options(options: CompileOptions) -> CompileOptions:
    """The options a function-level pass runs with: the request's, with the search budget
    (``search_budget_s``, seconds) at most ``final_budget_s``.

    The block search splits a request's budget over all its blocks; a pass re-searches the
    runs of *one* function at a time (`tasmopt.optimizer.inline._reoptimize`, `HOT_FACTOR`
    times that for loop bodies), many times per module. A deepening asks for DEEPEN_BUDGET_S
    per function times its functions (`service.core.deepen.run_payload`); spent whole on
    every re-search of every function, that cost grew with the square of the module's
    functions (coin, 8 functions: 78 s of its 90 s deepening in the inline pass). Capped at
    the budget that makes a function final, a pass spends on a function what a deepening
    grants one function; requests at or below that budget are unchanged.
    """
    if options.search_budget_s <= options.final_budget_s:
        return options
    return replace(options, search_budget_s=options.final_budget_s)


def execute(r: Run, steps: Sequence[Step]) -> Run:
    """Run the selected ``steps`` in order, each timed under its name; a function-level pass
    with a budget in ``options.pass_budget_s`` runs under a deadline of that many seconds
    (within the request's). Returns ``r``."""
    for s in steps:
        if not selected(s, r.options) or (s.when is not None and not s.when(r)):
            continue
        options = r.options
        if s.kind == "pass":
            r.options = pass_options(options)
            budget = options.pass_budget_s.get(s.name)
            if budget is not None:
                r.options = replace(r.options, deadline=Deadline(budget, within=options.deadline))
        try:
            if s.timed is None:
                s.run(r)
            else:
                with stage(r.timings, s.timed or s.name):
                    s.run(r)
        finally:
            r.options = options
    return r
