"""Background deepening and cache upkeep (design §1: an anytime optimizer with a memory).

After every synchronous compile, `Followup` (one daemon thread, so that neither a slow
database nor a dead Redis ever delays a response):

1. stores the functions the compile computed in full in the result cache
   (`service.core.result_cache.ResultCache`; only ever replacing worse entries);
2. counts the hits it served;
3. submits the functions answered ``improving`` (cut by the deadline, or searched at less than
   DEEPEN_BUDGET_S) to a `Deepener`, which runs them again with DEEPEN_BUDGET_S per function
   and stores what it finds, so that the next build gets it, and its judged candidates in
   the replay buffer, so that Stage 3 learns what the slow search found;
4. submits a sample (CACHE_SPOT_CHECK) of the hits it served for a spot check: the stored
   program is proven again on fresh witnesses, and deleted (with an error logged) if that
   fails.

Deepeners: `LocalDeepener` in the embedded mode (one child process: deepening uses the second
core without taking the API's GIL), `worker.deepen.RqDeepener` with Redis (queue ``deepen``,
after ``verify`` and ``compile`` in every worker's priority order). Both deduplicate by cache
key (a function claimed by a waiting or running deepening is not queued again for
DEEPEN_CLAIM_S), cap their queue (DEEPEN_QUEUE; beyond it work is dropped and counted), and do
no work for functions that are final. `run_payload` is what both run.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Protocol

from service.core.compiling import DbBreaker, make_options, persist
from service.core.config import Settings
from service.core.metrics import DEEPEN, SPOT_CHECKS
from service.core.result_cache import ResultCache
from service.core.schemas import CompileRequest
from service.core.spool import Spool
from tasmopt.deadline import Deadline
from tasmopt.report import CompileOptions, CompileResult
from tasmopt.sources import SourceSet
from tasmopt.store import build_records
from tasmopt.store.records import TRAJECTORIES

__all__ = [
    "DEEPEN_KIND",
    "SPOT_CHECK",
    "REMEASURE",
    "CLAIM_WHILE_RUNNING",
    "Deepener",
    "LocalDeepener",
    "Followup",
    "run_payload",
    "replay_records",
    "replay_writer",
    "ReplayWriter",
    "count_outcomes",
    "exit_with_parent",
]

log = logging.getLogger(__name__)

#: Payload kinds: deepen functions, prove a served cache entry again, or measure served
#: entries as returned where a request had no time to (`CompileResult.unmeasured_hits`).
DEEPEN_KIND = "deepen"
SPOT_CHECK = "spot_check"
REMEASURE = "remeasure"

#: Kinds that claim their functions only while they run (cheap, and needed again whenever
#: the cache changes): a deepening claims them for DEEPEN_CLAIM_S.
CLAIM_WHILE_RUNNING = (SPOT_CHECK, REMEASURE)


class Deepener(Protocol):
    """Where deepening and spot-check payloads go."""

    def submit(self, payload: dict[str, Any]) -> str:
        """Queue ``payload`` without blocking on the work itself.

        Returns:
            ``queued``, ``duplicate`` (every function already claimed), ``full`` (queue at
            its cap) or ``unavailable`` (the backend is down: deepening is off for a while).
        """
        ...


def _payload(
    kind: str, req: CompileRequest, options: CompileOptions, functions: dict[str, str]
) -> dict[str, Any]:
    """JSON-able work: the request's TIR and baseline, and ``{function name: cache key}``."""
    return {
        "kind": kind,
        "tir": req.tir,
        "baseline_tasm": req.baseline_tasm,
        "functions": functions,
        "isa": options.isa,
        "witnesses": options.witnesses,
        "seed": options.seed,
    }


#: Where a deepening run's judged candidates go: ``rows -> None`` (`replay_writer`).
ReplayWriter = Callable[[list[dict[str, Any]]], None]


def replay_records(result: CompileResult, functions: Iterable[str]) -> list[dict[str, Any]]:
    """The replay buffer's rows of a deepening run: the block rows of the ``functions`` it
    computed, each with its model input and every candidate judged on it
    (`tasmopt.store.build_records`), under a fresh request id. A block's best accepted
    candidate is what Stage 3 learns (issue 35: targets from deepening, the service's slow
    search carried into the model's fast path). Functions served from the cache, and
    blocks nothing was judged on, have no rows."""
    names = set(functions)
    computed = {f.name for f in result.functions if f.name in names and f.cache != "hit"}
    return [
        r
        for r in build_records(result, uuid.uuid4())
        if r["block_index"] is not None
        and r["function"] in computed
        and r.get("context")
        and r.get(TRAJECTORIES)
    ]


