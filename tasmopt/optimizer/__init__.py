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
from typing import Any

from tasmopt.lower.blocks import split_functions
from tasmopt.lower.triton import lower
from tasmopt.lower.validate import find_unlowerable, validate
from tasmopt.module import ModuleText
from tasmopt.optimizer.candidates import build_checks, propose
from tasmopt.optimizer.prepare import check_client_text, entry_hazard, prepare_functions
from tasmopt.optimizer.rank import rank
from tasmopt.optimizer.splice import assemble, finish_function, measure_with_callees
from tasmopt.optimizer.state import VerifyBackend, out_of_time, stage, verify_within
from tasmopt.report import CompileOptions, CompileResult
from tasmopt.rules import RulesSource
from tasmopt.search.source import SearchSource
from tasmopt.sources import SourceSet
from tasmopt.tir import codec
from tasmopt.tir.codec import tir_hash
from tasmopt.tir.ops import Op
from tasmopt.vm.equivalence import REJECTION_CLASSES, Verdict, check_blocks

__all__ = ["compile", "default_sources", "VerifyBackend", "REJECTION_CLASSES", "entry_hazard"]

log = logging.getLogger(__name__)


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
        BaselineError: ``baseline_tasm`` defines none of the TIR's functions.
    """
    options = options or CompileOptions()
    verify = verify or check_blocks
    sources = sources if sources is not None else default_sources()
    timings: dict[str, float] = {}
    with stage(timings, "decode"):
        ops = _decode(tir)
        validate(ops, max_ops=options.max_ops, max_nesting=options.max_nesting)
        if options.strict:
            find_unlowerable(ops, isa=options.isa, strict=True)
        request_hash = tir_hash(ops)
    with stage(timings, "lower"):
        low = lower(ops, isa=options.isa)
        ours = ModuleText.from_lowering(low)
        labels = {name: f.label for name, f in ours.functions.items()}
        client = ModuleText.from_text(baseline_tasm, labels) if baseline_tasm is not None else None
        if client is not None:
            check_client_text(client, low, options.isa)
    fns = prepare_functions(low, ours, client, options, timings)  # times its own checks as "verify"
    chunks = {c.name: c.ops for c in split_functions(ops)}
    for f in fns:
        f.report.tir_hash = tir_hash(chunks.get(f.name, ()))
    tasks = [t for f in fns for t in f.tasks]
    with stage(timings, "candidates"):
        proposals = propose(tasks, options, sources) if out_of_time(options) is None else {}
    with stage(timings, "verify"):
        checks, owners = build_checks(tasks, proposals, options)
        verdicts = verify_within(verify, checks, options)
        if len(verdicts) != len(checks):
            log.error(
                "verify backend returned %d verdicts for %d checks", len(verdicts), len(checks)
            )
            verdicts = [Verdict(False, "rejected", "no verdict")] * len(checks)
    with stage(timings, "rank"):
        rank(fns, tasks, owners, checks, verdicts)
    with stage(timings, "splice"):
        for f in fns:
            finish_function(f, ours, options)
        text = assemble(fns, low, ours, client)
        out = ModuleText.from_text(text, labels)
        for f in fns:
            if f.name in out.functions:
                f.report.tasm = out.section_lines(f.name)
        measure_with_callees(fns, out, options)
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
