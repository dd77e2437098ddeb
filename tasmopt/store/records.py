"""CompileResult -> BuildResult rows (plain dicts), ready to insert or to spool as JSON.

Rows are dicts rather than ORM objects so they can be written to a JSON-lines spool when the
database is unreachable and inserted unchanged later; `rows_to_json`/`rows_from_json` convert
the few non-JSON values (uuid, datetime).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from tasmopt.report import CompileResult, FunctionReport

__all__ = [
    "build_records",
    "fallback_records",
    "function_tasm",
    "label_index",
    "rows_to_json",
    "rows_from_json",
]


def _label(name: str) -> str:
    # spec/tir.md §3.2: a function label is ``__name`` unless the name already starts with ``__``.
    return f"{name}:" if name.startswith("__") else f"__{name}:"


def function_tasm(
    result: CompileResult, function: FunctionReport, index: dict[str, int] | None = None
) -> str:
    """The section of ``result.tasm`` that belongs to `function`.

    Uses ``function.tasm`` (its lines in the returned module) when the optimizer provides
    them; otherwise slices the module text from the function's label line to the next
    function's label line (deferred branch subroutines are emitted at ``FnEnd``, so they stay
    with their function). Returns ``""`` if the label is not found.

    Args:
        index: `label_index` of ``result``, when slicing many functions of one result (linear
            instead of quadratic in the number of functions).
    """
    own = function.tasm
    if own:
        return "\n".join(own).rstrip("\n")
    lines = result.tasm.split("\n")
    starts = index if index is not None else label_index(result)
    begin = starts.get(_label(function.name))
    if begin is None:
        return ""
    after = [v for v in starts.values() if v > begin]
    end = min(after, default=len(lines))
    return "\n".join(lines[begin:end]).rstrip("\n")


def label_index(result: CompileResult) -> dict[str, int]:
    """First line of each function's label in ``result.tasm`` (function labels only)."""
    labels = {_label(f.name) for f in result.functions}
    out: dict[str, int] = {}
    for i, line in enumerate(result.tasm.split("\n")):
        if line in labels and line not in out:
            out[line] = i
    return out


def build_records(
    result: CompileResult,
    request_id: uuid.UUID | str,
    *,
    created_at: datetime | None = None,
    total_latency_s: float | None = None,
) -> list[dict[str, Any]]:
    """One row per function, then one per block of that function, in report order.

    Args:
        result: what `tasmopt.optimizer.compile` returned.
        request_id: groups the rows of one compile.
        created_at: served-at timestamp (UTC); now if omitted.
        total_latency_s: latency of the whole compile, seconds; used for function rows whose
            report carries no latency of its own.

    Returns:
        Dicts with the columns of `tasmopt.store.models.BuildResult`, each with a fresh
        ``id`` (uuid4). ``valid`` is False only where the served TASM is not known to be
        equivalent to our lowering (the client's baseline returned unchanged after a
        mismatch); ``table_heights``/``padded_height`` are empty/NULL for block rows, whose
        reports carry no heights.
    """
    rid = uuid.UUID(str(request_id))
    when = created_at or datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    index = label_index(result)
    for fn in result.functions:
        latency_s = fn.latency_s or total_latency_s or 0.0
        rows.append(
            {
                "id": uuid.uuid4(),
                "request_id": rid,
                "tir_hash": fn.tir_hash or result.tir_hash,
                "function": fn.name,
                "block_index": None,
                "tasm": function_tasm(result, fn, index),
                "valid": fn.mismatch is None and fn.source != "client",
                "clock_cycles": fn.cycles,
                "compiler_cycles": fn.baseline_cycles,
                "table_heights": dict(fn.heights),
                "padded_height": fn.padded_height or None,
                "fallback_used": fn.fallback,
                "source": fn.source,
                "model_version": result.model_version,
                "created_at": when,
                "latency_ms": latency_s * 1000.0,
                "reason": fn.reason,
                "rejections": dict(fn.rejections),
            }
        )
        for block in fn.blocks:
            rows.append(
                {
                    "id": uuid.uuid4(),
                    "request_id": rid,
                    "tir_hash": block.tir_hash or fn.tir_hash or result.tir_hash,
                    "function": fn.name,
                    "block_index": block.index,
                    "tasm": "\n".join(block.tasm),
                    "valid": block.source == "compiler" or block.verified_by is not None,
                    "clock_cycles": block.cycles,
                    "compiler_cycles": block.baseline_cycles,
                    "table_heights": {},
                    "padded_height": None,
                    "fallback_used": block.source == "compiler",
                    "source": block.source,
                    "model_version": result.model_version,
                    "created_at": when,
                    "latency_ms": block.latency_s * 1000.0,
                }
            )
    return rows


def fallback_records(
    *,
    tasm: str,
    tir_hash: str,
    request_id: uuid.UUID | str,
    source: str = "compiler",
    latency_s: float = 0.0,
    created_at: datetime | None = None,
) -> list[dict[str, Any]]:
    """The single whole-module row of a compile served without a `CompileResult`.

    Used when the optimizer failed and the baseline was served as is: ``function`` is
    ``""``, cycles are unknown (NULL), ``fallback_used`` is True.
    """
    return [
        {
            "id": uuid.uuid4(),
            "request_id": uuid.UUID(str(request_id)),
            "tir_hash": tir_hash,
            "function": "",
            "block_index": None,
            "tasm": tasm,
            "valid": source == "compiler",
            "clock_cycles": None,
            "compiler_cycles": None,
            "table_heights": {},
            "padded_height": None,
            "fallback_used": True,
            "source": source,
            "model_version": None,
            "created_at": created_at or datetime.now(UTC),
            "latency_ms": latency_s * 1000.0,
        }
    ]


def rows_to_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows -> JSON-safe dicts (uuids as strings, datetimes as ISO 8601)."""
    out = []
    for row in rows:
        r = dict(row)
        for key in ("id", "request_id"):
            r[key] = str(r[key])
        if isinstance(r.get("created_at"), datetime):
            r["created_at"] = r["created_at"].isoformat()
        out.append(r)
    return out


def rows_from_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inverse of `rows_to_json`."""
    out = []
    for row in rows:
        r = dict(row)
        for key in ("id", "request_id"):
            r[key] = uuid.UUID(r[key])
        if isinstance(r.get("created_at"), str):
            r["created_at"] = datetime.fromisoformat(r["created_at"])
        out.append(r)
    return out
