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

The verifier is the authority: nothing reaches the output unless it was proven equivalent
to the baseline (or is the baseline).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.lower.blocks import split_functions
from tasmopt.lower.triton import (
    INDENT,
    LOOP_HEADER,
    LoweredBlock,
    LoweredFunction,
    Lowering,
    lower,
)
from tasmopt.lower.validate import find_unlowerable, validate
from tasmopt.module import ModuleText, label_lines
from tasmopt.report import (
    BaselineMismatch,
    BlockReport,
    CandidateStats,
    CompileOptions,
    CompileResult,
    FunctionReport,
    Source,
)
from tasmopt.rules import RulesSource
from tasmopt.search.source import SearchSource
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr, Program
from tasmopt.tir import codec
from tasmopt.tir.codec import tir_hash
from tasmopt.tir.ops import Op
from tasmopt.vm.equivalence import (
    ACCEPTANCE_TABLES,
    REJECTION_CLASSES,
    BlockCheck,
    FunctionVerdict,
    Verdict,
    check_aligned,
    check_blocks,
    check_function,
    no_taller,
    padded_height,
    rejection_class,
)

__all__ = ["compile", "default_sources", "VerifyBackend", "REJECTION_CLASSES", "entry_hazard"]

log = logging.getLogger(__name__)

VerifyBackend = Callable[[list[BlockCheck]], list[Verdict]]


@contextmanager
def _stage(timings: dict[str, float], name: str) -> Iterator[None]:
    t = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t


@dataclass
class _Fn:
    """Working state of one function during a compile."""

    name: str
    report: FunctionReport
    reference: Program | None = None  # what we must beat (client's or ours)
    reference_is_client: bool = False
    passthrough: bool = False  # emit the baseline text unchanged
    tasks: list[BlockTask] = field(default_factory=list)
    block_ranges: list[tuple[int, int]] = field(default_factory=list)
    chosen: dict[int, tuple[str, list[str], Verdict]] = field(default_factory=dict)
    new_lines: list[str] | None = None  # our sections with chosen blocks spliced


