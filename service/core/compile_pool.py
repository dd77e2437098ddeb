"""Compiles in worker processes (embedded mode): CPU-bound work off the API process.

A synchronous compile in the embedded mode runs its functions on a pool of processes
(`tasmopt.optimizer.split.compile_split`: the functions the result cache does not know are
split into up to COMPILE_PROCESSES groups, compiled concurrently, and assembled in the API
process from their results). The API process keeps the GIL for the event loop, `/healthz`
and `/metrics`; independent functions of one request run in parallel. Each process loads the
production model itself (and picks up promotions like the API) and verifies in-process.

The request's deadline travels with each group (as time left); a client's disconnect does not
reach a group already running, which stops at the deadline. A broken pool (a process killed)
makes that compile run in the API process, and the pool is rebuilt.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

from service.core.config import Settings
from service.core.deepen import exit_with_parent
from tasmopt.optimizer import preload
from tasmopt.report import CompileOptions, CompileResult, FunctionCache
from tasmopt.sources import SourceSet

__all__ = ["CompilePool"]

log = logging.getLogger(__name__)

_PROCESS: dict[str, Any] = {}


def _init(settings: Settings) -> None:
    from service.core.db import engine_from_settings
    from service.core.model_watcher import ModelWatcher
    from tasmopt.store import make_sessionmaker

    logging.basicConfig(level=settings.log_level)
    exit_with_parent()
    preload()
    watcher = ModelWatcher.from_settings(
        settings, make_sessionmaker(engine_from_settings(settings))
    )
    _PROCESS["watcher"] = watcher
    _refresh()


def _refresh() -> None:
    try:
        _PROCESS["watcher"].refresh_if_due()
    except Exception:  # rules and search still run without the model
        log.warning("compile process: model refresh failed", exc_info=True)


def _ready() -> bool:
    return "watcher" in _PROCESS


def _run_group(tir: Any, baseline_tasm: str | None, options: CompileOptions) -> CompileResult:
    from tasmopt.optimizer import compile as compile_tir
    from tasmopt.optimizer.split import compile_group

    _refresh()
    return compile_group(
        tir,
        baseline_tasm,
        options=options,
        compile_fn=compile_tir,
        sources=_PROCESS["watcher"].sources,
    )


class CompilePool:
    """A `service.core.compiling.Compiler` whose work runs on ``processes`` processes.

    Args:
        settings: passed to the processes (database of the model registry, model store,
            log level).
        processes: pool size (COMPILE_PROCESSES).
    """

    def __init__(self, settings: Settings, processes: int) -> None:
        self._settings = settings
        self.processes = processes
        self._lock = threading.Lock()
        self._pool = self._start()

    def __repr__(self) -> str:
        return f"CompilePool(processes={self.processes})"

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init,
            initargs=(self._settings,),
        )

    def warm_up(self) -> None:
        """Start every process now (imports, model) instead of on the first request."""
        futures = [self._pool.submit(_ready) for _ in range(self.processes)]
        for f in futures:
            f.result()

    def __call__(
        self,
        tir: Any,
        baseline_tasm: str | None = None,
        *,
        options: CompileOptions,
        verify: Any = None,
        sources: SourceSet | None = None,
        cache: FunctionCache | None = None,
    ) -> CompileResult:
        """As `tasmopt.optimizer.compile` (``verify`` is ignored: the processes verify
        in-process, which is what the embedded mode does anyway)."""
        from tasmopt.optimizer import compile as compile_tir
        from tasmopt.optimizer.split import compile_split

        def run_groups(parts: list[frozenset[str]]) -> list[CompileResult]:
            pool = self._pool
            try:
                futures: list[Future[CompileResult]] = [
                    pool.submit(_run_group, tir, baseline_tasm, replace(options, only=part))
                    for part in parts
                ]
                return [f.result() for f in futures]
            except BrokenProcessPool:
                self._restart(pool)
                raise

        return compile_split(
            tir,
            baseline_tasm,
            options=options,
            run_groups=run_groups,
            groups=self.processes,
            compile_fn=compile_tir,
            sources=sources,
            cache=cache,
        )

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                log.error("a compile process died; restarting the pool")
                broken.shutdown(wait=False, cancel_futures=True)
                self._pool = self._start()

    def close(self) -> None:
        """Stop the processes (their work is bounded by the requests' deadlines)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
