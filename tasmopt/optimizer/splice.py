"""Stage 6, ``splice``: chosen blocks spliced back, each changed function re-verified as a
whole (differential witnesses, then a proof by control-skeleton alignment) and measured, costs
measured again with improved callees, and the module text assembled (our lowering, or the
client's text with improved functions replaced; a label collision gives the function back)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import replace
from typing import cast

from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.triton import (
    INDENT,
    Lowering,
)
from tasmopt.module import ModuleText, label_lines
from tasmopt.optimizer.state import FunctionState, apply_costs, out_of_time
from tasmopt.report import (
    CompileOptions,
    FunctionReport,
    Source,
)
from tasmopt.vm.equivalence import (
    BlockCheck,
    FunctionVerdict,
    check_aligned,
    check_function,
    no_taller,
    padded_height,
)

__all__ = ["finish_function", "measure_with_callees", "assemble", "mark_unmeasured"]

log = logging.getLogger(__name__)


def _spliced_lines(f: FunctionState, ours: ModuleText) -> list[str]:
    """Our sections of ``f`` with the chosen blocks replaced."""
    fn = ours.functions[f.name]
    repl = {f.block_ranges[j]: [INDENT + t for t in lines] for j, (_, lines, _) in f.chosen.items()}
    out: list[str] = []
    for a, b in fn.sections:
        i = a
        for s, e in sorted(r for r in repl if a <= r[0] < b):
            out.extend(ours.lines[i:s])
            out.extend(repl[(s, e)])
            i = e
        out.extend(ours.lines[i:b])
    return out


#: Share of the time left to a request under a deadline that measuring a function returned
#: unchanged (the client's program, say) may take (`finish_function`): std.trinity.inference
#: spent 1.4 s of a 2 s compile measuring the client's ``trinity``, whose loops run on past
#: the step cap on most random witnesses, and its answer lost the search's rewrites.
MEASURE_SHARE = 0.25


def finish_function(f: FunctionState, ours: ModuleText, options: CompileOptions) -> None:
    """Prove the spliced function as a whole and measure it (or measure the baseline); past
    the deadline the function keeps its baseline and is marked `FunctionState.cut`."""
    rep = f.report
    if f.cached is not None or f.skipped:
        return  # answered from the result cache / not worked on in this run
    dl = options.deadline
    if f.passthrough or f.reference is None:
        rep.fallback = True
        if f.reference is not None and out_of_time(options) is None:  # e.g. the client's
            # the seed `prepare` checked the client's program with: its witness runs (and
            # the guard-directed search behind them) are reused, not searched for again.
            # Returned as it came, its figures change nothing in the answer: under a
            # deadline the measurement gets MEASURE_SHARE of the time left, and the
            # functions whose code the answer changes keep the rest
            budget = dl if dl is None else dl.share(MEASURE_SHARE)
            m = check_function(
                f.reference,
                None,
                witnesses=options.witnesses,
                seed=options.seed + 1,
                deadline=budget,
            )
            if _unfinished(m.reason):
                cause = out_of_time(options) or "its share of the request deadline ran out"
                f.cut = f.cut or f"{cause}; returned unchanged, not measured"
                if rep.reason and f.cut not in rep.reason:  # a mismatch, say: both hold
                    rep.reason = f"{rep.reason} ({f.cut})"
                mark_unmeasured(rep, f.cut)
                return
            rep.cycles = rep.baseline_cycles = m.baseline_cycles
            rep.halted = m.halted
            rep.heights = rep.baseline_heights = m.baseline_heights
            rep.padded_height = rep.baseline_padded_height = padded_height(m.baseline_heights)
        elif f.reference is None:
            mark_unmeasured(rep, "no baseline program to run: not measured")
        else:
            f.cut = f.cut or f"{out_of_time(options)}; not measured"
            mark_unmeasured(rep, f.cut)
        return
    t = time.perf_counter()
    measured: FunctionVerdict | None = None
    why = out_of_time(options)
    if f.chosen and why is not None:  # no time to prove the spliced function: fail closed
        f.cut = rep.reason = f"{why} before the whole-function proof"
        f.give_back_blocks()
    if f.chosen:
        new_lines = _spliced_lines(f, ours)
        try:
            cand = ours.harness(f.name, options.isa, override={f.name: new_lines})
            v = check_function(
                f.reference,
                cand,
                witnesses=options.witnesses,
                seed=options.seed + 2,
                deadline=dl,
                private_cells=f.private,
            )
        except TasmSyntaxError as exc:  # a spliced candidate must parse; be safe anyway
            v = FunctionVerdict(False, reason=f"spliced function does not assemble: {exc}")
        if v.equivalent:  # differential agreement is not a proof: prove it by alignment
            # the block stage's seed and its proofs of the chosen blocks: a run that differs
            # only by chosen blocks is proven by them, not checked again
            proof = check_aligned(
                f.reference,
                cand,
                witnesses=options.witnesses,
                seed=options.seed,
                deadline=dl,
                private_cells=f.private,
                proven=_chosen_checks(f, options),
            )
            if not proof.equivalent:
                v = replace(v, equivalent=False, reason=f"not proven: {proof.reason}")
        worse = v.equivalent and (
            v.cycles > v.baseline_cycles or not no_taller(v.heights, v.baseline_heights)
        )
        if v.equivalent and not worse:
            f.new_lines = new_lines
            measured = v
            rep.fallback = False
            saved: dict[str, int] = defaultdict(int)
            for j, (source, _lines, verdict) in f.chosen.items():
                saved[source] += len(f.tasks[j].baseline) - verdict.cycles
            # a source's name: one of the report's `Source` values for the sources we ship
            rep.source = cast(Source, max(saved, key=lambda s: saved[s]))
        elif _unfinished(v.reason):
            f.cut = rep.reason = f"{out_of_time(options)} during the whole-function proof"
            f.give_back_blocks()
        else:
            rep.reason = (
                "whole-function re-verification failed: " + (v.reason or "")
                if not v.equivalent
                else "spliced function is not cheaper"
            )
            if not v.equivalent:
                rep.rejections["function"] = rep.rejections.get("function", 0) + 1
            log.warning("function %s falls back: %s", f.name, rep.reason)
            f.give_back_blocks()
    late = out_of_time(options) if measured is None else None
    if measured is None and late is None:
        measured = check_function(
            f.reference, None, witnesses=options.witnesses, seed=options.seed + 2, deadline=dl
        )
        if _unfinished(measured.reason):
            late, measured = out_of_time(options) or "request deadline reached", None
        else:
            rep.fallback = True
            rep.reason = rep.reason or (
                "no verified improvement" if measured.equivalent else measured.reason
            )
    if measured is None:
        rep.fallback = True
        f.cut = f.cut or f"{late}; not measured"
        mark_unmeasured(rep, f"{late}; returned unchanged, not measured")
        rep.latency_s = time.perf_counter() - t
        return
    apply_costs(rep, measured)
    rep.latency_s = time.perf_counter() - t


def mark_unmeasured(rep: FunctionReport, why: str) -> None:
    """Mark a function returned unchanged without a measurement: no costs, and why."""
    rep.measured = False
    rep.cycles = rep.baseline_cycles = 0
    rep.reason = rep.reason or why


def _unfinished(reason: str | None) -> bool:
    """A check stopped by the deadline (`check_function`/`check_aligned` say ``unverified:``)."""
    return reason is not None and "unverified: deadline" in reason


def _chosen_checks(f: FunctionState, options: CompileOptions) -> tuple[BlockCheck, ...]:
    """The block stage's accepted checks of the blocks chosen for ``f`` (as `build_checks`
    made them: the task's baseline, the chosen candidate, the task's dead cells and slots,
    the request's witnesses and seed)."""
    out = []
    for j, (_, cand, verdict) in f.chosen.items():
        if not verdict.equivalent:
            continue
        task = f.tasks[j]
        out.append(
            BlockCheck(
                tuple(str(i) for i in task.baseline),
                tuple(cand),
                options.isa,
                options.witnesses,
                options.seed,
                task.dead_cells,
                task.dead_slots,
            )
        )
    return tuple(out)


