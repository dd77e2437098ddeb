"""The checkpoint registry (design §3): what is registered, which one serves, and the admin
audit log. Keyword-only functions over a caller-provided `Session`; the caller commits.

Status transitions: ``register`` -> candidate; ``promote`` candidate/archived -> production
(the previous production -> archived); ``rollback`` production -> rejected and the most
recently promoted archived checkpoint -> production; the guard's ``reject`` candidate ->
rejected. A partial unique index keeps at most one production row.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tasmopt.errors import TasmoptError
from tasmopt.store.errors import Conflict, InvalidCheckpoint, NotFound
from tasmopt.store.models import AdminAction, Checkpoint

__all__ = [
    "CheckpointInfo",
    "checkpoint_dir",
    "describe_checkpoint",
    "file_sha256",
    "register_checkpoint",
    "get_checkpoint",
    "list_checkpoints",
    "production_checkpoint",
    "promote_checkpoint",
    "rollback_checkpoint",
    "reject_checkpoint",
    "record_admin_action",
    "list_admin_actions",
    "MODEL_FILE",
    "CONFIG_FILE",
    "METRICS_FILE",
]

log = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"

#: Bytes read at a time while hashing a model file.
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint directory says about itself."""

    version: str
    path: str
    sha256: str
    stage: str = "unknown"
    parent: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _read_config(directory: Path) -> dict[str, Any]:
    # the store reads the file itself (it sits beside the core and imports no model code);
    # the format is `tasmopt.model.checkpoint`'s: a JSON object with `version` and `model`
    path = directory / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict) or "model" not in config:
        raise ValueError(f"{path}: config lacks 'version' or 'model'")
    return config


def describe_checkpoint(directory: Path, *, store: Path | None = None) -> CheckpointInfo:
    """Read ``config.json`` (``version``, optional ``stage``/``parent``), ``metrics.json``
    (optional) and the sha256 of ``model.safetensors`` of a checkpoint directory.

    Args:
        directory: e.g. ``model_store/v3``.
        store: MODEL_STORE; when `directory` lies inside it, the recorded path is relative to
            it (so the registry stays valid wherever the store is mounted).

    Raises:
        InvalidCheckpoint: a file is missing, unreadable, or has no ``version``.
    """
    directory = Path(directory)
    model = directory / MODEL_FILE
    if not (directory / CONFIG_FILE).is_file() or not model.is_file():
        raise InvalidCheckpoint(f"{directory}: a checkpoint needs {CONFIG_FILE} and {MODEL_FILE}")
    try:
        config = _read_config(directory)
        metrics_path = directory / METRICS_FILE
        metrics = (
            json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
        )
        digest = file_sha256(model)
    except (OSError, ValueError, TasmoptError) as exc:
        raise InvalidCheckpoint(
            str(exc) if str(directory) in str(exc) else f"{directory}: {exc}"
        ) from None
    version = config.get("version")
    if not isinstance(version, str | int) or not str(version).strip():
        raise InvalidCheckpoint(f"{directory / CONFIG_FILE}: no 'version'")
    path = directory.resolve()
    if store is not None:
        try:
            path = path.relative_to(Path(store).resolve())
        except ValueError:
            pass
    stage = config.get("stage") or metrics.get("stage") or "unknown"
    parent = config.get("parent") or metrics.get("parent")
    return CheckpointInfo(
        version=str(version),
        path=str(path),
        sha256=digest,
        stage=str(stage)[:32],
        parent=str(parent) if parent else None,
        metrics=metrics if isinstance(metrics, dict) else {},
    )


def register_checkpoint(session: Session, *, info: CheckpointInfo) -> tuple[Checkpoint, bool]:
    """Add a checkpoint as a candidate (idempotent for the same version and weights).

    Returns:
        (row, created): `created` is False if the same version with the same sha256 was
        already registered (the row is returned unchanged).

    Raises:
        Conflict: the version is registered with different weights.
    """
    existing = session.get(Checkpoint, info.version)
    if existing is not None:
        if existing.sha256 != info.sha256:
            raise Conflict(
                f"checkpoint {info.version!r} is already registered with other "
                f"weights (sha256 {existing.sha256[:12]}…)"
            )
        return existing, False
    row = Checkpoint(
        version=info.version,
        parent=info.parent,
        stage=info.stage,
        metrics=info.metrics,
        status="candidate",
        sha256=info.sha256,
        path=info.path,
        created_at=datetime.now(UTC),
    )
    session.add(row)
    session.flush()
    return row, True


