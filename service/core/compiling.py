"""What `POST /compile` does between the route and `tasmopt`: parse, check limits, compile
(serving the baseline if the optimizer fails), persist (or spool), and shape the response.

Kept free of FastAPI types so it can be read, and tested, as plain functions.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from pydantic import ValidationError
from sqlalchemy.orm import Session

from service.core.config import Settings
from service.core.errors import (
    CLIENT_ERRORS,
    InvalidRequest,
    LimitExceeded,
    MalformedBody,
    RequestCancelled,
    UnsupportedMediaType,
)
from service.core.schemas import CompileOptionsIn, CompileRequest, CompileResponse
from service.core.spool import Spool, is_connectivity_error, job_to_json
from tasmopt.deadline import Deadline
from tasmopt.lower.validate import validate
from tasmopt.report import CompileOptions, CompileResult
from tasmopt.store import build_records, fallback_records, insert_build_results, save_compile_job
from tasmopt.tir import codec
from tasmopt.tir.ops import BODY_FIELDS
from tasmopt.vm.equivalence import BlockCheck, Verdict

__all__ = [
    "Compiler",
    "Verifier",
    "Served",
    "DbBreaker",
    "parse_request",
    "check_media_type",
    "check_limits",
    "check_request_limits",
    "make_options",
    "deadline_s",
    "precheck",
    "serve",
    "persist",
    "to_response",
]

log = logging.getLogger(__name__)

Verifier = Callable[[list[BlockCheck]], list[Verdict]]


class Compiler(Protocol):
    """The shape of `tasmopt.optimizer.compile`."""

    def __call__(
        self,
        tir: Sequence[Any],
        baseline_tasm: str | None = None,
        *,
        options: CompileOptions = ...,
        verify: Verifier | None = None,
    ) -> CompileResult: ...


# -- parsing and limits ------------------------------------------------------------------------

_REQUEST_FIELDS = tuple(CompileRequest.model_fields)
_OPTION_FIELDS = tuple(CompileOptionsIn.model_fields)


def check_media_type(content_type: str | None) -> None:
    """A compile body is JSON: ``application/json`` or any ``+json`` type; a missing header is
    taken as JSON.

    Raises:
        UnsupportedMediaType: any other declared type (``text/plain``, a form, ...).
    """
    if not content_type:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType(
            f"request body is declared as {media!r}; send the compile request as application/json"
        )


def parse_request(body: bytes) -> CompileRequest:
    """Bytes -> `CompileRequest`.

    Raises:
        MalformedBody: not UTF-8, not JSON (with line and column), or nested too deeply for
            the JSON parser.
        InvalidRequest: JSON that is not a compile request; every problem is listed.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"request body is not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise MalformedBody('request body is empty; expected JSON {"tir": [...]}')
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedBody(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except RecursionError:
        raise MalformedBody("JSON nested too deeply to parse") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's 4300 digits
        raise MalformedBody(f"malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRequest(
            f"request body must be a JSON object with fields "
            f"{list(_REQUEST_FIELDS)}, got a JSON {_json_type(obj)}"
        )
    try:
        return CompileRequest.model_validate(obj)
    except ValidationError as exc:
        errors = [_describe(e) for e in exc.errors()]
        raise InvalidRequest(errors[0], errors=errors) from None


def _json_type(obj: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(obj), "number"
    )


def _describe(error: Any) -> str:
    loc = ".".join(str(p) for p in error.get("loc", ()))
    if error.get("type") == "extra_forbidden":
        *parent, name = [str(p) for p in error["loc"]]
        if parent == ["options"]:
            return f"unknown option {name!r} (known: {', '.join(_OPTION_FIELDS)})"
        return f"unknown field {'.'.join([*parent, name])!r} (known: {', '.join(_REQUEST_FIELDS)})"
    if error.get("type") == "missing":
        return f"{loc}: required field missing"
    return f"{loc}: {error.get('msg')}"


#: Deepest JSON allowed inside one op outside its bodies (``{"Asm": {"lines": [...]}}`` is 3).
MAX_PAYLOAD_DEPTH = 8


#: Ops that end a straight-line run of TIR (a basic block of the lowering, design §2).
_BLOCK_ENDS = frozenset({*BODY_FIELDS, "Call", "Return", "FnStart", "FnEnd"})


def check_limits(
    tir: list[Any],
    *,
    max_ops: int,
    max_depth: int,
    max_functions: int | None = None,
    max_block_ops: int | None = None,
) -> int:
    """Count ops and nesting without recursion, before anything recursive sees the TIR.

    Bodies are followed through the body fields of spec/tir.md §1 (``then_body``,
    ``else_body``, ``body``); anything else inside an op may be at most `MAX_PAYLOAD_DEPTH`
    deep. Shape errors are left to the codec, which reports them with their path.

    Args:
        max_functions: most functions (top-level ``FnStart`` ops); each costs a lowering, a
            reference check and a measurement even when it is empty.
        max_block_ops: most ops in one straight-line run (no body, call or return between
            them): the largest basic block the search and the verifier will face.

    Returns:
        The number of ops (nested ones included).

    Raises:
        LimitExceeded: naming the path of the first op past a limit, and the limit.
    """
    if max_functions is not None:
        starts = [i for i, op in enumerate(tir) if isinstance(op, dict) and "FnStart" in op]
        if len(starts) > max_functions:
            at = f"tir[{starts[max_functions]}]"
            raise LimitExceeded(
                f"{at}: more than {max_functions} functions in one request (MAX_TIR_FUNCTIONS)",
                path=at,
            )
    count = 0
    stack: list[tuple[list[Any], str, int]] = [(tir, "tir", 0)]  # (ops, path, body depth)
    while stack:
        ops, path, depth = stack.pop()
        run = 0
        for i, op in enumerate(ops):
            count += 1
            if count > max_ops:
                raise LimitExceeded(
                    f"{path}[{i}]: more than {max_ops} ops (MAX_TIR_OPS)", path=f"{path}[{i}]"
                )
            kind_of = (
                op if isinstance(op, str) else next(iter(op), "") if isinstance(op, dict) else ""
            )
            run = 0 if kind_of in _BLOCK_ENDS else run + 1
            if max_block_ops is not None and run > max_block_ops:
                raise LimitExceeded(
                    f"{path}[{i}]: more than {max_block_ops} ops in one straight-line block "
                    "(MAX_BLOCK_OPS)",
                    path=f"{path}[{i}]",
                )
            if isinstance(op, str):
                continue
            here = f"{path}[{i}]"
            if not (isinstance(op, dict) and len(op) == 1):
                _check_shallow(op, here)
                continue
            ((kind, payload),) = op.items()
            here = f"{here}.{kind}"
            if not isinstance(payload, dict):
                _check_shallow(payload, here)
                continue
            bodies = BODY_FIELDS.get(kind, ())
            for name, value in payload.items():
                if name in bodies and isinstance(value, list):
                    if depth + 1 > max_depth:
                        raise LimitExceeded(
                            f"{here}.{name}: bodies nested deeper than {max_depth} (MAX_TIR_DEPTH)",
                            path=f"{here}.{name}",
                        )
                    stack.append((value, f"{here}.{name}", depth + 1))
                else:
                    _check_shallow(value, f"{here}.{name}")
    return count


def _check_shallow(value: Any, path: str) -> None:
    level: list[Any] = [value]
    for _ in range(MAX_PAYLOAD_DEPTH):
        level = [
            c
            for v in level
            if isinstance(v, list | dict)
            for c in (v.values() if isinstance(v, dict) else v)
        ]
        if not level:
            return
    if any(isinstance(v, list | dict) for v in level):
        raise LimitExceeded(
            f"{path}: JSON nested deeper than {MAX_PAYLOAD_DEPTH} levels", path=path
        )


def check_request_limits(tir: list[Any], settings: Settings) -> int:
    """`check_limits` with the service's limits (MAX_TIR_OPS, MAX_TIR_DEPTH,
    MAX_TIR_FUNCTIONS, MAX_BLOCK_OPS)."""
    return check_limits(
        tir,
        max_ops=settings.max_tir_ops,
        max_depth=settings.max_tir_depth,
        max_functions=settings.max_tir_functions,
        max_block_ops=settings.max_block_ops,
    )


def make_options(given: CompileOptionsIn | None, settings: Settings) -> CompileOptions:
    """Server defaults, then the request's overrides.

    Raises:
        InvalidRequest: a search budget above MAX_SEARCH_BUDGET_S.
    """
    opts = CompileOptions(
        sources=tuple(settings.sync_sources),
        witnesses=settings.witnesses,
        search_budget_s=settings.search_budget_s,
        max_ops=settings.max_tir_ops,
        max_nesting=settings.max_tir_depth,
        final_budget_s=settings.deepen_budget_s,
        use_cache=settings.result_cache,
    )
    if given is None:
        return opts
    overrides = given.model_dump(exclude_none=True)
    overrides.pop("deadline_ms", None)  # the service's, see `deadline_s`
    if ("sources" in overrides or "inline" in overrides) and "use_cache" not in overrides:
        # the cache holds the best program of every source: a request that picks its
        # sources gets what those sources find now
        overrides["use_cache"] = False
    if "sources" in overrides:
        overrides["sources"] = tuple(overrides["sources"])
    budget = overrides.get("search_budget_s")
    if budget is not None and budget > settings.max_search_budget_s:
        raise InvalidRequest(
            f"options.search_budget_s: {budget:g} s is above the server's "
            f"limit of {settings.max_search_budget_s:g} s"
        )
    return replace(opts, **overrides)


#: Of a synchronous request's deadline, the share (at most `ANSWER_RESERVE_MAX_S` seconds)
#: kept for what follows the compile: storing its rows and encoding the response (40-80 ms
#: for the largest real modules on SQLite; `benchmarks/latency.py` prints them as
#: ``persist``). The client's deadline is for the answer, not for the compile.
ANSWER_RESERVE_SHARE = 0.25
ANSWER_RESERVE_MAX_S = 0.1


def compile_deadline(request: Deadline, total_s: float) -> Deadline:
    """The compile's deadline within a request's of ``total_s`` seconds: the answer's reserve
    (`ANSWER_RESERVE_SHARE`, at most `ANSWER_RESERVE_MAX_S`) taken off; cancelled with it."""
    reserve = min(ANSWER_RESERVE_SHARE * total_s, ANSWER_RESERVE_MAX_S)
    return Deadline(max(0.0, request.remaining() - reserve), within=request)


def deadline_s(given: CompileOptionsIn | None, settings: Settings) -> float:
    """Seconds a synchronous compile may take: ``options.deadline_ms``, else
    DEFAULT_DEADLINE_MS.

    Raises:
        InvalidRequest: ``deadline_ms`` above COMPILE_DEADLINE_S.
    """
    ms = given.deadline_ms if given is not None else None
    if ms is None:
        return settings.default_deadline_ms / 1000
    if ms > settings.compile_deadline_s * 1000:
        raise InvalidRequest(
            f"options.deadline_ms: {ms} ms is above the server's limit of "
            f"{settings.compile_deadline_s * 1000:g} ms (COMPILE_DEADLINE_S)"
        )
    return ms / 1000


def precheck(req: CompileRequest, settings: Settings) -> None:
    """What can be refused before compiling: limits, options, and the TIR itself.

    Raises:
        LimitExceeded, InvalidRequest: as `check_limits` and `make_options`.
        TirError: malformed or invalid TIR (with the op's path).
    """
    check_request_limits(req.tir, settings)
    make_options(req.options, settings)
    validate(
        codec.decode(req.tir), max_ops=settings.max_tir_ops, max_nesting=settings.max_tir_depth
    )


# -- compile, with the baseline as the safety net -----------------------------------------------


@dataclass
class Served:
    """What one compile served, before persistence."""

    request_id: uuid.UUID
    tasm: str
    tir_hash: str
    result: CompileResult | None
    rows: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)
    fallback_reason: str | None = None


