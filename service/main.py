"""The FastAPI application: `create_app(settings)` and its lifespan.

Start-up: refuse a deployment without ADMIN_TOKEN (`Settings.check_deployable`), engine and
session factory, ``alembic upgrade head`` (failures are logged and retried; the service
serves compiles meanwhile and spools their rows), in the embedded mode the shipped
checkpoint registered and promoted if the registry is empty, the verify backend (in-process,
or RQ when REDIS_URL is set), the async-job runner, and two background tasks: one drains the
spool, one follows the production checkpoint and the learning phase.
Run with ``tasmopt serve`` or ``uvicorn service.main:create_app --factory``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from prometheus_client import CollectorRegistry
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import errors
from service.api.routes import admin, health, jobs
from service.api.routes import compile as compile_routes
from service.api.routes import metrics as metrics_routes
from service.core import metrics
from service.core.admission import Admission
from service.core.compile_pool import CompilePool
from service.core.compiling import DbBreaker
from service.core.config import Settings
from service.core.db import engine_from_settings, migrate
from service.core.deepen import Deepener, Followup, LocalDeepener
from service.core.model_watcher import Loader, ModelWatcher, bootstrap_embedded
from service.core.result_cache import ResultCache
from service.core.schemas import CompileRequest
from service.core.spool import Spool
from service.limits import BodyLimit
from service.runners import RqRunner, ThreadRunner
from tasmopt.optimizer import preload
from tasmopt.store import make_sessionmaker
from worker import context as worker_context
from worker.deepen import RqDeepener
from worker.queue import QUEUES, named_queue
from worker.reaper import reap
from worker.verifier import verifier_from_settings

__all__ = ["create_app"]

log = logging.getLogger(__name__)

#: Seconds shutdown waits for queued compile follow-ups (result-cache writes) to land.
FOLLOWUP_DRAIN_S = 10.0


def create_app(settings: Settings | None = None, *, model_loader: Loader | None = None) -> FastAPI:
    """Build the app.

    Args:
        settings: defaults to the environment (`Settings()`).
        model_loader: the checkpoint loader hook (default: ``tasmopt.model.source.
            load_model_source``, imported lazily).

    Raises:
        ValueError: outside the embedded mode without ADMIN_TOKEN.
    """
    settings = settings or Settings()
    settings.check_deployable()
    if not logging.getLogger().handlers:  # uvicorn configures only its own loggers
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    else:  # e.g. the CLI's handler (WARNING unless -v): the service follows LOG_LEVEL
        logging.getLogger().setLevel(settings.log_level.upper())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Compiles are CPU-bound Python threads; the event loop (which answers /healthz) needs
        # the GIL between their bytecodes. A 1 ms switch interval (default 5 ms) lets it in
        # sooner; `benchmarks/load.py --levels` measures the effect.
        sys.setswitchinterval(settings.gil_switch_interval_s)
        state = app.state
        state.engine = engine_from_settings(settings)
        state.session_factory = make_sessionmaker(state.engine)
        state.spool = Spool(settings.spool_dir)
        state.db_breaker = DbBreaker(cooldown_s=settings.spool_retry_s)
        state.migrated = not settings.migrate_on_start
        if settings.migrate_on_start:
            state.migrated = await asyncio.to_thread(_try_migrate, state.engine)
        if settings.embedded and state.migrated:
            await asyncio.to_thread(_try_bootstrap, state.session_factory, settings)
        worker_context.configure(  # POST /admin/finetune runs here without a worker
            session_factory=state.session_factory,
            learning=worker_context.learning_from(settings),
        )
        state.watcher = ModelWatcher.from_settings(settings, state.session_factory, model_loader)
        if state.migrated:  # serve the production model from the first request on
            await asyncio.to_thread(_try_refresh, state.watcher)
        await asyncio.to_thread(preload)  # the first request's checks skip the imports
        state.redis, state.verifier = verifier_from_settings(settings)
        slots = settings.compile_slots or os.cpu_count() or 1
        state.compile_slots = threading.BoundedSemaphore(slots)
        state.admission = Admission(
            slots, settings.compile_queue, settings.retry_after_s, settings.compile_per_client
        )
        state.admission.thread_limiter()  # created in the event loop
        state.control_threads = anyio.CapacityLimiter(4)  # /readyz, never behind compiles
        threads = ThreadRunner(settings.async_threads)
        state.runner = (
            RqRunner(state.redis, settings, threads) if state.redis is not None else threads
        )
        state.result_cache = ResultCache(state.session_factory) if settings.result_cache else None
        if state.result_cache is not None and state.migrated:  # entries of other versions
            await asyncio.to_thread(state.result_cache.purge_other_versions)
        deepener: Deepener | None = None
        if settings.deepen and settings.result_cache:
            deepener = (
                RqDeepener(state.redis, settings)
                if state.redis is not None
                else LocalDeepener(settings)
            )
        state.deepener = deepener
        pool_size = settings.compile_pool_size if state.redis is None else 0
        state.compile_pool = CompilePool(settings, pool_size) if pool_size else None
        state.followup = Followup(settings, state.result_cache, deepener)
        tasks = [
            asyncio.create_task(_drain_forever(app, settings.spool_retry_s)),
            *([asyncio.create_task(_warm_up(state.compile_pool))] if state.compile_pool else []),
            asyncio.create_task(_watch_forever(app, settings)),
        ]
        if state.redis is not None:  # jobs of killed workers go back to the queue in seconds
            tasks.append(asyncio.create_task(_reap_forever(state.redis, REAP_EVERY_S)))
        log.info(
            "tasmopt service up: database %s, verification %s, model %s (store %s), "
            "result cache %s, deepening %s, deadline %d ms, compiles %s",
            state.engine.url.render_as_string(hide_password=True),
            "RQ" if state.redis is not None else "in-process",
            state.watcher.version or "none",
            settings.model_store,
            "on" if state.result_cache is not None else "off",
            repr(deepener) if deepener is not None else "off",
            settings.default_deadline_ms,
            repr(state.compile_pool) if state.compile_pool is not None else "on API threads",
        )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await asyncio.to_thread(threads.shutdown)
            await asyncio.to_thread(state.followup.close, FOLLOWUP_DRAIN_S)
            if state.compile_pool is not None:
                state.compile_pool.close()
            if isinstance(deepener, LocalDeepener):
                deepener.close()
            if state.watcher.version is not None:
                state.watcher.sources.remove("model")
            if state.redis is not None:
                state.redis.close()
            state.engine.dispose()

    app = FastAPI(
        title="tasmopt",
        summary="Cheaper Triton VM assembly for Trident IR, proven equivalent.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics_registry = _metrics_registry(app)
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.include_router(compile_routes.router)
    app.include_router(jobs.router)
    app.include_router(admin.router)
    app.include_router(health.router)
    app.include_router(metrics_routes.router)

    app.add_middleware(RequestId)

    def openapi() -> dict[str, Any]:
        # The compile body is parsed by hand (for line/column errors); publish its schema.
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            body = CompileRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(body.pop("$defs", {}))
            components["CompileRequest"] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema
    return app


def _metrics_registry(app: FastAPI) -> CollectorRegistry:
    """The app's own registry: gauges read from its state at scrape time."""
    state = app.state

    def queue_depths() -> dict[str, int]:
        redis = getattr(state, "redis", None)
        depths: dict[str, int] = {}
        if redis is not None:  # RQ: jobs waiting (running ones are in the started registries)
            depths = {name: named_queue(redis, name).count for name in QUEUES}
        runner = getattr(state, "runner", None)
        if isinstance(runner, ThreadRunner):
            depths["compile"] = runner.pending()
        deepener = getattr(state, "deepener", None)
        if isinstance(deepener, LocalDeepener):  # embedded: waiting or running deepenings
            depths["deepen"] = deepener.pending
        # this process's follow-ups (cache writes, deepening not yet submitted), in both modes
        followup = getattr(state, "followup", None)
        if followup is not None:
            depths["followup"] = followup.pending
        return depths

    def spool_rows() -> int:
        spool = getattr(state, "spool", None)
        return spool.pending_rows() if spool is not None else 0

    def model() -> tuple[str | None, str, dict[str, Any] | None]:
        watcher = getattr(state, "watcher", None)
        return watcher.snapshot() if watcher is not None else (None, "A", None)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        metrics.StateCollector(queue_depths=queue_depths, spool_rows=spool_rows, model=model)
    )
    return registry


