"""Prometheus metrics of the API (design §5), exported at ``GET /metrics``.

Process-wide counters and histograms live in prometheus-client's default registry; the
per-app gauges (queue depth, spool size, production model, phase, replay buffer) are read
from the app's state at scrape time by `StateCollector`, on a registry of the app's own.

Deployment model: one API process per container (scale with replicas, not ``--workers``),
so no multiprocess mode is needed. RQ workers export their own metrics on their own port
(`worker.metrics`); an async compile run by a worker records the compile metrics below in
the worker's process, with ``mode="async"``.

Units: durations in seconds (``_seconds``), cycle reduction as a ratio in [0, 1]
(``_ratio``), counts as ``_total`` counters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tasmopt.optimizer import REJECTION_CLASSES
from tasmopt.report import CompileResult
from tasmopt.train.phase import phase_b_figures

__all__ = [
    "STAGES",
    "STAGE_SECONDS",
    "HTTP_REQUESTS",
    "HTTP_SECONDS",
    "COMPILES",
    "CANDIDATES_GENERATED",
    "CANDIDATES_VALID",
    "ACCEPTED",
    "CYCLE_REDUCTION",
    "FALLBACKS",
    "BASELINE_MISMATCHES",
    "BUILD_RESULTS",
    "MODEL_LOAD_FAILURES",
    "CACHE_HITS",
    "CACHE_MISSES",
    "DEEPEN",
    "SPOT_CHECKS",
    "observe_compile",
    "StateCollector",
    "render",
]

log = logging.getLogger(__name__)

#: Compile stages timed: ``queue`` (waiting for a compile slot), `CompileResult.timings`,
#: ``persist`` (the rows) and ``total`` (the compile, queue excluded).
STAGES = (
    "queue",
    "decode",
    "lower",
    "cache",
    "candidates",
    "verify",
    "rank",
    "splice",
    "persist",
    "total",
)

#: Candidate sources and report sources pre-declared so that their series exist at zero.
CANDIDATE_SOURCES = ("rules", "search", "model")
SERVED_SOURCES = ("compiler", "rules", "search", "model", "client")

#: Latency buckets, seconds: 1 ms to 30 s (P90 target 200 ms, design §4).
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.35,
    0.5,
    0.75,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
)

STAGE_SECONDS = Histogram(
    "tasmopt_compile_stage_duration_seconds",
    "Seconds spent per compile stage (queue: waiting for a compile slot; decode, lower, "
    "candidates, verify, rank, splice, persist) and for the whole compile (total).",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)
HTTP_REQUESTS = Counter(
    "tasmopt_http_requests_total",
    "HTTP requests answered, by route template and status.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "tasmopt_http_request_duration_seconds",
    "Seconds to answer an HTTP request.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)
COMPILES = Counter(
    "tasmopt_compiles_total",
    "Compiles served: mode sync (POST /compile) or async (jobs); "
    "outcome optimized (fewer cycles), baseline (nothing better verified) or fallback "
    "(the optimizer failed; baseline served as is).",
    ["mode", "outcome"],
)
CACHE_HITS = Counter(
    "tasmopt_cache_hits_total",
    "Functions answered from the per-function result cache.",
)
CACHE_MISSES = Counter(
    "tasmopt_cache_misses_total",
    "Functions looked up in the result cache and computed afresh.",
)
DEEPEN = Counter(
    "tasmopt_deepen_total",
    "Background deepening, per function: queued, duplicate (already queued), full (queue "
    "at its cap), unavailable (Redis down: deepening off for a while), and the outcome of "
    "a deepening run: inserted, improved, finalized, kept, cut (ran out of time), failed; "
    "remeasure <queued|duplicate|...> and remeasured/unfinished for the hits measured as "
    "returned in the background.",
    ["outcome"],
)
SPOT_CHECKS = Counter(
    "tasmopt_cache_spot_checks_total",
    "Cache hits verified again on fresh witnesses: passed, failed (entry deleted), "
    "unfinished (out of time, or the entry was gone).",
    ["outcome"],
)
for _outcome in ("queued", "duplicate", "full", "unavailable", "improved", "cut"):
    DEEPEN.labels(_outcome)  # the series exist at zero
for _outcome in ("passed", "failed", "unfinished"):
    SPOT_CHECKS.labels(_outcome)
CANDIDATES_GENERATED = Counter(
    "tasmopt_candidates_generated_total", "Candidate blocks proposed, by source.", ["source"]
)
CANDIDATES_VALID = Counter(
    "tasmopt_candidates_valid_total",
    "Candidate blocks the verifier accepted, by source.",
    ["source"],
)
ACCEPTED = Counter(
    "tasmopt_accepted_total",
    "Functions and blocks served, by where their TASM came from (compiler = the baseline).",
    ["unit", "source"],
)
CYCLE_REDUCTION = Histogram(
    "tasmopt_cycle_reduction_ratio",
    "Per function served: (baseline cycles - cycles) / baseline cycles.",
    buckets=(0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0),
)
FALLBACKS = Counter(
    "tasmopt_fallbacks_total",
    "Baselines served: kind=function (no verified improvement, "
    "or a check failed) or kind=request (the optimizer failed on the whole request).",
    ["kind"],
)
BASELINE_MISMATCHES = Counter(
    "tasmopt_baseline_mismatches_total",
    "Functions whose client baseline_tasm disagreed with our lowering (returned unchanged).",
)
BUILD_RESULTS = Counter(
    "tasmopt_build_results_total",
    "BuildResult rows of served compiles, by where they "
    "went: database, spool (written later) or lost.",
    ["stored"],
)
VERIFIER_REJECTIONS = Counter(
    "tasmopt_verifier_rejections_total",
    "Candidates the verifier rejected, by reason class: "
    "guards (too few witnesses pass the baseline's guards), degree (polynomial-identity "
    "test not applicable), random (too few random-field witnesses), different (a witness "
    "or the symbolic run shows a difference), unprovable, function (whole-function "
    "re-verification failed).",
    ["reason"],
)
MODEL_LOAD_FAILURES = Counter(
    "tasmopt_model_load_failures_total",
    "Production checkpoints that could not be loaded "
    "(missing model package, checksum mismatch, loader error).",
)

for _stage in STAGES:
    STAGE_SECONDS.labels(_stage)
for _mode in ("sync", "async"):
    for _outcome in ("optimized", "baseline", "fallback"):
        COMPILES.labels(_mode, _outcome)
for _src in CANDIDATE_SOURCES:
    CANDIDATES_GENERATED.labels(_src)
    CANDIDATES_VALID.labels(_src)
for _unit in ("function", "block"):
    for _src in SERVED_SOURCES:
        ACCEPTED.labels(_unit, _src)
for _kind in ("function", "request"):
    FALLBACKS.labels(_kind)
for _reason in REJECTION_CLASSES:
    VERIFIER_REJECTIONS.labels(_reason)
for _stored in ("database", "spool", "lost"):
    BUILD_RESULTS.labels(_stored)


def observe_compile(
    *, result: CompileResult | None, timings: dict[str, float], rows: int, stored: str, mode: str
) -> None:
    """Record one served compile.

    Args:
        result: the optimizer's result, None when the baseline was served as a fallback.
        timings: seconds per stage (unknown stage names are ignored).
        rows: BuildResult rows written or spooled.
        stored: ``database``, ``spool`` or ``lost``.
        mode: ``sync`` or ``async``.
    """
    try:
        for stage, seconds in timings.items():
            if stage in STAGES:
                STAGE_SECONDS.labels(stage).observe(seconds)
        BUILD_RESULTS.labels(stored).inc(rows)
        if result is None:
            FALLBACKS.labels("request").inc()
            COMPILES.labels(mode, "fallback").inc()
            return
        for fn in result.functions:
            if fn.cache == "hit":
                CACHE_HITS.inc()
            elif fn.cache == "miss":
                CACHE_MISSES.inc()
            ACCEPTED.labels("function", fn.source).inc()
            CYCLE_REDUCTION.observe(min(1.0, max(0.0, fn.cycle_reduction)))
            if fn.fallback:
                FALLBACKS.labels("function").inc()
            if fn.mismatch is not None:
                BASELINE_MISMATCHES.inc()
            for reason, n in fn.rejections.items():
                VERIFIER_REJECTIONS.labels(reason).inc(n)
            for block in fn.blocks:
                ACCEPTED.labels("block", block.source).inc()
                for source, stats in block.candidates.items():
                    CANDIDATES_GENERATED.labels(source).inc(stats.generated)
                    CANDIDATES_VALID.labels(source).inc(stats.valid)
        better = result.cycles < result.baseline_cycles
        COMPILES.labels(mode, "optimized" if better else "baseline").inc()
    except Exception:  # metrics never break a compile
        log.exception("could not record compile metrics")


class StateCollector(Collector):
    """Gauges read at scrape time from callables (each may fail without breaking a scrape).

    Args:
        queue_depths: ``() -> {queue: jobs waiting}``.
        spool_rows: ``() -> rows waiting in the spool``.
        model: ``() -> (production version or None, phase "A"/"B", buffer counts or None)``.
    """

    def __init__(
        self,
        *,
        queue_depths: Callable[[], dict[str, int]],
        spool_rows: Callable[[], int],
        model: Callable[[], tuple[str | None, str, dict[str, Any] | None]],
    ) -> None:
        self.queue_depths = queue_depths
        self.spool_rows = spool_rows
        self.model = model

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: no registration-time scrape

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "tasmopt_queue_depth", "Jobs waiting, by queue.", labels=["queue"]
        )
        try:
            for name, n in self.queue_depths().items():
                depth.add_metric([name], n)
        except Exception as exc:
            log.debug("queue depth unavailable: %s", exc)
        yield depth
        spool = GaugeMetricFamily(
            "tasmopt_spool_rows", "BuildResult rows waiting in the spool for the database."
        )
        try:
            spool.add_metric([], self.spool_rows())
        except Exception as exc:
            log.debug("spool size unavailable: %s", exc)
        yield spool
        version, phase, counts = self.model()
        info = GaugeMetricFamily(
            "tasmopt_model_info",
            "Model checkpoint serving (1); version=none when no model source is loaded.",
            labels=["version"],
        )
        info.add_metric([version or "none"], 1)
        yield info
        phases = GaugeMetricFamily(
            "tasmopt_phase", "Learning phase (design §4): 1 for the current one.", labels=["phase"]
        )
        for p in ("A", "B"):
            phases.add_metric([p], 1 if p == phase else 0)
        yield phases
        buffer = GaugeMetricFamily(
            "tasmopt_replay_buffer_rows",
            "Replay-buffer rows: all, blocks, and online (model-proposed, valid, not fallback, "
            "cheaper than the baseline) block results.",
            labels=["kind"],
        )
        for kind in ("rows", "blocks", "online"):
            if counts is not None and kind in counts:
                buffer.add_metric([kind], counts[kind])
        yield buffer
        criteria = GaugeMetricFamily(
            "tasmopt_phase_b_criterion",
            "Design §4 Phase B targets from the online results: current value, 90% CI bounds "
            "and target, per criterion (fractions; latency in ms).",
            labels=["criterion", "stat"],
        )
        if counts is not None:
            for name, fig in phase_b_figures(counts).items():
                lo, hi = fig.get("ci90", [None, None])
                for stat, v in (
                    ("value", fig["value"]),
                    ("ci_low", lo),
                    ("ci_high", hi),
                    ("target", fig["target"]),
                ):
                    if v is not None:
                        criteria.add_metric([name, stat], float(v))
        yield criteria


def render(*registries: CollectorRegistry) -> bytes:
    """The text exposition of the default registry followed by `registries`."""
    return b"".join(generate_latest(r) for r in (REGISTRY, *registries))
