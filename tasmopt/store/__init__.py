"""Persistence of served builds (design §2 BuildResult): SQLAlchemy models and queries.

The schema is owned by Alembic (`migrations/`); this package only declares the mapping and
offers keyword-only query functions over a caller-provided `Session`. It never decides when
sessions start or end, and it imports nothing from the service or the worker.
"""

from tasmopt.store.engine import make_engine, make_sessionmaker
from tasmopt.store.models import SOURCES, Base, BuildResult
from tasmopt.store.queries import (
    count_build_results,
    existing_ids,
    get_build_result,
    insert_build_results,
    list_build_results,
)
from tasmopt.store.records import build_records, fallback_records

__all__ = [
    "SOURCES",
    "Base",
    "BuildResult",
    "make_engine",
    "make_sessionmaker",
    "build_records",
    "fallback_records",
    "insert_build_results",
    "existing_ids",
    "get_build_result",
    "list_build_results",
    "count_build_results",
]
