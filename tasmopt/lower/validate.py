"""Semantic validation of decoded TIR, and the search for ops that cannot be lowered.

`validate` enforces the request contract of design §2 (limits, immediates, labels, function
structure) and raises `TirError` naming the op path, e.g. ``tir[12].IfElse.then_body[3]``.
`find_unlowerable` finds valid TIR whose lowering is not valid TASM (spec/tir.md §1 payload
domains); the optimizer passes the functions holding such ops through untouched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tasmopt.errors import TasmSyntaxError, TirError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.lower.expansion import call_target, label_of
from tasmopt.tasm.parser import KEYWORDS, parse
from tasmopt.tir.ops import Op

__all__ = [
    "MAX_OPS",
    "MAX_NESTING",
    "MAX_LABEL_CHARS",
    "MAX_TEXT_CHARS",
    "validate",
    "is_tasm_label",
    "iter_ops",
    "Unlowerable",
    "find_unlowerable",
]

log = logging.getLogger(__name__)

#: Most ops in one request, ops inside bodies included (count).
MAX_OPS = 100_000
#: Deepest body nesting (IfElse/IfOnly/Loop/ProofBlock bodies inside each other), in levels;
#: top-level ops are at level 0.
MAX_NESTING = 64
#: Longest function/loop/call name, in characters.
MAX_LABEL_CHARS = 256
#: Longest Comment text, Asm line or ProofBlock hash, in characters.
MAX_TEXT_CHARS = 4096

#: Labels the lowering generates for deferred branches (spec/tir.md §3.1); user labels may
#: not take them.
_GENERATED = re.compile(r"__(then|else)__[0-9]+")
#: Characters that end a line for `str.splitlines` (and so for anyone reading our TASM).
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_N_OPS = {
    "Pop": "pop",
    "Hint": "divine",
    "ReadIo": "read_io",
    "WriteIo": "write_io",
    "ReadMem": "read_mem",
    "WriteMem": "write_mem",
}


def iter_ops(ops: Sequence[Op], root: str = "tir", depth: int = 0) -> Iterator[tuple[str, Op, int]]:
    """Every op in pre-order as ``(path, op, nesting level)``; bodies follow their op."""
    for i, op in enumerate(ops):
        path = f"{root}[{i}]"
        yield path, op, depth
        for fname, body in op.bodies:
            yield from iter_ops(body, f"{path}.{op.kind}.{fname}", depth + 1)


def is_tasm_label(name: str) -> bool:
    """True if ``name`` is a TASM label (Triton VM spec §10): starts with a letter or ``_``,
    continues with letters, digits, ``_`` or ``-``; not a mnemonic or keyword."""
    if not name or not (name[0].isalpha() or name[0] == "_"):
        return False
    if not all(ch.isalnum() or ch in "_-" for ch in name):
        return False
    return (
        name not in instruction_set("head")
        and name not in instruction_set("release")
        and name not in KEYWORDS
    )


def _check_label(op: Op, name: str, path: str) -> None:
    if not name:
        raise TirError(f"{op.kind} name is empty", path)
    if len(name) > MAX_LABEL_CHARS:
        raise TirError(f"{op.kind} name has {len(name)} characters (max {MAX_LABEL_CHARS})", path)
    if op.kind == "Call" and name.startswith("@"):
        rest = name[1:]
        if not (is_tasm_label(rest) and "__" in rest.lstrip("_")):
            raise TirError(
                f"external call {name!r} is not of the form @module__function "
                "(letters, digits, '_', '-')",
                path,
            )
        return
    lowered = call_target(name) if op.kind == "Call" else label_of(name)
    if not is_tasm_label(lowered):
        raise TirError(
            f"{op.kind} name {name!r} does not make a TASM label: use letters, "
            "digits, '_' and '-' (Triton VM spec §10)",
            path,
        )


def _check_text(text: str, what: str, path: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise TirError(f"{what} has {len(text)} characters (max {MAX_TEXT_CHARS})", path)
    if any(ch in _LINE_BREAKS for ch in text):
        raise TirError(f"{what} contains a line break", path)


def _check_op(op: Op, path: str) -> None:
    kind = op.kind
    if kind == "Push" and op.value >= P:  # type: ignore[operator]  # checked to be an int just before
        raise TirError(
            f"Push immediate {op.value} is not a field element: need 0 <= v < p (p = {P})",
            f"{path}.Push",
        )
    if kind in ("Reveal", "Seal") and op.get("tag") >= P:
        raise TirError(
            f"{kind} tag {op.get('tag')} is not a field element: need 0 <= tag < p",
            f"{path}.{kind}.tag",
        )
    if kind in ("FnStart", "Entry", "Call"):
        _check_label(op, str(op.value), path)
    elif kind == "Loop":
        _check_label(op, op.get("label"), f"{path}.Loop.label")
    elif kind == "Comment":
        _check_text(str(op.value), "Comment text", path)
    elif kind == "Asm":
        for j, line in enumerate(op.get("lines")):
            _check_text(line, "Asm line", f"{path}.Asm.lines[{j}]")
    elif kind == "ProofBlock":
        _check_text(
            op.get("program_hash"), "ProofBlock program_hash", f"{path}.ProofBlock.program_hash"
        )


def validate(
    ops: Sequence[Op],
    *,
    root: str = "tir",
    single_function: bool = False,
    max_ops: int | None = None,
    max_nesting: int | None = None,
) -> None:
    """Check decoded TIR against the request contract (design §2, spec/tir.md §1–§2).

    Checks: at most ``max_ops`` ops and ``max_nesting`` body levels (default `MAX_OPS`,
    `MAX_NESTING`; the service passes its MAX_TIR_OPS / MAX_TIR_DEPTH); ``Push`` and event tags
    ``0 <= v < p``; names of ``FnStart``/``Entry``/``Loop``/``Call`` make TASM labels after the
    ``__`` rule (``Call`` may also be ``@module__function``); no line breaks in comments, Asm
    lines or proof hashes; ``FnStart``/``FnEnd`` balance; no duplicate function or loop labels,
    none equal to a generated ``__then__N``/``__else__N``; ``Entry`` at most once, at the top
    level outside functions. With ``single_function`` the list must be exactly one function.

    Function structure: ``FnStart``/``FnEnd`` only at the top level (never inside a body).
    One level of nesting is accepted: the builder emits a nested ``FnStart … FnEnd`` inside
    the enclosing function for ``match`` wildcard/struct arms (spec/tir.md §5.6), and
    rejecting it would refuse the toolchain's own output. `find_unlowerable` reports the
    enclosing function (execution falls through into the nested one), so it is passed
    through untouched. Deeper nesting is rejected.

    Raises:
        TirError: the first violation, naming the op path.
    """
    most_ops = MAX_OPS if max_ops is None else max_ops
    deepest = MAX_NESTING if max_nesting is None else max_nesting
    count = 0
    open_fns: list[tuple[str, str]] = []  # (name, path)
    labels: dict[str, str] = {}  # lowered label -> path of its definition
    entry_seen = False
    for path, op, depth in iter_ops(ops, root):
        count += 1
        if count > most_ops:
            raise TirError(f"too many ops: more than {most_ops} in one request", path)
        if depth > deepest:
            raise TirError(f"bodies nested too deep: more than {deepest} levels", path)
        _check_op(op, path)
        kind = op.kind
        if single_function and depth == 0:
            _check_single(op, path, bool(open_fns), root)
        if kind in ("FnStart", "FnEnd", "Entry") and depth > 0:
            raise TirError(f"{kind} inside a body; functions are defined at the top level", path)
        if kind == "FnStart":
            if len(open_fns) >= 2:
                raise TirError(
                    f"FnStart {op.value!r} inside nested function "
                    f"{open_fns[-1][0]!r}: functions nest at most one level "
                    "(the builder's match arms)",
                    path,
                )
            open_fns.append((str(op.value), path))
        elif kind == "FnEnd":
            if not open_fns:
                raise TirError("FnEnd without a matching FnStart", path)
            open_fns.pop()
        elif kind == "Entry":
            if open_fns:
                raise TirError(
                    f"Entry inside function {open_fns[-1][0]!r}; it belongs at the top level", path
                )
            if entry_seen:
                raise TirError("more than one Entry", path)
            entry_seen = True
        if kind in ("FnStart", "Loop"):
            name = str(op.value) if kind == "FnStart" else op.get("label")
            label = label_of(name)
            where = path if kind == "FnStart" else f"{path}.Loop.label"
            if _GENERATED.fullmatch(label):
                raise TirError(
                    f"{kind} name {name!r} collides with the lowering's generated label {label}",
                    where,
                )
            if label in labels:
                raise TirError(
                    f"duplicate label {label} ({kind} {name!r}); first defined at {labels[label]}",
                    where,
                )
            labels[label] = path
    if open_fns:
        name, path = open_fns[-1]
        raise TirError(f"FnStart {name!r} has no matching FnEnd", path)
    if single_function and not ops:
        raise TirError("expected one function (FnStart … FnEnd), got no ops", root)


def _check_single(op: Op, path: str, inside: bool, root: str) -> None:
    """One top-level op of a request that must be exactly one function (checked before the
    op updates the open-function stack)."""
    if path == f"{root}[0]":
        if op.kind != "FnStart":
            raise TirError(
                f"expected one function: the first op must be FnStart, got {op.kind}", path
            )
    elif not inside:
        raise TirError(f"expected one function: {op.kind} after its FnEnd", path)


@dataclass(frozen=True)
class Unlowerable:
    """Valid TIR whose lowering is not valid TASM (or not what the op means).

    Attributes:
        function: enclosing function name (``""`` for top-level code).
        path: the op's path.
        reason: what is wrong, naming the emitted text.
    """

    function: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _asm_problem(op: Op, isa: IsaVariant) -> str | None:
    text = "\n".join(s.strip() for s in op.get("lines") if s.strip())
    try:
        parse(text, isa)
    except TasmSyntaxError as exc:
        if exc.reason.startswith("call to undefined label"):
            return None  # targets resolve in the whole program
        return f"Asm lines do not parse as TASM: {exc}"
    return None


def _problem(op: Op, isa: IsaVariant, upstream_bugs: bool) -> str | None:
    kind, v = op.kind, op.value
    if kind in ("Dup", "Swap") and v > 15:  # type: ignore[operator]  # checked to be an int just before
        return f"{kind.lower()} {v}: stack index must be 0..15"
    if kind in _N_OPS and not 1 <= v <= 5:  # type: ignore[operator]  # checked to be an int just before
        return f"{_N_OPS[kind]} {v}: argument must be 1..5"
    if kind == "Assert" and v not in (1, 5):
        return f"Assert({v}) lowers to assert_vector, which compares 5 elements"
    if kind in ("RamRead", "RamWrite") and not 1 <= op.get("width") <= 5:
        mnemonic = "read_mem" if kind == "RamRead" else "write_mem"
        return f"{mnemonic} {op.get('width')}: {kind} width must be 1..5"
    if kind == "Seal" and op.get("field_count") > 9:
        return (
            f"Seal with {op.get('field_count')} fields: hash takes 10 elements "
            "(9 fields + tag), the rest would stay on the stack"
        )
    if kind in ("FoldExt", "FoldBase") and isa == "head":
        name = "xx_dot_step" if kind == "FoldExt" else "xb_dot_step"
        return f"{name} does not exist in the head ISA (replaced by the horner steps)"
    if kind == "Or" and upstream_bugs:
        return "or is not a Triton VM instruction (upstream lowering)"
    if kind == "Push" and v >= P:  # type: ignore[operator]  # checked to be an int just before
        return f"push {v}: immediate is not below p"
    if kind in ("Reveal", "Seal") and op.get("tag") >= P:
        return f"push {op.get('tag')}: {kind} tag is not below p"
    if kind == "Asm":
        return _asm_problem(op, isa)
    return None


def find_unlowerable(
    ops: Sequence[Op],
    *,
    isa: IsaVariant = "release",
    upstream_bugs: bool = False,
    strict: bool = False,
    root: str = "tir",
) -> list[Unlowerable]:
    """Ops that are valid TIR but whose lowering is not valid TASM, per function.

    Found: ``Dup``/``Swap`` > 15 (``Swap 0`` is a harmless no-op); ``Pop``, ``Hint``,
    ``ReadIo``, ``WriteIo``, ``ReadMem``, ``WriteMem`` outside 1..5; ``Assert`` other than 1
    and 5; ``RamRead``/``RamWrite`` width outside 1..5; ``Seal`` with more than 9 fields;
    ``FoldExt``/``FoldBase`` under the head ISA; ``Asm`` lines that do not parse; ``Or`` under
    ``upstream_bugs``; immediates >= p (also rejected by `validate`); a function holding a
    nested ``FnStart`` (the builder's match pattern falls through into it). ``Hash.width`` is
    ignored by the lowering and never a problem. Sources: spec/tir.md §1, §3, §5.6.

    Args:
        strict: raise instead of reporting.

    Raises:
        TirError: with ``strict``, for the first finding.
    """
    found: list[Unlowerable] = []
    fns: list[str] = []
    for path, op, depth in iter_ops(ops, root):
        if depth == 0 and op.kind == "FnStart":
            if fns:
                found.append(
                    Unlowerable(
                        fns[-1],
                        path,
                        f"nested FnStart {op.value!r} (builder "
                        "match pattern): execution falls through into it",
                    )
                )
            fns.append(str(op.value))
        problem = _problem(op, isa, upstream_bugs)
        if problem is not None:
            found.append(Unlowerable(fns[-1] if fns else "", path, problem))
        if depth == 0 and op.kind == "FnEnd" and fns:
            fns.pop()
    if strict and found:
        raise TirError(found[0].reason, found[0].path)
    if found:
        log.debug("%d unlowerable op(s), first %s", len(found), found[0])
    return found