def replay_writer(session_factory: Any, spool: Spool, breaker: DbBreaker) -> ReplayWriter:
    """A `ReplayWriter` into the service's database, spooling when it is down
    (`service.core.compiling.persist`: never raises)."""

    def write(rows: list[dict[str, Any]]) -> None:
        with session_factory() as session:
            where = persist(rows, session=session, spool=spool, breaker=breaker)
        if where == "lost":
            log.error("deepening: %d replay row(s) lost (database and spool failed)", len(rows))

    return write


def run_payload(
    payload: dict[str, Any],
    *,
    cache: ResultCache,
    sources: SourceSet | None,
    settings: Settings,
    seed: int | None = None,
    replay: ReplayWriter | None = None,
) -> dict[str, str]:
    """Do one deepening or spot check (in whatever process runs it).

    Deepening compiles the request again with ``only`` = its functions (computed afresh, the
    others served from the cache or passed through), DEEPEN_SOURCES, DEEPEN_BUDGET_S of search per function, within
    DEEPEN_TIMEOUT_S, and stores each function's result where it beats the stored one.
    A spot check proves each function's stored lines again with a fresh witness seed.

    ``replay`` receives the run's replay rows (`replay_records`); a failure to write them
    is logged and changes no outcome.

    A remeasure compiles the request again from the cache (no candidate sources): the hits
    named are measured as returned with their callees' code, and their entries updated.

    Returns:
        outcome per function name (deepen: ``inserted``, ``improved``, ``finalized``,
        ``kept``, ``cut``, ``failed``; spot check: ``passed``, ``failed``, ``unfinished``;
        remeasure: ``remeasured``, ``unfinished``).
    """
    from tasmopt.optimizer import compile as compile_tir
    from tasmopt.optimizer import recheck

    functions: dict[str, str] = dict(payload["functions"])
    seed = random.randrange(2**31) if seed is None else seed
    deadline = Deadline(settings.deepen_timeout_s)
    base = CompileOptions(isa=payload["isa"], witnesses=int(payload["witnesses"]), seed=seed)
    if payload["kind"] == SPOT_CHECK:
        out: dict[str, str] = {}
        entries = cache.get_many(list(functions.values()))
        for name, key in functions.items():
            entry = entries.get(key)
            if entry is None or entry.lines is None:
                out[name] = "unfinished"
                continue
            opts = CompileOptions(
                isa=base.isa, witnesses=base.witnesses, seed=seed, deadline=deadline
            )
            why = recheck(
                payload["tir"],
                payload["baseline_tasm"],
                name,
                entry.lines,
                options=opts,
                rewrites=entry.report.get("rewrites") or (),
            )
            if why is None:
                cache.passed_spot_check(key)
                out[name] = "passed"
            elif why.startswith("unverified"):
                out[name] = "unfinished"
            else:
                log.error(
                    "spot check: cached program of %s (key %s) failed on fresh witnesses "
                    "(seed %d): %s; entry deleted",
                    name,
                    key,
                    seed,
                    why,
                )
                cache.delete(key)
                out[name] = "failed"
        return out
    if payload["kind"] == REMEASURE:
        result = compile_tir(
            payload["tir"],
            payload["baseline_tasm"],
            options=CompileOptions(
                isa=base.isa, witnesses=base.witnesses, seed=seed, sources=(), deadline=deadline
            ),
            sources=sources,
            cache=cache,
        )
        cache.update_as_returned(result.remeasured)
        return {
            name: "remeasured" if key in result.remeasured else "unfinished"
            for name, key in functions.items()
        }
    options = CompileOptions(
        isa=base.isa,
        witnesses=base.witnesses,
        seed=seed,
        sources=tuple(settings.deepen_sources),
        search_budget_s=settings.deepen_budget_s * len(functions),
        final_budget_s=settings.deepen_budget_s,
        deadline=deadline,
        only=frozenset(functions),
    )
    result = compile_tir(
        payload["tir"], payload["baseline_tasm"], options=options, sources=sources, cache=cache
    )
    wanted = set(functions.values())
    settled = [e for e in result.cache_entries if e.key in wanted]
    stored = cache.put(settled)
    # functions outside `only` are served from the cache in this run: where a callee's new
    # code changed what they return, their costs as returned were measured again here
    cache.update_as_returned(result.remeasured)
    by_key = {e.key: e.name for e in settled}
    out = {name: "cut" for name in functions}
    for key, outcome in stored.items():
        out[by_key[key]] = outcome
    if replay is not None:
        try:
            rows = replay_records(result, functions)
            if rows:
                replay(rows)
        except Exception:  # training data: never fails the deepening
            log.exception("deepening: could not write the replay rows")
    return out