def serve(
    req: CompileRequest,
    *,
    request_id: uuid.UUID,
    compiler: Compiler,
    verify: Verifier,
    settings: Settings,
    baseline: Callable[[list[Any], str | None], str],
    slots: threading.Semaphore | None = None,
    deadline: Deadline | None = None,
) -> Served:
    """Run the optimizer; if it fails for a reason that is not the client's, serve the baseline.

    Args:
        baseline: ``(tir, baseline_tasm) -> TASM``: the client's baseline, else our lowering.
        slots: admission control: the compile waits for a slot (first come, first served);
            the wait is reported as the ``queue`` timing, seconds.
        deadline: the request's deadline (it counts the wait for a slot too); the optimizer
            returns what is proven when it expires or is cancelled.

    Raises:
        LimitExceeded, InvalidRequest: checked before the optimizer runs.
        TirError, TasmSyntaxError, LoweringError: the client's input is wrong (4xx).
        RequestCancelled: the deadline was cancelled (the client left) while the request
            waited for a slot: nothing is compiled or stored for nobody.
        Exception: not even the baseline could be produced (500).
    """
    check_request_limits(req.tir, settings)
    options = replace(make_options(req.options, settings), deadline=deadline)
    queued = time.perf_counter()
    failure: Exception | None = None
    with slots if slots is not None else contextlib.nullcontext():
        if deadline is not None and deadline.cancelled:  # the client left while it waited
            raise RequestCancelled(f"request {request_id}: {deadline.why()} before it started")
        t0 = time.perf_counter()
        try:
            result = compiler(req.tir, req.baseline_tasm, options=options, verify=verify)
        except CLIENT_ERRORS:
            raise
        except Exception as exc:
            failure = exc
        elapsed = time.perf_counter() - t0
    waited = {"queue": t0 - queued} if slots is not None else {}
    if failure is not None:
        log.error(
            "optimizer failed on request %s; serving the baseline", request_id, exc_info=failure
        )
        reason = f"optimizer error ({type(failure).__name__}); the baseline was served unchanged"
        tasm = baseline(req.tir, req.baseline_tasm)
        elapsed = time.perf_counter() - t0
        tir_hash = codec.tir_hash(codec.decode(req.tir))  # TirError here is still a 4xx
        source = "client" if req.baseline_tasm is not None else "compiler"
        rows = fallback_records(
            tasm=tasm, tir_hash=tir_hash, request_id=request_id, source=source, latency_s=elapsed
        )
        return Served(request_id, tasm, tir_hash, None, rows, {**waited, "total": elapsed}, reason)
    try:
        rows = build_records(result, request_id, total_latency_s=elapsed)
    except Exception:
        log.exception("could not build the rows of request %s; storing the module only", request_id)
        rows = fallback_records(
            tasm=result.tasm,
            tir_hash=result.tir_hash,
            request_id=request_id,
            source="compiler",
            latency_s=elapsed,
        )
        rows[0]["fallback_used"] = False
    timings = {**waited, **result.timings, "total": elapsed}
    return Served(request_id, result.tasm, result.tir_hash, result, rows, timings)