def measure_with_callees(
    fns: list[FunctionState], out: ModuleText, options: CompileOptions
) -> None:
    """Honest costs: a function whose callees were improved is measured again as it runs in
    the returned module (its callees' improved code included) against its reference."""
    improved = {f.name for f in fns if f.new_lines is not None}
    if not improved or out_of_time(options) is not None:
        return
    for f in fns:
        if f.passthrough or f.reference is None or f.name not in out.functions:
            continue
        if not (set(out.closure(f.name)[1:]) & improved):
            continue
        try:
            final = out.harness(f.name, options.isa)
        except TasmSyntaxError:
            continue
        v = check_function(
            f.reference,
            final,
            witnesses=options.witnesses,
            seed=options.seed + 2,
            deadline=options.deadline,
            private_cells=f.private,
        )  # the witnesses of the first measurement
        if _unfinished(v.reason):
            return  # out of time: the costs measured with the callees' baseline code stand
        if not v.equivalent:
            if v.witness >= 0:  # each part was proven: this would be a verifier bug
                log.error(
                    "function %s differs from its reference in the assembled module: %s",
                    f.name,
                    v.reason,
                )
            continue  # keep the measurement with the callees' baseline code
        rep = f.report
        if rep.own_cycles is None:  # (the inline pass sets it for what it rewrote)
            rep.own_cycles = rep.cycles
        apply_costs(rep, v)


def assemble(
    fns: list[FunctionState], low: Lowering, ours: ModuleText, client: ModuleText | None
) -> str:
    improved = {f.name: f for f in fns if f.new_lines is not None}
    if client is None:
        lines = list(low.lines)
        edits = []
        for f in improved.values():
            if not f.chosen or f.whole:  # a cache hit or a function-level pass: all of it
                secs = sorted(ours.functions[f.name].sections)
                edits.append((*secs[0], list(f.new_lines or [])))
                edits.extend((a, b, []) for a, b in secs[1:])
                continue
            for j, (_, cand, _) in f.chosen.items():
                s, e = f.block_ranges[j]
                edits.append((s, e, [INDENT + t for t in cand]))
        for s, e, repl in sorted(edits, reverse=True):
            lines[s:e] = repl
        return "\n".join(lines)
    # client mode: replace each improved function's section by our spliced sections
    while True:
        lines = []
        i = 0
        spans = sorted(
            (client.functions[n].sections[0], n) for n in improved if n in client.functions
        )
        for (s, e), name in spans:
            lines.extend(client.lines[i:s])
            lines.extend(improved[name].new_lines or [])
            i = e
        lines.extend(client.lines[i:])
        names = label_lines(lines)
        dupes = {n for n in names if names.count(n) > 1}
        if not dupes:
            return "\n".join(lines)
        # a label of ours collides with one of the client's: give those functions back
        bad = [n for n, f in improved.items() if dupes & set(label_lines(f.new_lines or []))]
        if not bad:
            return "\n".join(client.lines)
        for n in bad:
            f = improved.pop(n)
            f.new_lines = None
            rep = f.report
            rep.fallback, rep.source = True, "compiler"
            rep.reason = "label collision with the client's text"
            rep.cycles, rep.heights = rep.baseline_cycles, rep.baseline_heights
            rep.padded_height = rep.baseline_padded_height
            f.give_back_blocks()