def _try_bootstrap(session_factory: Any, settings: Settings) -> None:
    try:
        bootstrap_embedded(session_factory, settings.model_store)
    except Exception:
        log.exception("could not register the shipped checkpoint; continuing without it")


def _try_refresh(watcher: ModelWatcher) -> None:
    try:
        watcher.refresh()
    except Exception as exc:
        log.warning(
            "production checkpoint not read at start-up (%s); will retry",
            str(exc).splitlines()[0][:200],
        )


async def _watch_forever(app: FastAPI, settings: Settings) -> None:
    """Follow the production checkpoint every MODEL_POLL_S seconds and recount the replay
    buffer every PHASE_REFRESH_S seconds; failures are logged and retried."""
    watcher: ModelWatcher = app.state.watcher
    next_phase = 0.0
    while True:
        try:
            if app.state.migrated:
                await asyncio.to_thread(watcher.refresh)
                if time.monotonic() >= next_phase:
                    await asyncio.to_thread(watcher.refresh_phase)
                    next_phase = time.monotonic() + settings.phase_refresh_s
        except Exception as exc:
            log.warning(
                "production checkpoint not read (%s); will retry", str(exc).splitlines()[0][:200]
            )
        await asyncio.sleep(settings.model_poll_s)


class RequestId:
    """Gives every request its id (``request.state.request_id``, the ``X-Request-ID`` header)
    and counts it in the HTTP metrics. A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware``
    (``@app.middleware("http")``) hides the client's disconnect from the route, so an
    abandoned compile would never be cancelled."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4()
        scope.setdefault("state", {})["request_id"] = rid
        start = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers["X-Request-ID"] = str(rid)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            metrics.HTTP_REQUESTS.labels(method, template, str(status)).inc()
            metrics.HTTP_SECONDS.labels(method, template).observe(time.perf_counter() - start)


def _try_migrate(engine: Any) -> bool:
    try:
        migrate(engine)
        return True
    except Exception as exc:
        log.error(
            "could not migrate the database (%s); compiles are served and spooled, will retry",
            str(exc).splitlines()[0][:200],
        )
        return False


#: Seconds between two passes of the abandoned-job reaper (`worker.reaper.reap`).
REAP_EVERY_S = 3.0


async def _warm_up(pool: CompilePool) -> None:
    """Start the compile processes in the background (imports, model) after start-up."""
    try:
        await asyncio.to_thread(pool.warm_up)
    except Exception:
        log.exception("compile processes failed to start; compiles fall back to this process")


async def _reap_forever(connection: Any, every_s: float) -> None:
    """Re-queue the started jobs of dead workers (see `worker.reaper`), every `every_s`."""
    while True:
        try:
            await asyncio.to_thread(reap, connection, QUEUES)
        except Exception as exc:  # Redis down: the next pass tries again
            log.debug("reaper pass failed: %s", exc)
        await asyncio.sleep(every_s)


async def _drain_forever(app: FastAPI, every_s: float) -> None:
    """Retry migrations (if they failed) and drain the spool, every `every_s` seconds."""
    state = app.state
    while True:
        try:
            if not state.migrated:
                state.migrated = await asyncio.to_thread(_try_migrate, state.engine)
            if state.migrated and state.spool.files():
                await asyncio.to_thread(state.spool.drain, state.session_factory)
        except Exception:
            log.exception("spool drain failed; will retry")
        await asyncio.sleep(every_s)