def get_checkpoint(session: Session, *, version: str) -> Checkpoint:
    """The checkpoint `version`.

    Raises:
        NotFound: no such version.
    """
    row = session.get(Checkpoint, version)
    if row is None:
        raise NotFound(f"no checkpoint {version!r}")
    return row


def list_checkpoints(session: Session, *, status: str | None = None) -> list[Checkpoint]:
    """Checkpoints, newest registration first, optionally of one status."""
    stmt = select(Checkpoint)
    if status is not None:
        stmt = stmt.where(Checkpoint.status == status)
    return list(session.scalars(stmt.order_by(Checkpoint.created_at.desc(), Checkpoint.version)))


def production_checkpoint(session: Session) -> Checkpoint | None:
    """The checkpoint serving now, if any."""
    return session.scalars(select(Checkpoint).where(Checkpoint.status == "production")).first()


def promote_checkpoint(
    session: Session, *, version: str, now: datetime | None = None
) -> tuple[Checkpoint, Checkpoint | None]:
    """Make `version` production; the previous production becomes archived.

    Returns:
        (promoted, previous production or None).

    Raises:
        NotFound: no such version.
        Conflict: it is already production, or it was rejected.
    """
    row = get_checkpoint(session, version=version)
    if row.status == "production":
        raise Conflict(f"checkpoint {version!r} is already production")
    if row.status == "rejected":
        raise Conflict(f"checkpoint {version!r} was rejected; register a new version instead")
    previous = production_checkpoint(session)
    if previous is not None:
        previous.status = "archived"
        session.flush()  # one production at a time, even inside the transaction
    row.status = "production"
    row.promoted_at = now or datetime.now(UTC)
    session.flush()
    return row, previous


def rollback_checkpoint(
    session: Session, *, now: datetime | None = None
) -> tuple[Checkpoint, Checkpoint]:
    """Reject the production checkpoint and restore the one promoted before it.

    Returns:
        (restored, rolled back).

    Raises:
        Conflict: there is no production checkpoint, or none served before it.
    """
    current = production_checkpoint(session)
    if current is None:
        raise Conflict("there is no production checkpoint to roll back")
    stmt = (
        select(Checkpoint)
        .where(Checkpoint.status == "archived", Checkpoint.promoted_at.is_not(None))
        .order_by(Checkpoint.promoted_at.desc())
        .limit(1)
    )
    previous = session.scalars(stmt).first()
    if previous is None:
        raise Conflict(f"checkpoint {current.version!r} has no previous production to roll back to")
    current.status = "rejected"
    session.flush()
    previous.status = "production"
    previous.promoted_at = now or datetime.now(UTC)
    session.flush()
    return previous, current


def reject_checkpoint(session: Session, *, version: str) -> Checkpoint:
    """Mark a candidate rejected (the regression guard refused it).

    Raises:
        NotFound: no such version.
        Conflict: it is not a candidate.
    """
    row = get_checkpoint(session, version=version)
    if row.status != "candidate":
        raise Conflict(f"checkpoint {version!r} is {row.status}, not a candidate")
    row.status = "rejected"
    session.flush()
    return row


def checkpoint_dir(path: str, model_store: Path | str) -> Path:
    """The directory of a registered checkpoint from its ``Checkpoint.path``: relative to
    MODEL_STORE unless absolute (see `describe_checkpoint`)."""
    p = Path(path)
    return p if p.is_absolute() else Path(model_store) / p


def record_admin_action(
    session: Session,
    *,
    actor: str,
    action: str,
    reason: str,
    target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> AdminAction:
    """Append one entry to the audit log (flushed, not committed)."""
    row = AdminAction(
        actor=actor[:64],
        action=action[:32],
        target=target,
        reason=reason,
        detail=detail or {},
        at=datetime.now(UTC),
    )
    session.add(row)
    session.flush()
    return row


def list_admin_actions(session: Session, *, limit: int = 100) -> list[AdminAction]:
    """The most recent audit entries, newest first."""
    stmt = select(AdminAction).order_by(AdminAction.id.desc()).limit(limit)
    return list(session.scalars(stmt))
