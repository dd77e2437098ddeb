"""Local spool of BuildResult rows the database could not take: nothing served is lost.

Rows of one request (and, for an async compile, the job's final state) are appended as one
JSON line ``{"rows": [...], "job": {...}?}`` to ``<dir>/build_results.jsonl`` with a
single ``O_APPEND`` write under an exclusive ``flock`` and an fsync, so concurrent writers
(threads or processes) never interleave. `Spool.drain` renames the active file to a private
``draining-*.jsonl`` name first (new appends start a fresh file), inserts the rows it holds
idempotently by row id, and deletes the file once every line is in the database. Lines the
database refuses for a reason other than connectivity are moved to ``rejected-*.jsonl``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tasmopt.store import insert_build_results, save_compile_job
from tasmopt.store.records import rows_from_json, rows_to_json

__all__ = ["Spool", "is_connectivity_error", "job_to_json", "job_from_json"]

log = logging.getLogger(__name__)

ACTIVE = "build_results.jsonl"


def is_connectivity_error(exc: BaseException) -> bool:
    """True if `exc` means "the database cannot be reached" rather than "it refused this"."""
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or type(exc).__name__ in (
            "OperationalError",
            "InterfaceError",
        )
    return isinstance(exc, SQLAlchemyError | OSError)


class Spool:
    """A directory of JSON-lines files holding rows that wait for the database.

    Args:
        directory: created on first use.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._drain_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Spool({str(self.directory)!r})"

    # -- writing -----------------------------------------------------------------------------

    def append(self, rows: list[dict[str, Any]], job: dict[str, Any] | None = None) -> None:
        """Append the rows of one request as one line, durably.

        Args:
            rows: BuildResult rows (`tasmopt.store.build_records`).
            job: an async compile job's final state (keyword arguments of
                `tasmopt.store.save_compile_job`, JSON-safe: ``id`` as a string), if any.

        Raises:
            OSError: the spool directory cannot be written.
        """
        line = (_encode(rows, job) + "\n").encode()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / ACTIVE
        while True:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                # The drainer may have renamed the file between open and lock: write only to
                # the file that is still the active one.
                try:
                    if os.fstat(fd).st_ino != os.stat(path).st_ino:
                        continue
                except FileNotFoundError:
                    continue
                os.write(fd, line)
                os.fsync(fd)
                return
            finally:
                os.close(fd)  # also releases the lock

    # -- reading -----------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """Spool files that hold rows not yet in the database (active one last)."""
        if not self.directory.is_dir():
            return []
        waiting = sorted(self.directory.glob("draining-*.jsonl"))
        active = self.directory / ACTIVE
        return waiting + ([active] if active.exists() else [])

    def pending_rows(self) -> int:
        """Number of rows waiting in the spool (lines that do not parse are not counted)."""
        total = 0
        for path in self.files():
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:  # drained meanwhile
                continue
            for line in text.splitlines():
                try:
                    total += len(json.loads(line)["rows"])
                except (ValueError, KeyError, TypeError):
                    pass
        return total

    def drain(self, factory: sessionmaker[Session]) -> int:
        """Move spooled rows into the database.

        Returns:
            Rows inserted (rows already present are skipped, so a repeated drain returns 0).
            Stops early, keeping the rest for the next call, if the database is unreachable.
        """
        with self._drain_lock:
            if not self.files() or not _reachable(factory):
                return 0
            claimed = self._claim()
            written = 0
            for path in claimed:
                done, n = self._drain_file(path, factory)
                written += n
                if not done:
                    break
            if written:
                log.info("spool: %d row(s) written to the database", written)
            return written

    def _claim(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        claimed = []
        for path in self.files():
            target = self.directory / f"draining-{uuid.uuid4().hex}.jsonl"
            try:
                os.rename(path, target)  # atomic: one drainer wins each file
            except FileNotFoundError:
                continue
            if path.name == ACTIVE:  # wait for a writer that opened it before the rename
                fd = os.open(target, os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                finally:
                    os.close(fd)
            claimed.append(target)
        return claimed

    def _drain_file(self, path: Path, factory: sessionmaker[Session]) -> tuple[bool, int]:
        lines, bad = _read_lines(path)
        if bad:
            self._reject(bad, path)
        written, kept = 0, []
        for k, (rows, job) in enumerate(lines):
            try:
                written += _insert(factory, rows, job)
            except SQLAlchemyError as exc:
                if is_connectivity_error(exc):
                    log.warning("spool: database unreachable (%s); will retry", _short(exc))
                    kept = lines[k:]
                    break
                log.error("spool: database refused a request's rows (%s); moved aside", _short(exc))
                self._reject([_encode(rows, job)], path)
        if kept:
            if len(kept) < len(lines) or bad:
                _rewrite(path, kept)
            return False, written
        path.unlink(missing_ok=True)
        return True, written

    def _reject(self, lines: list[str], source: Path) -> None:
        target = self.directory / f"rejected-{source.stem.split('-')[-1]}.jsonl"
        with open(target, "a", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line.rstrip("\n") + "\n")


def _reachable(factory: sessionmaker[Session]) -> bool:
    try:
        with factory() as session:
            session.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError as exc:
        log.debug("spool: database unreachable (%s)", _short(exc))
        return False


Entry = tuple[list[dict[str, Any]], dict[str, Any] | None]


def _encode(rows: list[dict[str, Any]], job: dict[str, Any] | None) -> str:
    obj: dict[str, Any] = {"rows": rows_to_json(rows)}
    if job is not None:
        obj["job"] = job
    return json.dumps(obj, separators=(",", ":"))


def _insert(
    factory: sessionmaker[Session], rows: list[dict[str, Any]], job: dict[str, Any] | None = None
) -> int:
    for attempt in (1, 2):
        try:
            with factory() as session, session.begin():
                n = insert_build_results(session, rows=rows)
                if job is not None:
                    save_compile_job(session, **job_from_json(job))
                return n
        except IntegrityError:
            if attempt == 2:  # a concurrent drainer inserted them first: the retry skips them
                raise
    return 0


def _read_lines(path: Path) -> tuple[list[Entry], list[str]]:
    good: list[Entry] = []
    bad: list[str] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            job = obj.get("job")
            if job is not None:
                job_from_json(job)  # refuse a malformed job here, not at insert time
            good.append((rows_from_json(obj["rows"]), job))
        except (ValueError, KeyError, TypeError, AttributeError):
            bad.append(line)
    return good, bad


def job_to_json(job: dict[str, Any]) -> dict[str, Any]:
    """`save_compile_job` keyword arguments -> JSON-safe dict (id and time as strings)."""
    out = dict(job)
    out["id"] = str(out["id"])
    if isinstance(out.get("at"), datetime):
        out["at"] = out["at"].isoformat()
    return out


def job_from_json(job: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `job_to_json`.

    Raises:
        KeyError, ValueError, TypeError: not a spooled job.
    """
    out = dict(job)
    out["id"] = uuid.UUID(out["id"])
    if isinstance(out.get("at"), str):
        out["at"] = datetime.fromisoformat(out["at"])
    if not {"status", "backend"} <= out.keys():
        raise KeyError("status/backend")
    return out


def _rewrite(path: Path, lines: list[Entry]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for rows, job in lines:
            fh.write(_encode(rows, job) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200]
