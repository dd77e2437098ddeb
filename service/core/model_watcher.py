"""Keeps the ``model`` candidate source in step with the production checkpoint, and the
learning phase with the replay buffer (design §3, §4).

`ModelWatcher.refresh` looks at the production pointer (the `checkpoints` row whose status is
``production``); when it names a version other than the one loaded, the checkpoint's
``model.safetensors`` is checked against the registered sha256 and loaded through the loader
hook, ``tasmopt.model.source.load_model_source(checkpoint_dir, device) -> CandidateSource``,
then added to the process's `tasmopt.sources.SourceSet` (`ModelWatcher.sources`). The API calls it every MODEL_POLL_S
seconds, so a promotion is served without a restart; an RQ worker calls it before each async
compile (at most every MODEL_POLL_S seconds).

Until ``tasmopt.model`` is installed, or when a checkpoint cannot be loaded, the service runs
without the model source (a warning, once per version; ``tasmopt_model_info{version="none"}``)
and never fails a request over it.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.core.config import Settings
from service.core.metrics import MODEL_LOAD_FAILURES
from tasmopt.optimizer import default_sources
from tasmopt.sources import SourceSet
from tasmopt.store import (
    CheckpointInfo,
    describe_checkpoint,
    list_checkpoints,
    production_checkpoint,
    promote_checkpoint,
    record_admin_action,
    register_checkpoint,
)
from tasmopt.store.checkpoints import MODEL_FILE, checkpoint_dir, file_sha256
from tasmopt.store.errors import InvalidCheckpoint
from tasmopt.store.runs import buffer_counts
from tasmopt.train.phase import (
    PHASE_A_CI_LOW,
    PHASE_A_VALIDITY,
    PHASE_B_ONLINE,
    compute_phase,
)

__all__ = [
    "Loader",
    "ModelUnavailable",
    "ModelWatcher",
    "default_loader",
    "compute_phase",
    "bootstrap_embedded",
    "PHASE_A_VALIDITY",
    "PHASE_A_CI_LOW",
    "PHASE_B_ONLINE",
]

log = logging.getLogger(__name__)

#: ``(checkpoint_dir, device) -> CandidateSource`` named ``model``.
Loader = Callable[[Path, str], Any]


class ModelUnavailable(RuntimeError):
    """The model package is not installed (``tasmopt.model.source`` cannot be imported)."""


def default_loader(checkpoint_dir: Path, device: str, **options: Any) -> Any:
    """The loader hook: ``tasmopt.model.source.load_model_source``, imported on first use;
    ``options`` are its keyword options (``k``, ``samples``, ``temperature``, ``min_instrs``:
    see `tasmopt.model.source.ModelSource`).

    Raises:
        ModelUnavailable: ``tasmopt.model`` is not installed.
        Exception: whatever the loader raises for a bad checkpoint.
    """
    try:
        from tasmopt.model.source import load_model_source
    except ImportError as exc:
        raise ModelUnavailable(f"tasmopt.model is not available ({exc})") from None
    return load_model_source(checkpoint_dir, device=device, **options)


@dataclass
class ModelWatcher:
    """Loads the production checkpoint's candidate source, and tracks the phase.

    Args:
        session_factory: sessions on the registry's database.
        model_store: MODEL_STORE; relative checkpoint paths are resolved against it.
        device: torch device passed to the loader.
        loader: the loader hook (default `default_loader`).
        poll_s: `refresh_if_due` refreshes at most this often, seconds.
        sources: the candidate sources this process compiles with; the watcher adds and
            removes ``model`` there (default: the built-in rules and search).
    """

    session_factory: sessionmaker[Session]
    model_store: Path
    device: str = "cpu"
    loader: Loader = default_loader
    poll_s: float = 5.0
    sources: SourceSet = field(default_factory=default_sources)
    version: str | None = None
    phase: str = "A"
    phase_detail: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, Any] | None = None
    _failed: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last: float = float("-inf")
    _metrics: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        session_factory: sessionmaker[Session],
        loader: Loader | None = None,
    ) -> ModelWatcher:
        """The watcher of a process configured by ``settings`` (MODEL_STORE, MODEL_DEVICE,
        MODEL_BEAMS, MODEL_SAMPLES, MODEL_TEMPERATURE, MODEL_MIN_INSTRS, MODEL_PRECISION,
        MODEL_POLL_S): the
        API's, a worker's, the embedded deepening process's."""
        return cls(
            session_factory=session_factory,
            model_store=settings.model_store,
            device=settings.model_device,
            loader=loader
            or functools.partial(
                default_loader,
                k=settings.model_beams,
                samples=settings.model_samples,
                temperature=settings.model_temperature,
                min_instrs=settings.model_min_instrs,
                precision=settings.model_precision,
            ),
            poll_s=settings.model_poll_s,
        )

    def snapshot(self) -> tuple[str | None, str, dict[str, Any] | None]:
        """(loaded version or None, phase, buffer counts or None), for the metrics."""
        return self.version, self.phase, self.counts

    def refresh_if_due(self) -> None:
        """`refresh` unless one ran less than `poll_s` seconds ago; never raises."""
        if time.monotonic() - self._last < self.poll_s:
            return
        try:
            self.refresh()
        except Exception as exc:
            log.warning(
                "could not read the production checkpoint (%s)", str(exc).splitlines()[0][:200]
            )

    def refresh(self) -> bool:
        """Load the production checkpoint if it changed.

        Returns:
            True if the registered model source changed (loaded, or removed because no
            checkpoint is production any more).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the registry cannot be read (nothing changes).
        """
        with self._lock:
            self._last = time.monotonic()
            with self.session_factory() as session:
                row = production_checkpoint(session)
                wanted = (
                    None
                    if row is None
                    else (row.version, row.sha256, row.path, dict(row.metrics or {}))
                )
            if wanted is None:
                self._metrics = {}
                if self.version is not None:
                    log.info("no production checkpoint any more; model source removed")
                    self.sources.remove("model")
                    self.version = None
                    return True
                return False
            version, sha256, path, metrics = wanted
            self._metrics = metrics
            if version == self.version or (version, sha256) in self._failed:
                return False
            source = self._load(version, sha256, checkpoint_dir(path, self.model_store))
            if source is None:
                self._failed.add((version, sha256))
                MODEL_LOAD_FAILURES.inc()
                return False
            self.sources.add(source)
            previous, self.version = self.version, version
            log.info("model source: checkpoint %s now serving (was %s)", version, previous)
            return True

    def refresh_phase(self) -> None:
        """Recount the replay buffer and recompute the phase.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
        """
        with self.session_factory() as session:
            counts = buffer_counts(session)
        self.counts = counts
        self.phase, self.phase_detail = compute_phase(counts, self._metrics)

    # -- steps -------------------------------------------------------------------------------

    def _load(self, version: str, sha256: str, directory: Path) -> Any | None:
        try:
            actual = file_sha256(directory / MODEL_FILE)
        except OSError as exc:
            log.error(
                "checkpoint %s: cannot read %s (%s); serving without it",
                version,
                directory / MODEL_FILE,
                exc,
            )
            return None
        if actual != sha256:
            log.error(
                "checkpoint %s: %s has sha256 %s, the registry says %s; not loaded",
                version,
                directory / MODEL_FILE,
                actual[:12],
                sha256[:12],
            )
            return None
        try:
            source = self.loader(directory, self.device)
        except ModelUnavailable as exc:
            log.warning(
                "checkpoint %s is production but %s; serving without the model source", version, exc
            )
            return None
        except Exception:
            log.exception("checkpoint %s could not be loaded; serving without it", version)
            return None
        if getattr(source, "name", None) != "model":
            log.error(
                "checkpoint %s: the loader returned a source named %r, expected "
                "'model'; not registered",
                version,
                getattr(source, "name", None),
            )
            return None
        return source


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def shipped_checkpoint(model_store: Path) -> Path | None:
    """The checkpoint directory shipped in MODEL_STORE: the last one in natural name order
    that has ``config.json`` and ``model.safetensors``; None if there is none."""
    if not model_store.is_dir():
        return None
    dirs = [
        d
        for d in model_store.iterdir()
        if d.is_dir() and (d / "config.json").is_file() and (d / MODEL_FILE).is_file()
    ]
    return max(dirs, key=lambda d: _natural(d.name)) if dirs else None


def bootstrap_embedded(session_factory: sessionmaker[Session], model_store: Path) -> str | None:
    """Embedded default: if the registry is empty, register and promote the checkpoint
    shipped in `model_store` (audited as actor ``system``).

    Returns:
        The version promoted, or None (registry not empty, or nothing shipped).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be written.
    """
    directory = shipped_checkpoint(model_store)
    if directory is None:
        return None
    with session_factory() as session, session.begin():
        if list_checkpoints(session):
            return None
        try:
            info: CheckpointInfo = describe_checkpoint(directory, store=model_store)
        except InvalidCheckpoint as exc:
            log.warning("shipped checkpoint not registered: %s", exc)
            return None
        register_checkpoint(session, info=info)
        promote_checkpoint(session, version=info.version)
        reason = "embedded default: register and promote the shipped checkpoint"
        record_admin_action(
            session,
            actor="system",
            action="register",
            target=info.version,
            reason=reason,
            detail={"path": info.path, "sha256": info.sha256},
        )
        record_admin_action(
            session,
            actor="system",
            action="promote",
            target=info.version,
            reason=reason,
            detail={"previous": None},
        )
    log.info("embedded default: checkpoint %s registered and promoted", info.version)
    return info.version