def count_outcomes(kind: str, outcomes: dict[str, str]) -> None:
    """Count a run's outcomes in `DEEPEN` or `SPOT_CHECKS`."""
    metric = SPOT_CHECKS if kind == SPOT_CHECK else DEEPEN
    for outcome in outcomes.values():
        metric.labels(outcome).inc()


# -- the embedded deepener: one child process ----------------------------------------------------


def exit_with_parent(every_s: float = 1.0) -> None:
    """In a child process of the API: exit as soon as the parent is gone (a stopped or killed
    API must not leave children burning CPU for nobody). Starts a daemon thread."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


_CHILD: dict[str, Any] = {}


def _child_init(settings: Settings) -> None:
    """Runs once in the child: its own database engine, and the production model if any."""
    from service.core.db import engine_from_settings
    from service.core.model_watcher import ModelWatcher
    from tasmopt.store import make_sessionmaker

    logging.basicConfig(level=settings.log_level)
    exit_with_parent()
    factory = make_sessionmaker(engine_from_settings(settings))
    watcher = ModelWatcher.from_settings(settings, factory)
    replay = replay_writer(
        factory, Spool(settings.spool_dir), DbBreaker(cooldown_s=settings.spool_retry_s)
    )
    try:
        watcher.refresh_if_due()
    except Exception:  # no model is fine: rules and search still deepen
        log.warning("deepening runs without the model: it could not be loaded", exc_info=True)
    _CHILD.update(settings=settings, cache=ResultCache(factory), watcher=watcher, replay=replay)


def _child_run(payload: dict[str, Any]) -> dict[str, str]:
    watcher = _CHILD["watcher"]
    try:
        watcher.refresh_if_due()
    except Exception:
        log.warning("model refresh failed in the deepening process", exc_info=True)
    return run_payload(
        payload,
        cache=_CHILD["cache"],
        sources=watcher.sources,
        settings=_CHILD["settings"],
        replay=_CHILD["replay"],
    )


class LocalDeepener:
    """Embedded deepening: a single child process (spawned on first use) works the payloads
    one at a time.

    Args:
        settings: passed to the child (its database, model store, budgets).
        runner: ``payload -> outcomes`` run in-process instead of in a child (tests).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        runner: Callable[[dict[str, Any]], dict[str, str]] | None = None,
    ) -> None:
        self._settings = settings
        self._runner = runner
        self._pool: ProcessPoolExecutor | None = None
        self._claims: dict[str, float] = {}
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def __repr__(self) -> str:
        return f"LocalDeepener(pending={self._pending})"

    @property
    def pending(self) -> int:
        """Payloads waiting or running."""
        return self._pending

    def submit(self, payload: dict[str, Any]) -> str:
        now = time.monotonic()
        kind = payload["kind"]
        with self._lock:
            fresh = {
                n: k
                for n, k in payload["functions"].items()
                if self._claims.get(f"{kind}:{k}", 0.0) <= now
            }
            if not fresh:
                return "duplicate"
            if self._pending >= self._settings.deepen_queue:
                return "full"
            for k in fresh.values():
                self._claims[f"{kind}:{k}"] = now + self._settings.deepen_claim_s
            self._pending += 1
        work = {**payload, "functions": fresh}
        try:
            if self._runner is not None:
                fut: Future[dict[str, str]] = Future()
                threading.Thread(
                    target=self._run_inline, args=(fut, work), daemon=True, name="deepen"
                ).start()
            else:
                fut = self._executor().submit(_child_run, work)
        except Exception:
            log.exception("could not start deepening")
            self._finish(work, {})
            return "unavailable"
        fut.add_done_callback(lambda f: self._finish(work, _outcomes(f)))
        return "queued"

    def _run_inline(self, fut: Future[dict[str, str]], work: dict[str, Any]) -> None:
        assert self._runner is not None
        try:
            fut.set_result(self._runner(work))
        except Exception as exc:
            fut.set_exception(exc)

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_child_init,
                    initargs=(self._settings,),
                )
            return self._pool

    def _finish(self, work: dict[str, Any], outcomes: dict[str, str]) -> None:
        count_outcomes(work["kind"], outcomes)
        with self._lock:
            self._pending -= 1
            if work["kind"] in CLAIM_WHILE_RUNNING:
                for k in work["functions"].values():
                    self._claims.pop(f"{work['kind']}:{k}", None)
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is waiting or running (tests, benchmarks); False on timeout."""
        end = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self) -> None:
        """Stop the child; work not started is dropped (it is only an optimization)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _outcomes(fut: Future[dict[str, str]]) -> dict[str, str]:
    try:
        return fut.result()
    except Exception:
        log.exception("deepening run failed")
        return {"?": "failed"}


