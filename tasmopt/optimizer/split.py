"""One request's independent functions compiled concurrently (design §1: batching across a
request), by whoever runs the groups (the service's process pool in the embedded mode).

`compile_split` answers what the result cache knows, partitions the other functions into
groups of about equal size (lines of our lowering), has each group compiled by
``run_groups`` (`compile` with ``options.only`` = the group: the others are passed through),
and assembles the module once more from the groups' results through the cache machinery: an
in-memory overlay holds every group's entries, so the final `compile` answers every function
from it and only lowers, splices and assembles. Each function is proven exactly as in a
sequential compile (its own proof against its reference, in its group's process); nothing
is accepted here that a group did not prove.

Costs: a function's cycles are measured in its group, with callees of other groups at their
baseline code; where a callee of another group improved, the function reports those own
costs and says so (`FunctionReport.notes`), like a cache hit measured before its callees
improved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tasmopt.optimizer.prepare import cached_answers, decode_checked, lower_module
from tasmopt.report import CachedFunction, CompileOptions, CompileResult, FunctionCache
from tasmopt.sources import SourceSet

__all__ = ["compile_split", "compile_group", "partition"]

log = logging.getLogger(__name__)

#: ``groups -> one CompileResult per group`` (each `compile` with ``options.only`` = group).
GroupRunner = Callable[[list[frozenset[str]]], list[CompileResult]]


class _Overlay:
    """The caller's hits and this request's new entries, as one `FunctionCache`."""

    def __init__(self, entries: dict[str, CachedFunction]) -> None:
        self.entries = entries

    def get_many(self, keys: list[str]) -> dict[str, CachedFunction]:
        return {k: self.entries[k] for k in keys if k in self.entries}


def compile_group(
    tir: Any,
    baseline_tasm: str | None,
    *,
    options: CompileOptions,
    compile_fn: Callable[..., CompileResult],
    sources: SourceSet | None = None,
) -> CompileResult:
    """What one group's run does (in whatever process runs it): `compile` with
    ``options.only`` set by `compile_split`, with an empty result cache, so that keys are
    computed and its results come back as ``cache_entries``."""
    return compile_fn(tir, baseline_tasm, options=options, sources=sources, cache=_Overlay({}))


def partition(weights: dict[str, int], groups: int) -> list[frozenset[str]]:
    """Names split into at most ``groups`` non-empty groups of about equal total weight
    (largest first, each to the lightest group)."""
    bins: list[tuple[int, list[str]]] = [(0, []) for _ in range(max(1, groups))]
    for name in sorted(weights, key=lambda n: (-weights[n], n)):
        k = min(range(len(bins)), key=lambda i: bins[i][0])
        total, names = bins[k]
        bins[k] = (total + max(1, weights[name]), [*names, name])
    return [frozenset(names) for _, names in bins if names]


def compile_split(
    tir: Any,
    baseline_tasm: str | None,
    *,
    options: CompileOptions,
    run_groups: GroupRunner,
    groups: int,
    compile_fn: Callable[..., CompileResult],
    sources: SourceSet | None = None,
    cache: FunctionCache | None = None,
) -> CompileResult:
    """Compile ``tir`` with its functions split over ``groups`` concurrent runs.

    Args:
        run_groups: runs `compile` once per group (concurrently), ``only`` = the group, and
            returns the results in order; it raises to make this fall back to ``compile_fn``.
        compile_fn: `tasmopt.optimizer.compile` (passed in: this module sits below it).
        sources, cache: as for `compile` (the final assembly uses the sources only for
            functions no group answered).

    Returns:
        As `compile`: the module TASM and one report per function; ``cache_entries`` are the
        groups' (for the caller to store), ``timings`` the groups' slowest per stage plus
        ``split`` (the final assembly).

    Raises:
        As `compile` (TirError, TasmSyntaxError, BaselineError), before any group runs.
    """
    t0 = time.perf_counter()
    ops = decode_checked(tir, options)  # a client error is raised here, before any group runs
    low, ours, client = lower_module(ops, baseline_tasm, options)
    keys, hits = cached_answers(
        cache if cache is not None and options.use_cache else _Overlay({}),
        ops,
        low,
        ours,
        client,
        replace(options, only=None),
    )
    weights = {
        n: sum(b - a for a, b in ours.functions[n].sections)
        for n, k in keys.items()
        if k not in hits and (options.only is None or n in options.only)
    }
    parts = partition(weights, groups)
    if not parts:  # everything is known (or nothing can be cached): nothing to farm out
        return compile_fn(tir, baseline_tasm, options=options, sources=sources, cache=cache)
    t_plan = time.perf_counter() - t0
    try:
        results = run_groups(parts)
        if len(results) != len(parts):
            raise RuntimeError(f"{len(results)} results for {len(parts)} groups")
    except Exception:
        log.exception("the concurrent compile failed; compiling in this process")
        return compile_fn(tir, baseline_tasm, options=options, sources=sources, cache=cache)
    computed = {
        f.name: f
        for part, r in zip(parts, results, strict=True)
        for f in r.functions
        if f.name in part
    }
    new = [
        e for part, r in zip(parts, results, strict=True) for e in r.cache_entries if e.name in part
    ]
    overlay = _Overlay({**hits, **{e.key: e for e in new}})
    t1 = time.perf_counter()
    final = compile_fn(
        tir,
        baseline_tasm,
        options=replace(options, only=None, use_cache=True),
        sources=sources,
        cache=overlay,
    )
    for rep in final.functions:
        own = computed.get(rep.name)
        if own is None or rep.cache != "hit":
            continue
        rep.cache = own.cache
        rep.status, rep.reason, rep.latency_s = own.status, own.reason, own.latency_s
    stored = cache is not None and options.use_cache
    for e in new:  # measured again as returned in the final assembly: keep that closure
        again = final.remeasured.pop(e.key, None)
        if again is not None:
            e.report["as_returned"] = again[1]
    final.cache_entries = (new + final.cache_entries) if stored else []
    final.remeasured = {k: v for k, v in final.remeasured.items() if k in hits} if stored else {}
    if not stored:
        for rep in final.functions:
            rep.cache = "off"
    timings: dict[str, float] = {"plan": t_plan}
    for r in results:
        for name, seconds in r.timings.items():
            timings[name] = max(timings.get(name, 0.0), seconds)
    timings["split"] = time.perf_counter() - t1
    final.timings = timings
    return final