def _decode(tir: Any) -> tuple[Op, ...]:
    if isinstance(tir, (str, bytes)):
        return codec.loads(tir)
    if isinstance(tir, tuple) and all(isinstance(o, Op) for o in tir):
        return tir
    if isinstance(tir, list) and tir and all(isinstance(o, Op) for o in tir):
        return tuple(tir)
    return codec.decode(tir)


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

    Returns:
        CompileResult with the module TASM and one FunctionReport per function.

    Raises:
        TirError: malformed or invalid TIR (path of the offending op in the message), or
            (``options.strict``) ops that cannot be lowered.
        TasmSyntaxError: ``baseline_tasm`` does not parse outside functions whose TIR cannot
            be lowered anyway (line and column in the client's text).
    """
    options = options or CompileOptions()
    verify = verify or check_blocks
    sources = sources if sources is not None else default_sources()
    timings: dict[str, float] = {}
    with _stage(timings, "decode"):
        ops = _decode(tir)
        validate(ops)
        if options.strict:
            find_unlowerable(ops, isa=options.isa, strict=True)
        request_hash = tir_hash(ops)
    with _stage(timings, "lower"):
        low = lower(ops, isa=options.isa)
        ours = ModuleText.from_lowering(low)
        labels = {name: f.label for name, f in ours.functions.items()}
        client = ModuleText.from_text(baseline_tasm, labels) if baseline_tasm is not None else None
    fns = _prepare(low, ours, client, options, timings)  # times its own checks as "verify"
    chunks = {c.name: c.ops for c in split_functions(ops)}
    for f in fns:
        f.report.tir_hash = tir_hash(chunks.get(f.name, ()))
    tasks = [t for f in fns for t in f.tasks]
    with _stage(timings, "candidates"):
        proposals = _propose(tasks, options, sources)
    with _stage(timings, "verify"):
        checks, owners = _checks(tasks, proposals, options)
        verdicts = verify(checks) if checks else []
        if len(verdicts) != len(checks):
            log.error(
                "verify backend returned %d verdicts for %d checks", len(verdicts), len(checks)
            )
            verdicts = [Verdict(False, "rejected", "no verdict")] * len(checks)
    with _stage(timings, "rank"):
        _rank(fns, tasks, owners, checks, verdicts, low)
    with _stage(timings, "splice"):
        for f in fns:
            _finish_function(f, ours, options)
        text = _assemble(fns, low, ours, client)
        out = ModuleText.from_text(text, labels)
        for f in fns:
            if f.name in out.functions:
                f.report.tasm = out.section_lines(f.name)
        _measure_with_callees(fns, out, options)
    reference_text = baseline_tasm if baseline_tasm is not None else low.text()
    model = sources.get("model") if "model" in proposals else None
    return CompileResult(
        text,
        [f.report for f in fns],
        request_hash,
        reference_text,
        timings,
        model_version=getattr(model, "version", None),
    )


# -- stage 2: per-function reference and blocks -----------------------------------------


def _prepare(
    low: Lowering,
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    timings: dict[str, float],
) -> list[_Fn]:
    fns: list[_Fn] = []
    for lf in low.functions:
        if not lf.name:
            continue
        f = _Fn(
            lf.name, FunctionReport(name=lf.name, source="compiler", cycles=0, baseline_cycles=0)
        )
        f.report.unlowerable = list(lf.unlowerable)
        fns.append(f)
        if lf.unlowerable:
            f.passthrough = True
            f.report.reason = "TIR contains ops that cannot be lowered to valid TASM: " + "; ".join(
                lf.unlowerable[:3]
            )
            continue
        try:
            our_prog = ours.harness(lf.name, options.isa)
        except TasmSyntaxError as exc:
            f.passthrough = True
            f.report.reason = f"our lowering of a callee does not assemble: {exc}"
            continue
        f.reference = our_prog
        if client is not None:
            if not _client_reference(f, lf.name, our_prog, ours, client, options, timings):
                continue
        for block in _with_loop_counters(low, lf):
            instrs = _block_instrs(low.lines[block.start : block.end], options.isa)
            if not instrs:
                continue
            hazard = entry_hazard(low.lines, block.start, block.end, options.isa)
            if hazard:
                f.report.notes.append(f"block {block.path} not rewritten: {hazard}")
                continue
            f.tasks.append(
                BlockTask(
                    lf.name,
                    block.index,
                    block.path,
                    block.ops,
                    tuple(instrs),
                    block.entry_depth,
                    block.net_effect,
                    tir_hash(block.ops),
                )
            )
            f.block_ranges.append((block.start, block.end))
    return fns


#: The loop counter decrement of a lowered loop (spec/tir.md §3.4), as TIR: ``Push(-1), Add``.
_DECREMENT = (Op("Push", P - 1), Op("Add"))


def _with_loop_counters(low: Lowering, lf: LoweredFunction) -> list[LoweredBlock]:
    """The function's blocks, where the counter decrement ``push -1; add`` that the loop
    header puts before each loop body joins the body's first block (as the TIR ops
    ``Push(-1), Add``): it runs once per iteration and is worth optimizing with the body.
    A body that starts with a call or a branch gets a block of its own for it (index < 0)."""
    blocks = list(lf.blocks)
    by_start = {b.start: k for k, b in enumerate(blocks)}
    glue = 0
    for a, b in lf.sections:
        for i in range(a, b - len(LOOP_HEADER)):
            line = low.lines[i]
            if not (line.endswith(":") and not line[:1].isspace()):
                continue
            if (
                tuple(ln.strip() for ln in low.lines[i + 1 : i + 1 + len(LOOP_HEADER)])
                != LOOP_HEADER
            ):
                continue
            dec, body = i + len(LOOP_HEADER) - 1, i + len(LOOP_HEADER) + 1
            k = by_start.get(body)
            if k is not None:
                old = blocks[k]
                blocks[k] = replace(
                    old, ops=_DECREMENT + old.ops, start=dec, entry_depth=max(old.entry_depth, 1)
                )
            else:
                glue += 1
                blocks.append(
                    LoweredBlock(
                        lf.name, -glue, f"{line[:-1]}.counter", _DECREMENT, dec, body, 1, 0
                    )
                )
    return sorted(blocks, key=lambda b: b.start)


def _client_reference(
    f: _Fn,
    name: str,
    our_prog: Program,
    ours: ModuleText,
    client: ModuleText,
    options: CompileOptions,
    timings: dict[str, float],
) -> bool:
    """Check the client's baseline of ``name`` against ours; False if we must pass it through."""
    if name not in client.functions:
        f.passthrough = True
        f.report.source = "client"
        f.report.mismatch = BaselineMismatch(f"function {name!r} is missing from baseline_tasm")
        f.report.reason = f.report.mismatch.cause
        return False
    our_text, _ = ours.closure_text(name)
    client_text, _ = client.closure_text(name)
    if _normalized(our_text) == _normalized(client_text):
        return True  # identical up to trailing blanks: nothing to check
    client_prog = client.harness(name, options.isa)  # raises TasmSyntaxError -> 422
    with _stage(timings, "verify"):
        proof = check_aligned(
            client_prog, our_prog, witnesses=options.witnesses, seed=options.seed + 1
        )
    if proof.equivalent:  # our lowering is proven equal to the client's program
        f.reference = client_prog
        f.reference_is_client = True
        return True
    # Not proven: the client's program is the reference and is returned as sent. A witness
    # run tells a real disagreement (a mismatch, counted and logged) from a difference in
    # shape we cannot prove either way.
    with _stage(timings, "verify"):
        v = check_function(
            client_prog, our_prog, witnesses=options.witnesses, seed=options.seed + 1
        )
    f.passthrough = True
    f.reference = client_prog  # measured, returned unchanged
    f.report.source = "client"
    if v.witness >= 0:
        f.report.mismatch = BaselineMismatch(
            v.reason or "differs", v.witness, _known_bug(client.section_lines(name))
        )
        f.report.reason = "client baseline disagrees with our lowering: " + (v.reason or "")
        log.warning("function %s: client baseline disagrees with our lowering: %s", name, v.reason)
    else:
        f.report.reason = (
            "our lowering could not be proven equivalent to the client's "
            f"baseline ({proof.reason}); returned unchanged"
        )
    return False