# -- after every compile -------------------------------------------------------------------------


class Followup:
    """What happens after a response is ready (module docstring), on one daemon thread.

    Args:
        settings: CACHE_SPOT_CHECK, DEEPEN, the request defaults (`make_options`).
        cache: the result cache (None: nothing stored).
        deepener: where deepening goes (None: no deepening).
        max_queue: compiles waiting to be followed up; beyond it the oldest work is not
            queued (counted as ``full``).
        rng: decides which hits are spot-checked.
    """

    def __init__(
        self,
        settings: Settings,
        cache: ResultCache | None,
        deepener: Deepener | None,
        *,
        max_queue: int = 1024,
        rng: random.Random | None = None,
    ) -> None:
        self._settings = settings
        self.cache = cache
        self.deepener = deepener
        self._rng = rng or random.Random()
        self._queue: queue.Queue[tuple[CompileRequest, CompileResult] | None] = queue.Queue(
            max_queue
        )
        self._thread = threading.Thread(target=self._loop, daemon=True, name="followup")
        self._thread.start()

    def after_compile(self, req: CompileRequest, result: CompileResult | None) -> None:
        """Queue the follow-up of one compile; never blocks, never raises."""
        if result is None or (self.cache is None and self.deepener is None):
            return
        try:
            self._queue.put_nowait((req, result))
        except queue.Full:
            DEEPEN.labels("full").inc(len(result.functions))

    @property
    def pending(self) -> int:
        """Compiles whose follow-up is not done."""
        return self._queue.unfinished_tasks

    def wait_idle(self, timeout: float) -> bool:
        """Block until the queued follow-ups are done (tests); False on timeout."""
        end = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > end:
                return False
            time.sleep(0.01)
        return True

    def close(self, wait_s: float = 0.0) -> None:
        """Stop after the queued follow-ups; wait up to ``wait_s`` seconds for them (their
        cache writes then land before the database engine is disposed)."""
        self._queue.put(None)
        if wait_s > 0:
            self._thread.join(wait_s)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._follow(*item)
            except Exception:
                log.exception("follow-up of a compile failed")
            finally:
                self._queue.task_done()

    def _follow(self, req: CompileRequest, result: CompileResult) -> None:
        options = make_options(req.options, self._settings)
        if self.cache is not None:
            if result.cache_entries:
                self.cache.put(result.cache_entries)
            hits = [f.cache_key for f in result.functions if f.cache == "hit"]
            self.cache.record_hits(hits)
            self.cache.update_as_returned(result.remeasured)
        if self.deepener is None or not self._settings.deepen:
            return
        if result.unmeasured_hits:  # measured as returned in the background, written back
            outcome = self.deepener.submit(
                _payload(REMEASURE, req, options, dict(result.unmeasured_hits))
            )
            DEEPEN.labels(f"remeasure {outcome}").inc(len(result.unmeasured_hits))
        improving = {
            f.name: f.cache_key
            for f in result.functions
            if f.status == "improving" and f.cache_key and f.cache != "off"
        }
        # runs of at most a third of DEEPEN_TIMEOUT_S of search each, so that they finish
        names = list(improving)
        size = max(1, int(self._settings.deepen_timeout_s / (3 * self._settings.deepen_budget_s)))
        for k in range(0, len(names), size):
            part = {n: improving[n] for n in names[k : k + size]}
            outcome = self.deepener.submit(_payload(DEEPEN_KIND, req, options, part))
            DEEPEN.labels(outcome).inc(len(part))
        rate = self._settings.cache_spot_check
        sample = {
            f.name: f.cache_key
            for f in result.functions
            if f.cache == "hit" and not f.fallback and self._rng.random() < rate
        }
        if sample:
            outcome = self.deepener.submit(_payload(SPOT_CHECK, req, options, sample))
            if outcome != "queued":
                SPOT_CHECKS.labels("unfinished").inc(len(sample))
