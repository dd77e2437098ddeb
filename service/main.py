"""The FastAPI application: `create_app(settings)` and its lifespan.

Start-up: engine and session factory, ``alembic upgrade head`` (failures are logged and
retried; the service serves compiles meanwhile and spools their rows), the verify backend
(in-process, or RQ when REDIS_URL is set), and a background task that drains the spool.
Run with ``tasmopt serve`` or ``uvicorn service.main:create_app --factory``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi

from service import errors
from service.api.routes import compile as compile_routes
from service.api.routes import health
from service.compiling import DbBreaker
from service.core.config import Settings
from service.core.db import engine_from_settings, migrate
from service.limits import BodyLimit
from service.schemas import CompileRequest
from service.spool import Spool
from tasmopt.store import make_sessionmaker
from tasmopt.vm.equivalence import check_blocks

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. `settings` defaults to the environment (`Settings()`)."""
    settings = settings or Settings()
    if not logging.getLogger().handlers:  # uvicorn configures only its own loggers
        logging.basicConfig(level=settings.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = app.state
        state.engine = engine_from_settings(settings)
        state.session_factory = make_sessionmaker(state.engine)
        state.spool = Spool(settings.spool_dir)
        state.db_breaker = DbBreaker(cooldown_s=settings.spool_retry_s)
        state.migrated = not settings.migrate_on_start
        if settings.migrate_on_start:
            state.migrated = await asyncio.to_thread(_try_migrate, state.engine)
        state.redis, state.verifier = _verify_backend(settings)
        drainer = asyncio.create_task(_drain_forever(app, settings.spool_retry_s))
        log.info("tasmopt service up: database %s, verification %s",
                 state.engine.url.render_as_string(hide_password=True),
                 "RQ" if state.redis is not None else "in-process")
        try:
            yield
        finally:
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer
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
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.include_router(compile_routes.router)
    app.include_router(health.router)

    @app.middleware("http")
    async def request_id(request: Request, call_next: Any) -> Any:
        request.state.request_id = uuid.uuid4()
        response = await call_next(request)
        response.headers["X-Request-ID"] = str(request.state.request_id)
        return response

    def openapi() -> dict[str, Any]:
        # The compile body is parsed by hand (for line/column errors); publish its schema.
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 routes=app.routes)
            body = CompileRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(body.pop("$defs", {}))
            components["CompileRequest"] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _try_migrate(engine: Any) -> bool:
    try:
        migrate(engine)
        return True
    except Exception as exc:
        log.error("could not migrate the database (%s); compiles are served and spooled, "
                  "will retry", str(exc).splitlines()[0][:200])
        return False


def _verify_backend(settings: Settings) -> tuple[Any, Any]:
    if not settings.redis_url:
        return None, check_blocks
    from worker.queue import connect
    from worker.verifier import RqVerifier

    conn = connect(settings.redis_url)
    return conn, RqVerifier(conn, deadline_s=settings.verify_deadline_s,
                            hard_deadline_s=settings.verify_hard_deadline_s,
                            max_jobs=settings.verify_max_jobs)


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

