"""Injected dependencies of the routes, as `Annotated` aliases.

Everything a route needs comes from ``app.state`` (built once by the lifespan in
`service.main`), so tests swap any of them with ``app.dependency_overrides``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.compiling import Compiler, DbBreaker, Verifier, parse_request
from service.core.config import Settings
from service.schemas import CompileRequest
from service.spool import Spool

__all__ = ["SettingsDep", "SessionDep", "SpoolDep", "BreakerDep", "CompilerDep", "VerifierDep",
           "BaselineDep", "CompileBody", "get_settings", "get_session", "get_spool", "get_breaker",
           "get_compiler", "get_verifier", "get_baseline", "get_compile_request"]


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """A session per request; nothing connects until the route uses it."""
    with request.app.state.session_factory() as session:
        yield session


def get_spool(request: Request) -> Spool:
    return request.app.state.spool


def get_breaker(request: Request) -> DbBreaker:
    return request.app.state.db_breaker


def get_compiler() -> Compiler:
    """The optimizer's entry point (`tasmopt.optimizer.compile`)."""
    from tasmopt.optimizer import compile as compile_tir  # imported on first use: heavy

    return compile_tir


def get_verifier(request: Request) -> Verifier:
    """In-process `check_blocks`, or the RQ backend when REDIS_URL is set."""
    return request.app.state.verifier


def get_baseline() -> Callable[[list[Any], str | None], str]:
    """What to serve when the optimizer fails: the client's baseline, else our lowering."""
    from service.baseline import baseline_tasm

    return baseline_tasm


async def get_compile_request(request: Request) -> CompileRequest:
    """Parse the body ourselves, for messages that name line/column and unknown fields."""
    return parse_request(await request.body())


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SpoolDep = Annotated[Spool, Depends(get_spool)]
BreakerDep = Annotated[DbBreaker, Depends(get_breaker)]
CompilerDep = Annotated[Compiler, Depends(get_compiler)]
VerifierDep = Annotated[Verifier, Depends(get_verifier)]
BaselineDep = Annotated[Callable[[list[Any], str | None], str], Depends(get_baseline)]
CompileBody = Annotated[CompileRequest, Depends(get_compile_request)]
