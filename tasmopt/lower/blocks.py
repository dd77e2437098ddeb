"""Per-function chunks (upstream's `split_tir_by_function`) and straight-line blocks.

A block (design §2) is a maximal run of ops inside one body (function, branch, loop or proof
body) containing no structure op (`STRUCTURE_KINDS`); comments are dropped from it without
ending it. Blocks are the unit the optimizer rewrites, so each carries its TIR path, its
entry depth requirement and net stack effect (`tasmopt.lower.effects`) and its `tir_hash`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tasmopt.isa import IsaVariant
from tasmopt.lower.effects import StackEffect, sequence_effect
from tasmopt.tir.codec import tir_hash
from tasmopt.tir.ops import STRUCTURE_KINDS, Op

__all__ = ["Chunk", "Block", "split_functions", "blocks", "op_path"]


class Chunk(NamedTuple):
    """One chunk of `split_functions`.

    Attributes:
        name: the function name, ``"__entry"`` or ``"__trailing"``.
        ops: the chunk's ops, ``FnStart``/``FnEnd`` included, bodies nested.
        start: index in the input list of the chunk's first op (chunks are contiguous).
    """

    name: str
    ops: tuple[Op, ...]
    start: int


def split_functions(ops: Sequence[Op]) -> list[Chunk]:
    """Reproduce upstream `split_tir_by_function` (spec/tir.md §7.2) exactly.

    Linear scan over the top-level ops:

    * ``FnStart(name)``: ops collected outside a function are flushed as ``"__entry"``; a new
      chunk ``[FnStart]`` named ``name`` starts. Ops collected *inside* a function are
      silently discarded (the nested ``FnStart`` of the builder's ``match`` arms, §5.6).
    * ``FnEnd``: appended, the chunk is emitted under the current name, we leave the function.
      After a nested function's ``FnEnd`` the enclosing function's tail is therefore emitted
      under the *nested* name, without a ``FnStart``. A stray ``FnEnd`` before any
      ``FnStart`` gets the name ``""`` (upstream's initial name); validation rejects both.
    * at the end, leftover ops form a chunk named after the open function or ``"__trailing"``.
    """
    out: list[Chunk] = []
    name, current, start, in_function = "", [], 0, False
    for i, op in enumerate(ops):
        if op.kind == "FnStart":
            if current and not in_function:
                out.append(Chunk("__entry", tuple(current), start))
            name, current, start, in_function = str(op.value), [op], i, True
        elif op.kind == "FnEnd":
            if not current:
                start = i
            current.append(op)
            out.append(Chunk(name, tuple(current), start))
            current, in_function = [], False
        else:
            if not current:
                start = i
            current.append(op)
    if current:
        out.append(Chunk(name if in_function else "__trailing", tuple(current), start))
    return out


@dataclass(frozen=True)
class Block:
    """One straight-line block (design §2).

    Attributes:
        index: pre-order index within the function (0, 1, ...).
        path: TIR path of the first op, e.g. ``tir[3].IfElse.then_body[0]``.
        ops: the block's ops, comments dropped.
        op_paths: the path of each op in ``ops``.
        entry_depth: elements the block reads on entry (its entry depth requirement).
        net_effect: change of the stack length over the block, in elements.
        pops: low-water mark below the entry top (see `StackEffect.pops`).
        tir_hash: sha256 of the block's canonical TIR JSON (`codec.tir_hash`).
    """

    index: int
    path: str
    ops: tuple[Op, ...]
    op_paths: tuple[str, ...]
    entry_depth: int
    net_effect: int
    pops: int
    tir_hash: str

    @property
    def last_path(self) -> str:
        return self.op_paths[-1]


def op_path(root: str, index: int) -> str:
    """``op_path("tir", 3)`` -> ``"tir[3]"``; bodies: ``op_path("tir[3].IfElse.then_body", 0)``."""
    return f"{root}[{index}]"


def blocks(
    fn_ops: Sequence[Op],
    *,
    start: int = 0,
    root: str = "tir",
    isa: IsaVariant = "release",
    top_level: bool = False,
) -> list[Block]:
    """The straight-line blocks of a function, in pre-order (design §2).

    Args:
        fn_ops: a function's ops (usually a `Chunk`), or top-level code.
        start: index of ``fn_ops[0]`` in the request, so paths are request-global.
        root: path of the request's op list (``"tir"``).
        isa: instruction-set variant (only matters for effects of ``Asm``; never in blocks).
        top_level: ``fn_ops`` is a whole request and only the code outside its functions is
            wanted (every ``FnStart … FnEnd`` region is skipped).

    If ``fn_ops[0]`` is a ``FnStart`` it is the function's own; every other
    ``FnStart … FnEnd`` region at the top level belongs to another function (the builder's
    nested ``match`` arms, or functions around top-level code) and is skipped.

    Blocks never contain ``Call``, so their effects are always known.
    """
    out: list[Block] = []
    run: list[tuple[str, Op]] = []

    def flush() -> None:
        if not run:
            return
        ops = tuple(o for _, o in run)
        eff = sequence_effect(ops, isa=isa)
        assert isinstance(eff, StackEffect), eff  # no structure ops in a block
        out.append(
            Block(
                len(out),
                run[0][0],
                ops,
                tuple(p for p, _ in run),
                eff.depth,
                eff.net,
                eff.pops,
                tir_hash(ops),
            )
        )
        run.clear()

    def walk(items: Sequence[tuple[str, Op]]) -> None:
        for path, op in items:
            if op.kind == "Comment":
                continue
            if op.kind not in STRUCTURE_KINDS:
                run.append((path, op))
                continue
            flush()
            for fname, body in op.bodies:
                base = f"{path}.{op.kind}.{fname}"
                walk([(op_path(base, i), o) for i, o in enumerate(body)])
                flush()

    top = [(op_path(root, start + i), o) for i, o in enumerate(fn_ops)]
    walk(_skip_foreign_functions(top, own=not top_level))
    flush()
    return out


def _skip_foreign_functions(items: list[tuple[str, Op]], own: bool) -> list[tuple[str, Op]]:
    """Drop top-level ``FnStart … FnEnd`` regions that are not the list's own function,
    keeping one ``FnStart`` marker so runs do not join across them."""
    out: list[tuple[str, Op]] = []
    depth = 0
    own = own and bool(items) and items[0][1].kind == "FnStart"
    for i, (path, op) in enumerate(items):
        if op.kind == "FnStart" and not (own and i == 0):
            if depth == 0:
                out.append((path, op))
            depth += 1
            continue
        if op.kind == "FnEnd" and depth > 0:
            depth -= 1
            continue
        if depth == 0:
            out.append((path, op))
    return out