# -- persistence -------------------------------------------------------------------------------

Stored = Literal["database", "spool", "lost"]


@dataclass
class DbBreaker:
    """After the database was unreachable, send rows straight to the spool for `cooldown_s`
    seconds instead of letting every request wait for a connect timeout."""

    cooldown_s: float
    open_until: float = 0.0

    def allow(self) -> bool:
        return time.monotonic() >= self.open_until

    def trip(self) -> None:
        self.open_until = time.monotonic() + self.cooldown_s


def persist(
    rows: list[dict[str, Any]],
    *,
    session: Session,
    spool: Spool,
    breaker: DbBreaker | None = None,
    job: Callable[[Stored], dict[str, Any]] | None = None,
) -> Stored:
    """Write the rows; if the database cannot take them, spool them. Never raises.

    Args:
        job: for an async compile, ``stored -> save_compile_job keyword arguments``: the
            job's final state, written in the same transaction as the rows (or spooled with
            them).

    Returns:
        ``database``, ``spool`` (written later by the drainer, same ids), or ``lost`` if even
        the spool failed (logged as an error with the rows' ids).
    """
    if breaker is None or breaker.allow():
        try:
            with session.begin():
                insert_build_results(session, rows=rows)
                if job is not None:
                    save_compile_job(session, **job("database"))
            return "database"
        except Exception as exc:
            if breaker is not None and is_connectivity_error(exc):
                breaker.trip()
            log.warning(
                "database write failed (%s); spooling %d row(s)",
                str(exc).splitlines()[0][:200],
                len(rows),
            )
    try:
        spool.append(rows, job_to_json(job("spool")) if job is not None else None)
        return "spool"
    except Exception:
        log.exception("could not spool rows %s", [str(r["id"]) for r in rows])
        return "lost"


