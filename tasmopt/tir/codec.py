"""TIR JSON codec: serde's externally tagged encoding of `TIROp` (spec/tir.md §2).

``"Add"`` (unit), ``{"Push": 5}`` (newtype), ``{"IfElse": {"then_body": [...], ...}}``
(struct). `decode` checks the wire shape only (tags, payload types, integer widths) and names
the offending op by its path; semantic limits live in `tasmopt.lower.validate`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tasmopt.errors import TirError
from tasmopt.tir.ops import VARIANTS, Op

__all__ = ["decode", "encode", "loads", "dumps", "canonical_json", "tir_hash"]

#: Deepest body nesting the decoder follows (levels). A recursion guard only, far above the
#: request limit `tasmopt.lower.validate.MAX_NESTING`, so that hostile input gets a TirError
#: instead of a RecursionError.
MAX_DECODE_DEPTH = 256

_INT_RANGES = {
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
    "i32": (-(2**31), 2**31 - 1),
}


def _check_int(value: Any, kind: str, path: str, what: str) -> int:
    # bool is an int subclass in Python; JSON true/false are not integers.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TirError(f"{what} must be an integer ({kind}), got {json.dumps(value)[:40]}", path)
    lo, hi = _INT_RANGES[kind]
    if not lo <= value <= hi:
        raise TirError(f"{what} = {value} does not fit {kind} ({lo}..{hi})", path)
    return value


def _decode_op(obj: Any, path: str, depth: int = 0) -> Op:
    if depth > MAX_DECODE_DEPTH:
        raise TirError(f"bodies nested too deep: more than {MAX_DECODE_DEPTH} levels", path)
    if isinstance(obj, str):
        variant = VARIANTS.get(obj)
        if variant is None:
            raise TirError(f"unknown op {obj!r}", path)
        if variant.payload != "unit":
            raise TirError(f"op {obj!r} needs a payload: {_shape_hint(obj)}", path)
        return Op(obj)
    if not isinstance(obj, dict):
        raise TirError(f"an op is a string or a one-key object, got {type(obj).__name__}", path)
    if len(obj) != 1:
        keys = ", ".join(map(repr, list(obj)[:4]))
        raise TirError(
            f"an op object has exactly one key (the variant), got {len(obj)}: {keys}", path
        )
    name, payload = next(iter(obj.items()))
    variant = VARIANTS.get(name)
    if variant is None:
        raise TirError(f"unknown op {name!r}", path)
    here = f"{path}.{name}"
    if variant.payload == "unit":
        raise TirError(f'op {name!r} takes no payload; write it as the string "{name}"', path)
    if variant.payload in ("u32", "u64"):
        return Op(name, _check_int(payload, variant.payload, here, f"{name} payload"))
    if variant.payload == "str":
        if not isinstance(payload, str):
            raise TirError(f"{name} payload must be a string, got {json.dumps(payload)[:40]}", here)
        return Op(name, payload)
    # struct variant
    if not isinstance(payload, dict):
        raise TirError(
            f"{name} payload must be an object with fields {[f for f, _ in variant.fields]}", here
        )
    expected = [f for f, _ in variant.fields]
    missing = [f for f in expected if f not in payload]
    extra = [f for f in payload if f not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing field(s) {missing}")
        if extra:
            parts.append(f"unknown field(s) {extra}")
        raise TirError(f"{name}: {', '.join(parts)}; expected {expected}", here)
    fields: list[tuple[str, Any]] = []
    for fname, kind in variant.fields:
        value = payload[fname]
        fpath = f"{here}.{fname}"
        if kind == "body":
            if not isinstance(value, list):
                raise TirError(f"{fname} must be a list of ops", fpath)
            fields.append(
                (
                    fname,
                    tuple(_decode_op(o, f"{fpath}[{i}]", depth + 1) for i, o in enumerate(value)),
                )
            )
        elif kind == "lines":
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise TirError(f"{fname} must be a list of strings", fpath)
            fields.append((fname, tuple(value)))
        elif kind == "str":
            if not isinstance(value, str):
                raise TirError(f"{fname} must be a string", fpath)
            fields.append((fname, value))
        else:
            fields.append((fname, _check_int(value, kind, fpath, fname)))
    return Op(name, None, tuple(fields))


def _shape_hint(name: str) -> str:
    v = VARIANTS[name]
    if v.payload in ("u32", "u64"):
        return f'{{"{name}": <integer>}}'
    if v.payload == "str":
        return f'{{"{name}": "<string>"}}'
    return f'{{"{name}": {{{", ".join(f"{f!r}: ..." for f, _ in v.fields)}}}}}'


def decode(obj: Any, path: str = "tir") -> tuple[Op, ...]:
    """JSON value (a list of ops) -> ops.

    Raises:
        TirError: naming the op's path, e.g. ``tir[12].IfElse.then_body[3]``.
    """
    if not isinstance(obj, list):
        raise TirError(f"TIR must be a JSON array of ops, got {type(obj).__name__}", path)
    return tuple(_decode_op(o, f"{path}[{i}]") for i, o in enumerate(obj))


def _encode_op(op: Op) -> Any:
    v = op.variant
    if v.payload == "unit":
        return op.kind
    if v.payload != "struct":
        return {op.kind: op.value}
    out: dict[str, Any] = {}
    for fname, value in op.fields:
        kind = dict(v.fields)[fname]
        if kind == "body":
            out[fname] = [_encode_op(o) for o in value]
        elif kind == "lines":
            out[fname] = list(value)
        else:
            out[fname] = value
    return {op.kind: out}


def encode(ops: tuple[Op, ...] | list[Op]) -> list[Any]:
    """Ops -> JSON value, the exact inverse of `decode`."""
    return [_encode_op(o) for o in ops]


def loads(text: str | bytes) -> tuple[Op, ...]:
    """Parse TIR JSON text. Raises TirError for malformed JSON or wire-format errors."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise TirError("malformed JSON: nested too deep", "tir") from None
    except json.JSONDecodeError as exc:
        raise TirError(
            f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", "tir"
        ) from None
    return decode(obj)


def canonical_json(ops: tuple[Op, ...] | list[Op]) -> str:
    """Compact JSON with sorted keys: the form `tir_hash` is taken of."""
    return json.dumps(encode(ops), separators=(",", ":"), sort_keys=True)


def dumps(ops: tuple[Op, ...] | list[Op], indent: int | None = None) -> str:
    return json.dumps(encode(ops), indent=indent)


def tir_hash(ops: tuple[Op, ...] | list[Op]) -> str:
    """sha256 hex digest of `canonical_json` (design §2, BuildResult.tir_hash)."""
    return hashlib.sha256(canonical_json(ops).encode()).hexdigest()
