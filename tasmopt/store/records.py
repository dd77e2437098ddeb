"""CompileResult -> BuildResult rows (plain dicts), ready to insert or to spool as JSON.

Rows are dicts rather than ORM objects so they can be written to a JSON-lines spool when the
database is unreachable and inserted unchanged later; `rows_to_json`/`rows_from_json` convert
the few non-JSON values (uuid, datetime).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from tasmopt.report import BlockTrajectories, CompileResult, FunctionReport, reward
from tasmopt.tir.codec import encode

__all__ = [
    "build_records",
    "fallback_records",
    "function_tasm",
    "label_index",
    "rows_to_json",
    "rows_from_json",
    "trajectory_rows",
    "TRAJECTORIES",
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
    judged = {(t.function, t.block_index): t for t in result.trajectories}
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
                "clock_cycles": fn.cycles if fn.measured else None,  # NULL: unknown
                "compiler_cycles": fn.baseline_cycles if fn.measured else None,
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
            block_id = uuid.uuid4()
            steps = judged.get((fn.name, block.index))
            rows.append(
                {
                    "id": block_id,
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
                    "context": block_context(steps) if steps is not None else None,
                    TRAJECTORIES: trajectory_rows(steps, block_id, when) if steps else [],
                }
            )
    return rows


#: Key of a block row's judged candidates: rows for `tasmopt.store.models.Trajectory`, which
#: `insert_build_results` writes with the row (they travel through the spool together).
TRAJECTORIES = "trajectories"

#: Longest rejection reason kept per candidate, characters.
MAX_REASON_CHARS = 1000


def block_context(steps: BlockTrajectories) -> dict[str, Any]:
    """A judged block's model input, as stored with its row (`BuildResult.context`): the
    TIR ops as canonical JSON, entry depth, net effect, baseline lines and cycles."""
    return {
        "tir": encode(steps.ops),
        "entry_depth": steps.entry_depth,
        "net_effect": steps.net_effect,
        "baseline": steps.baseline,
        "baseline_cycles": steps.baseline_cycles,
    }


def trajectory_rows(
    steps: BlockTrajectories, build_result_id: uuid.UUID, when: datetime
) -> list[dict[str, Any]]:
    """One `Trajectory` row per judged candidate of a block, with its design §4 reward."""
    return [
        {
            "id": uuid.uuid4(),
            "build_result_id": build_result_id,
            "tir_hash": steps.tir_hash,
            "source": c.source,
            "tasm": "\n".join(c.tasm),
            "accepted": c.accepted,
            "reason": None if c.reason is None else c.reason[:MAX_REASON_CHARS],
            "reason_class": c.reason_class,
            "cycles": c.cycles,
            "baseline_cycles": steps.baseline_cycles,
            "heights": dict(c.heights),
            "logprob": c.logprob,
            "model_version": c.model_version,
            "reward": reward(c.accepted, c.cycles, steps.baseline_cycles),
            "created_at": when,
        }
        for c in steps.candidates
    ]


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


_UUID_KEYS = ("id", "request_id", "build_result_id")


def rows_to_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows -> JSON-safe dicts (uuids as strings, datetimes as ISO 8601), a block row's
    trajectory rows included."""
    out = []
    for row in rows:
        r = dict(row)
        for key in _UUID_KEYS:
            if isinstance(r.get(key), uuid.UUID):
                r[key] = str(r[key])
        if isinstance(r.get("created_at"), datetime):
            r["created_at"] = r["created_at"].isoformat()
        if r.get(TRAJECTORIES):
            r[TRAJECTORIES] = rows_to_json(r[TRAJECTORIES])
        out.append(r)
    return out


def rows_from_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inverse of `rows_to_json`."""
    out = []
    for row in rows:
        r = dict(row)
        for key in _UUID_KEYS:
            if isinstance(r.get(key), str):
                r[key] = uuid.UUID(r[key])
        if isinstance(r.get("created_at"), str):
            r["created_at"] = datetime.fromisoformat(r["created_at"])
        if r.get(TRAJECTORIES):
            r[TRAJECTORIES] = rows_from_json(r[TRAJECTORIES])
        out.append(r)
    return out