def _normalized(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _known_bug(lines: Sequence[str]) -> str | None:
    """Name the upstream lowering bug a client section shows, if we recognise one."""
    body = [ln.strip() for ln in lines]
    for i, ln in enumerate(body):
        if ln.endswith(":") and ln.startswith("__loop__") and i > 0 and body[i - 1] == "pop 1":
            return (
                "loop fall-through (spec/tir.md §3.4): the loop subroutine is emitted "
                "inline and runs again after the call"
            )
    if "or" in body:
        return "`or` is not a Triton VM instruction (spec/tir.md §1)"
    return None


def entry_hazard(lines: Sequence[str], start: int, end: int, isa: IsaVariant) -> str | None:
    """Why lines ``start:end`` cannot be rewritten as one straight-line block, or None.

    A block is a unit only if control enters it at its first instruction and leaves after
    its last: no label inside it, no control-flow instruction inside it (ISA table
    ``is_control_flow``), and the instruction before it cannot skip its first instruction
    (``skiz`` at the end of an ``Asm`` op, say, makes the first instruction conditional and
    the second a second entry point). Design §2, block boundaries.
    """
    table = instruction_set(isa)

    def name_of(line: str) -> str | None:
        text = line.split("//", 1)[0].strip()
        if not text:
            return None
        if text.endswith(":"):
            return ":"
        return text.split()[0]

    for k in range(start, end):
        n = name_of(lines[k])
        if n == ":":
            return f"label inside the block (line {k + 1})"
        if n is not None and n in table and table[n].is_control_flow:
            return f"control flow `{n}` inside the block (line {k + 1})"
    for k in range(start - 1, -1, -1):
        n = name_of(lines[k])
        if n is None:
            continue
        if n != ":" and n in table and table[n].may_skip_next:
            return f"`{n}` before the block (line {k + 1}) can skip its first instruction"
        break
    return None


def _block_instrs(lines: Sequence[str], isa: IsaVariant) -> list[Instr]:
    text = "\n".join(ln for ln in lines if ln.strip() and not ln.strip().startswith("//"))
    return parse_instructions(text, isa)


# -- stages 3-5 ---------------------------------------------------------------------------


def _propose(
    tasks: list[BlockTask], options: CompileOptions, sources: SourceSet
) -> dict[str, list[list[list[Instr]]]]:
    out: dict[str, list[list[list[Instr]]]] = {}
    for name in options.sources:
        src = sources.get(name)
        if src is None or not tasks:
            continue
        try:
            proposals = src.propose(tasks, options)
        except Exception:  # a source must never break a compile
            log.exception("candidate source %r failed; continuing without it", name)
            continue
        if len(proposals) != len(tasks):
            log.error(
                "source %r returned %d proposal lists for %d blocks",
                name,
                len(proposals),
                len(tasks),
            )
            continue
        out[name] = proposals
    return out


def _checks(
    tasks: list[BlockTask], proposals: dict[str, list[list[list[Instr]]]], options: CompileOptions
) -> tuple[list[BlockCheck], list[tuple[int, str]]]:
    """One check for each task's baseline (it measures the baseline's heights) and one for
    each distinct candidate. ``owners[k] = (task index, source)``; source ``""`` = baseline."""
    checks: list[BlockCheck] = []
    owners: list[tuple[int, str]] = []
    for ti, task in enumerate(tasks):
        base = tuple(str(i) for i in task.baseline)
        seen = {base}
        checks.append(BlockCheck(base, base, options.isa, options.witnesses, options.seed))
        owners.append((ti, ""))
        for name, per_task in proposals.items():
            for cand in per_task[ti]:
                text = tuple(str(i) for i in cand)
                if text in seen:
                    continue
                seen.add(text)
                checks.append(BlockCheck(base, text, options.isa, options.witnesses, options.seed))
                owners.append((ti, name))
    return checks, owners


def _rank_key(v: Verdict, text: Sequence[str]) -> tuple[int, int, int]:
    others = sum(v.heights.get(t, 0) for t in ACCEPTANCE_TABLES if t != "processor")
    return (v.cycles, others, sum(len(t) for t in text))


def _rank(
    fns: list[_Fn],
    tasks: list[BlockTask],
    owners: list[tuple[int, str]],
    checks: list[BlockCheck],
    verdicts: list[Verdict],
    low: Lowering,
) -> None:
    by_task: dict[int, list[tuple[str, BlockCheck, Verdict]]] = defaultdict(list)
    for (ti, source), check, verdict in zip(owners, checks, verdicts):
        by_task[ti].append((source, check, verdict))
    task_fn: dict[int, tuple[_Fn, int]] = {}
    k = 0
    for f in fns:
        for j in range(len(f.tasks)):
            task_fn[k] = (f, j)
            k += 1
    for ti, task in enumerate(tasks):
        f, j = task_fn[ti]
        entries = by_task.get(ti, [])
        base_entry = next((e for e in entries if e[0] == ""), None)
        stats: dict[str, CandidateStats] = {}
        for source, _check, verdict in entries:
            if source:
                st = stats.setdefault(source, CandidateStats())
                st.generated += 1
                st.valid += int(verdict.equivalent)
                if not verdict.equivalent:
                    cls = rejection_class(verdict.reason)
                    f.report.rejections[cls] = f.report.rejections.get(cls, 0) + 1
        base_lines = [str(i) for i in task.baseline]
        report = BlockReport(
            index=task.index,
            path=task.path,
            source="compiler",
            tasm=base_lines,
            baseline_tasm=base_lines,
            cycles=len(base_lines),
            baseline_cycles=len(base_lines),
            tir_hash=task.tir_hash,
            candidates=stats,
        )
        f.report.blocks.append(report)
        if base_entry is None or not base_entry[2].equivalent:
            continue  # cannot even measure the baseline: keep it
        base_v = base_entry[2]
        report.heights = report.baseline_heights = dict(base_v.heights)
        best = None
        for source, check, verdict in entries:
            if not source or not verdict.equivalent or verdict.cycles > base_v.cycles:
                continue
            if not no_taller(verdict.heights, base_v.heights):
                continue
            key = _rank_key(verdict, check.candidate)
            if best is None or key < best[0]:
                best = (key, source, check, verdict)
        if best is None or best[0] >= _rank_key(base_v, base_lines):
            continue
        _, source, check, verdict = best
        f.chosen[j] = (source, list(check.candidate), verdict)
        report.source = source  # type: ignore[assignment]  # a source name is one of the report's Source values for the sources we ship
        report.tasm = list(check.candidate)
        report.cycles = verdict.cycles
        report.heights = dict(verdict.heights)
        report.verified_by = verdict.method


# -- stage 6: splice, re-verify, assemble -------------------------------------------------


def _spliced_lines(f: _Fn, ours: ModuleText) -> list[str]:
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


def _finish_function(f: _Fn, ours: ModuleText, options: CompileOptions) -> None:
    rep = f.report
    if f.passthrough or f.reference is None:
        rep.fallback = True
        if f.reference is not None:  # e.g. the client's baseline, returned unchanged
            m = check_function(
                f.reference, None, witnesses=options.witnesses, seed=options.seed + 2
            )
            rep.cycles = rep.baseline_cycles = m.baseline_cycles
            rep.halted = m.halted
            rep.heights = rep.baseline_heights = m.baseline_heights
            rep.padded_height = rep.baseline_padded_height = padded_height(m.baseline_heights)
        return
    t = time.perf_counter()
    measured: FunctionVerdict | None = None
    if f.chosen:
        new_lines = _spliced_lines(f, ours)
        try:
            cand = ours.harness(f.name, options.isa, override={f.name: new_lines})
            v = check_function(
                f.reference, cand, witnesses=options.witnesses, seed=options.seed + 2
            )
        except TasmSyntaxError as exc:  # a spliced candidate must parse; be safe anyway
            v = FunctionVerdict(False, reason=f"spliced function does not assemble: {exc}")
        if v.equivalent:  # differential agreement is not a proof: prove it by alignment
            # the block stage's seed: its proofs of the chosen blocks are reused
            proof = check_aligned(f.reference, cand, witnesses=options.witnesses, seed=options.seed)
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
        else:
            rep.reason = (
                "whole-function re-verification failed: " + (v.reason or "")
                if not v.equivalent
                else "spliced function is not cheaper"
            )
            if not v.equivalent:
                rep.rejections["function"] = rep.rejections.get("function", 0) + 1
            log.warning("function %s falls back: %s", f.name, rep.reason)
            for b in rep.blocks:
                b.source, b.tasm, b.cycles, b.verified_by = (
                    "compiler",
                    b.baseline_tasm,
                    b.baseline_cycles,
                    None,
                )
                b.heights = dict(b.baseline_heights)
            f.chosen.clear()
    if measured is None:
        measured = check_function(
            f.reference, None, witnesses=options.witnesses, seed=options.seed + 2
        )
        rep.fallback = True
        rep.reason = rep.reason or (
            "no verified improvement" if measured.equivalent else measured.reason
        )
    rep.cycles, rep.baseline_cycles = measured.cycles, measured.baseline_cycles
    rep.halted = measured.halted
    rep.heights, rep.baseline_heights = measured.heights, measured.baseline_heights
    rep.padded_height = padded_height(measured.heights)
    rep.baseline_padded_height = padded_height(measured.baseline_heights)
    rep.latency_s = time.perf_counter() - t


def _measure_with_callees(fns: list[_Fn], out: ModuleText, options: CompileOptions) -> None:
    """Honest costs: a function whose callees were improved is measured again as it runs in
    the returned module (its callees' improved code included) against its reference."""
    improved = {f.name for f in fns if f.new_lines is not None}
    if not improved:
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
            f.reference, final, witnesses=options.witnesses, seed=options.seed + 2
        )  # the witnesses of the first measurement
        if not v.equivalent:
            if v.witness >= 0:  # each part was proven: this would be a verifier bug
                log.error(
                    "function %s differs from its reference in the assembled module: %s",
                    f.name,
                    v.reason,
                )
            continue  # keep the measurement with the callees' baseline code
        rep = f.report
        rep.own_cycles = rep.cycles
        rep.cycles, rep.baseline_cycles = v.cycles, v.baseline_cycles
        rep.halted = v.halted
        rep.heights, rep.baseline_heights = v.heights, v.baseline_heights
        rep.padded_height = padded_height(v.heights)
        rep.baseline_padded_height = padded_height(v.baseline_heights)


def _assemble(fns: list[_Fn], low: Lowering, ours: ModuleText, client: ModuleText | None) -> str:
    improved = {f.name: f for f in fns if f.new_lines is not None}
    if client is None:
        lines = list(low.lines)
        edits = []
        for f in improved.values():
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
            for b in rep.blocks:
                b.source, b.tasm, b.cycles, b.verified_by = (
                    "compiler",
                    b.baseline_tasm,
                    b.baseline_cycles,
                    None,
                )
                b.heights = dict(b.baseline_heights)
