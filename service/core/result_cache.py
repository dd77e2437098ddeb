"""The per-function result cache of the service: `tasmopt.report.FunctionCache` over the
database (table ``function_results``, PostgreSQL in production, SQLite embedded), shared by
every API process and worker, kept across restarts.

Reads are on a request's path: they never raise, and after the database was unreachable they
answer "no hits" for a cool-down instead of waiting on a connect timeout. Writes happen after
the response (`service.core.deepen.Followup`) and by deepening runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from service.core.compiling import DbBreaker
from service.core.spool import is_connectivity_error
from tasmopt.report import CachedFunction
from tasmopt.store import (
    delete_function_result,
    get_function_results,
    purge_function_results,
    put_function_result,
    record_cache_hits,
    record_spot_check,
    update_as_returned,
)
from tasmopt.vm.equivalence import VERIFIER_VERSION

__all__ = ["ResultCache"]

log = logging.getLogger(__name__)


class ResultCache:
    """Best verified program per function context (`tasmopt.optimizer.keys`).

    Args:
        session_factory: sessions on the service's database.
        cooldown_s: after a connectivity failure, seconds during which reads return nothing
            and writes are dropped.
    """

    def __init__(self, session_factory: sessionmaker[Session], *, cooldown_s: float = 5.0):
        self._factory = session_factory
        self._breaker = DbBreaker(cooldown_s=cooldown_s)

    def _failed(self, what: str, exc: Exception) -> None:
        if is_connectivity_error(exc):
            self._breaker.trip()
        log.warning("result cache: %s failed (%s)", what, str(exc).splitlines()[0][:200])

    def get_many(self, keys: list[str]) -> dict[str, CachedFunction]:
        """Entries of ``keys`` (`FunctionCache`); ``{}`` when the database cannot answer."""
        if not keys or not self._breaker.allow():
            return {}
        try:
            with self._factory() as session:
                return get_function_results(session, keys=keys)
        except Exception as exc:
            self._failed("lookup", exc)
            return {}

    def put(self, entries: Iterable[CachedFunction]) -> dict[str, str]:
        """Store entries where they are better than what is stored (`put_function_result`).

        Returns:
            outcome per key: ``inserted``, ``improved``, ``finalized``, ``kept`` or ``failed``.
        """
        out: dict[str, str] = {}
        for entry in entries:
            out[entry.key] = "failed"
            if not self._breaker.allow():
                continue
            for _attempt in range(2):  # a concurrent insert of the same key: update instead
                try:
                    with self._factory() as session, session.begin():
                        out[entry.key] = put_function_result(
                            session, entry=entry, verifier_version=VERIFIER_VERSION
                        )
                    break
                except IntegrityError:
                    continue
                except Exception as exc:
                    self._failed("write", exc)
                    break
        return out

    def update_as_returned(
        self, remeasured: dict[str, tuple[list[str] | None, dict[str, Any]]]
    ) -> int:
        """Write back hits measured again as returned (`CompileResult.remeasured`, best
        effort); how many entries were updated."""
        n = 0
        if not remeasured or not self._breaker.allow():
            return 0
        try:
            with self._factory() as session, session.begin():
                for key, (lines, as_returned) in remeasured.items():
                    n += update_as_returned(session, key=key, lines=lines, as_returned=as_returned)
        except Exception as exc:
            self._failed("as-returned update", exc)
            return 0
        return n

    def record_hits(self, keys: list[str]) -> None:
        """Count served hits (best effort)."""
        if not keys or not self._breaker.allow():
            return
        try:
            with self._factory() as session, session.begin():
                record_cache_hits(session, keys=keys)
        except Exception as exc:
            self._failed("hit count", exc)

    def delete(self, key: str) -> bool:
        """Drop an entry (a spot check found it wrong). True if it was there."""
        try:
            with self._factory() as session, session.begin():
                return delete_function_result(session, key=key)
        except Exception as exc:
            self._failed("delete", exc)
            return False

    def purge_other_versions(self) -> int:
        """Delete entries proven by another verifier version (they can never match a key of
        this one); returns how many (0 when the database cannot answer)."""
        try:
            with self._factory() as session, session.begin():
                n = purge_function_results(session, keep_verifier_version=VERIFIER_VERSION)
        except Exception as exc:
            self._failed("purge", exc)
            return 0
        if n:
            log.info("result cache: %d entries of other verifier versions deleted", n)
        return n

    def passed_spot_check(self, key: str) -> None:
        try:
            with self._factory() as session, session.begin():
                record_spot_check(session, key=key)
        except Exception as exc:
            self._failed("spot-check count", exc)