# -- response ----------------------------------------------------------------------------------


def _unlowerable_reason(unlowerable: list[tuple[str, list[str]]]) -> str | None:
    if not unlowerable:
        return None
    names = ", ".join(name for name, _ in unlowerable[:5]) + (
        ", ..." if len(unlowerable) > 5 else ""
    )
    first = unlowerable[0][1][0] if unlowerable[0][1] else ""
    return (
        f"TIR of {len(unlowerable)} function(s) ({names}) cannot be lowered to valid TASM "
        f"(first: {first}); they are returned as the toolchain emits them, unoptimized, "
        "and do not assemble"
    )


#: A function's figures that are null in the response when it was not measured.
_UNMEASURED_FIELDS = (
    "cycles",
    "baseline_cycles",
    "cycle_reduction",
    "heights",
    "baseline_heights",
    "padded_height",
    "baseline_padded_height",
)


def to_response(served: Served, stored: Stored) -> CompileResponse:
    """Shape the response; every function and block carries the id of its stored row."""
    ids = [r["id"] for r in served.rows]
    functions: list[dict[str, Any]] = []
    result = served.result
    if result is not None:
        by_key = {(r["function"], r["block_index"]): r["id"] for r in served.rows}
        for fn in result.functions:
            d = fn.to_dict()
            if not fn.measured:  # nothing ran: no figure, rather than a 0 that reads as one
                for k in _UNMEASURED_FIELDS:
                    d[k] = None
            d["build_result_id"] = by_key.get((fn.name, None))
            for b in d["blocks"]:
                b["build_result_id"] = by_key.get((fn.name, b["index"]))
            functions.append(d)
    unlowerable = (
        [(f.name, f.unlowerable) for f in result.functions if f.unlowerable] if result else []
    )
    measured = result is not None and result.unmeasured < len(result.functions)
    return CompileResponse.model_validate(
        {
            "request_id": served.request_id,
            "tasm": served.tasm,
            "tir_hash": served.tir_hash,
            "functions": functions,
            "cycles": result.cycles if result is not None and measured else None,
            "baseline_cycles": result.baseline_cycles if result is not None and measured else None,
            "unmeasured": result.unmeasured if result is not None else 0,
            "model_version": result.model_version if result is not None else None,
            "timings": served.timings,
            "fallback": result is None or bool(unlowerable),
            "fallback_reason": served.fallback_reason or _unlowerable_reason(unlowerable),
            "build_result_ids": ids,
            "stored": stored,
        }
    )
