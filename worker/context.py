"""What a worker process's jobs share: the database of the learning loop.

``tasmopt worker`` calls `configure` with the settings of its environment before it starts
working; tests call it with their own database. Jobs call `current`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from tasmopt.store import make_engine, make_sessionmaker
from tasmopt.train.online import FinetuneConfig

__all__ = ["Learning", "WorkerContext", "configure", "current", "reset", "learning_from"]


@dataclass(frozen=True)
class Learning:
    """What the finetune job needs besides the database (design §4 Stage 3).

    Attributes:
        model_store: checkpoint directory (MODEL_STORE); new checkpoints go here.
        corpus_dir: the learning corpus (its holdout is the guard's), None if absent.
        guard_cache: directory where the guard's holdout rows are kept between runs.
        config: the micro-finetune's knobs (steps, AUTO_PROMOTE, device, guard size).
    """

    model_store: Path
    corpus_dir: Path | None
    guard_cache: Path | None
    config: FinetuneConfig


@dataclass(frozen=True)
class WorkerContext:
    """Process-wide resources of the jobs (``learning``: None disables micro-finetunes; the
    finetune job then records ``learning_unavailable``)."""

    session_factory: sessionmaker[Session]
    learning: Learning | None = None


_CONTEXT: WorkerContext | None = None


def configure(
    *,
    database_url: str | None = None,
    session_factory: sessionmaker[Session] | None = None,
    connect_timeout_s: int = 3,
    learning: Learning | None = None,
) -> WorkerContext:
    """Set the process's context from a database URL or an existing session factory."""
    global _CONTEXT
    if session_factory is None:
        if database_url is None:
            raise ValueError("configure() needs database_url or session_factory")
        session_factory = make_sessionmaker(
            make_engine(database_url, connect_timeout_s=connect_timeout_s)
        )
    _CONTEXT = WorkerContext(session_factory=session_factory, learning=learning)
    return _CONTEXT


def current() -> WorkerContext:
    """The context set by `configure`.

    Raises:
        RuntimeError: `configure` was not called in this process.
    """
    if _CONTEXT is None:
        raise RuntimeError("worker context not configured (start workers with `tasmopt worker`)")
    return _CONTEXT


def reset() -> None:
    """Forget the context (tests)."""
    global _CONTEXT
    _CONTEXT = None


def learning_from(settings: Any) -> Learning:
    """The finetune job's `Learning` from the service settings (MODEL_STORE, CORPUS_DIR,
    FINETUNE_STEPS, AUTO_PROMOTE, FINETUNE_DEVICE, GUARD_BLOCKS, TASMOPT_HOME)."""
    corpus = settings.corpus_dir
    return Learning(
        model_store=Path(settings.model_store),
        corpus_dir=corpus if corpus is not None and Path(corpus).is_dir() else None,
        guard_cache=Path(settings.tasmopt_home) / "var" / "guard",
        config=FinetuneConfig(
            steps=settings.finetune_steps,
            auto_promote=settings.auto_promote,
            device=settings.finetune_device,
            guard_limit=settings.guard_blocks,
        ),
    )
