"""The Trident TIR peephole optimizer (spec/tir.md §4), run on each module's builder output.

Passes, repeated until a full round leaves the top-level length unchanged: merge hints,
merge pops, drop ``Swap(0)``/``Pop(0)``, dead-spill elimination, ``Dup(0)`` no-ops, double
swaps, swap/pop chains, epilogue collapse, and the same on nested bodies.

The unsound rewrites (tir.md §4 "Soundness") are off unless ``unsound=True`` (what the Rust
toolchain does): the constant-D > 1 and decreasing epilogue collapses, and the dead/paired
spill elimination (whose write pattern ``Push, Swap(1), WriteMem(1), Pop(1)`` our builder
never emits anyway: CF spills store with the pointer on top).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tasmopt.tir.ops import Op

__all__ = ["optimize"]

#: Largest swap depth (spec/tir.md §1).
_MAX_SWAP = 15


def _chunks(n: int, size: int) -> list[int]:
    out = []
    while n > 0:
        out.append(min(size, n))
        n -= min(size, n)
    return out


def _is(op: Op, kind: str, value: int | None = None) -> bool:
    return op.kind == kind and (value is None or op.value == value)


def _merge_runs(ops: list[Op], kind: str) -> list[Op]:
    out: list[Op] = []
    i = 0
    while i < len(ops):
        if ops[i].kind != kind:
            out.append(ops[i])
            i += 1
            continue
        total = 0
        while i < len(ops) and ops[i].kind == kind:
            total += int(ops[i].value)  # type: ignore[arg-type]  # Push/Pop/Dup values are ints (TIR validation)
            i += 1
        out += [Op(kind, n) for n in _chunks(total, 5)]
    return out


def _eliminate_nops(ops: list[Op]) -> list[Op]:
    return [op for op in ops if not (op.kind in ("Swap", "Pop") and op.value == 0)]


def _write_at(ops: list[Op], i: int) -> int | None:
    if (
        i + 4 <= len(ops)
        and _is(ops[i], "Push")
        and _is(ops[i + 1], "Swap", 1)
        and _is(ops[i + 2], "WriteMem", 1)
        and _is(ops[i + 3], "Pop", 1)
    ):
        return int(ops[i].value)  # type: ignore[arg-type]  # Push/Pop/Dup values are ints (TIR validation)
    return None


def _read_at(ops: list[Op], i: int) -> int | None:
    if (
        i + 3 <= len(ops)
        and _is(ops[i], "Push")
        and _is(ops[i + 1], "ReadMem", 1)
        and _is(ops[i + 2], "Pop", 1)
    ):
        return int(ops[i].value)  # type: ignore[arg-type]  # Push/Pop/Dup values are ints (TIR validation)
    return None


def _eliminate_dead_spills(ops: list[Op]) -> list[Op]:
    writes: Counter[int] = Counter()
    reads: Counter[int] = Counter()
    for i in range(len(ops)):
        if (a := _write_at(ops, i)) is not None:
            writes[a] += 1
        if (a := _read_at(ops, i)) is not None:
            reads[a] += 1
    pairs = {a for a in writes if writes[a] == 1 and reads[a] == 1}
    dead = {a for a in writes if reads[a] == 0}
    if not pairs and not dead:
        return ops
    out: list[Op] = []
    i = 0
    while i < len(ops):
        a = _write_at(ops, i)
        if a is not None and a in pairs:
            i += 4
            continue
        if a is not None and a in dead:
            out.append(Op("Pop", 1))
            i += 4
            continue
        r = _read_at(ops, i)
        if r is not None and r in pairs:
            i += 3
            continue
        out.append(ops[i])
        i += 1
    return out


def _eliminate_dup_pop_nops(ops: list[Op]) -> list[Op]:
    out: list[Op] = []
    i = 0
    while i < len(ops):
        if (
            i + 3 <= len(ops)
            and _is(ops[i], "Dup", 0)
            and _is(ops[i + 1], "Swap", 1)
            and _is(ops[i + 2], "Pop", 1)
        ):
            i += 3
        elif i + 2 <= len(ops) and _is(ops[i], "Dup", 0) and _is(ops[i + 1], "Pop", 1):
            i += 2
        else:
            out.append(ops[i])
            i += 1
    return out


def _eliminate_double_swaps(ops: list[Op]) -> list[Op]:
    out: list[Op] = []
    i = 0
    while i < len(ops):
        if (
            i + 2 <= len(ops)
            and ops[i].kind == "Swap"
            and ops[i + 1].kind == "Swap"
            and ops[i].value == ops[i + 1].value
        ):
            i += 2
        else:
            out.append(ops[i])
            i += 1
    return out


def _collapse_swap_pop_chains(ops: list[Op]) -> list[Op]:
    out: list[Op] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        if op.kind == "Dup":
            c = 1
            while i + c < len(ops) and ops[i + c] == op:
                c += 1
            j = i + c
            if c >= 2 and op.value == c - 1 and j < len(ops) and _is(ops[j], "Swap", c):
                k, total = j + 1, 0
                while k < len(ops) and ops[k].kind == "Pop" and total < c:
                    total += int(ops[k].value)  # type: ignore[arg-type]  # Push/Pop/Dup values are ints (TIR validation)
                    k += 1
                if total == c:
                    i = k
                    continue
        out.append(op)
        i += 1
    return out


def _collapse_epilogue(ops: list[Op], unsound: bool) -> list[Op]:
    out: list[Op] = []
    i = 0
    while i < len(ops):
        if i + 4 <= len(ops) and ops[i].kind == "Swap" and _is(ops[i + 1], "Pop", 1):
            d = int(ops[i].value)  # type: ignore[arg-type]  # Push/Pop/Dup values are ints (TIR validation)
            count, decreasing, j = 1, False, i + 2
            while j + 2 <= len(ops) and ops[j].kind == "Swap" and _is(ops[j + 1], "Pop", 1):
                x = int(ops[j].value)  # type: ignore[arg-type]  # Push/Pop/Dup values are ints (TIR validation)
                if x == d:
                    pass
                elif d == 1:
                    break
                elif x + count == d or x < d:
                    decreasing = True
                else:
                    break
                count += 1
                j += 2
            if count >= 3 and (d == 1 or unsound):
                if d == 1:
                    for chunk in _chunks(count, _MAX_SWAP):
                        out.append(Op("Swap", chunk))
                        out += [Op("Pop", n) for n in _chunks(chunk, 5)]
                elif not decreasing:
                    if d + count - 1 <= _MAX_SWAP:
                        out += [Op("Swap", d + count - 1 - k) for k in range(count)]
                    else:
                        out += [Op("Swap", d)] * count
                    out += [Op("Pop", n) for n in _chunks(count, 5)]
                else:
                    out.append(Op("Swap", d))
                    out += [Op("Pop", n) for n in _chunks(count, 5)]
                i = j
                continue
        out.append(ops[i])
        i += 1
    return out


def _nested(ops: list[Op], unsound: bool) -> list[Op]:
    out = []
    for op in ops:
        if op.bodies:
            op = op.replace_bodies(
                **{name: optimize(body, unsound=unsound) for name, body in op.bodies}
            )
        out.append(op)
    return out


def optimize(ops: Sequence[Op], *, unsound: bool = False) -> tuple[Op, ...]:
    """Run the peephole passes to a fixed point (spec/tir.md §4).

    Args:
        ops: one module's TIR (or any op list).
        unsound: also apply the rewrites upstream applies that do not preserve semantics
            (constant-D > 1 and decreasing epilogue chains, dead/paired spill elimination).
    """
    cur = list(ops)
    while True:
        before = len(cur)
        cur = _merge_runs(cur, "Hint")
        cur = _merge_runs(cur, "Pop")
        cur = _eliminate_nops(cur)
        if unsound:
            cur = _eliminate_dead_spills(cur)
        cur = _eliminate_dup_pop_nops(cur)
        cur = _eliminate_double_swaps(cur)
        cur = _collapse_swap_pop_chains(cur)
        cur = _collapse_epilogue(cur, unsound)
        cur = _nested(cur, unsound)
        if len(cur) == before:
            return tuple(cur)
