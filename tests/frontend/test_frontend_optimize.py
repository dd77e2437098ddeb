"""The TIR peephole optimizer (spec/tir.md §4): every pass, the fixed point, nested bodies,
and the unsound rewrites off by default (their unsoundness shown by execution)."""

from __future__ import annotations

import pytest
from frontend_util import FILLER, show

from tasmopt.frontend.optimize import optimize
from tasmopt.lower.triton import lower
from tasmopt.tasm.parser import parse
from tasmopt.tir.ops import Op
from tasmopt.vm.simulator import VmInput, run


def ops(text: str) -> list[Op]:
    """``"Dup(1) Pop(1) Add"`` -> ops (no nesting)."""
    out = []
    for tok in text.split():
        if "(" in tok:
            kind, val = tok.rstrip(")").split("(")
            out.append(Op(kind, int(val)))
        else:
            out.append(Op(tok))
    return out


@pytest.mark.parametrize(
    "before, after",
    [
        ("Hint(1) Hint(1) Hint(1) Hint(1) Hint(1) Hint(1) Hint(1)", "Hint(5) Hint(2)"),  # 1
        ("Pop(3) Pop(4) Add Pop(1)", "Pop(5) Pop(2) Add Pop(1)"),  # 2
        ("Swap(0) Add Pop(0)", "Add"),  # 3
        ("Dup(0) Swap(1) Pop(1) Add", "Add"),  # 5
        ("Dup(0) Pop(1) Mul", "Mul"),  # 5
        ("Swap(3) Swap(3) Mul", "Mul"),  # 6
        ("Dup(1) Dup(1) Swap(2) Pop(2) Add", "Add"),  # 7
        ("Dup(2) Dup(2) Dup(2) Swap(3) Pop(2) Pop(1) Add", "Add"),  # 7
        ("Swap(1) Pop(1) Swap(1) Pop(1) Swap(1) Pop(1) Add", "Swap(3) Pop(3) Add"),  # 8
    ],
)
def test_passes(before, after):
    assert show(optimize(ops(before))) == after


def test_epilogue_collapse_chunks_of_15():
    chain = "Swap(1) Pop(1) " * 20
    assert show(optimize(ops(chain))) == "Swap(15) Pop(5) Pop(5) Pop(5) Swap(5) Pop(5)"


def test_unsound_rewrites_are_off_by_default():
    digest_ret = "Swap(5) Pop(1) " * 5  # B16 rotation: 5 dead under a Digest
    assert show(optimize(ops(digest_ret))) == digest_ret.strip()
    assert show(optimize(ops(digest_ret), unsound=True)) == (
        "Swap(9) Swap(8) Swap(7) Swap(6) Swap(5) Pop(5)"
    )
    spill = "Push(7) Swap(1) WriteMem(1) Pop(1)"
    assert show(optimize(ops(spill))) == spill
    assert show(optimize(ops(spill), unsound=True)) == "Pop(1)"


def _run(tir: list[Op], args: list[int]) -> list[int]:
    low = lower([Op("FnStart", "f"), *tir, Op("Return"), Op("FnEnd")])
    prog = parse("\n".join(["    call __f", "    halt", *low.lines]))
    res = run(prog, VmInput(initial_stack=FILLER + args))
    assert res.error is None
    return res.stack[16:]


def test_the_unsound_epilogue_rewrite_is_wrong_by_execution():
    digest_ret = ops("Swap(5) Pop(1) " * 5)
    args = [1, 2, 3, 4, 5, 10, 20, 30, 40, 50]  # 5 dead, then the Digest on top
    assert _run(list(optimize(digest_ret)), args) == [10, 20, 30, 40, 50]
    assert _run(list(optimize(digest_ret, unsound=True)), args) != [10, 20, 30, 40, 50]


def test_nested_bodies_and_fixed_point():
    inner = tuple(ops("Pop(1) Pop(1) Dup(0) Pop(1)"))
    loop = Op("Loop", fields=(("label", "l"), ("body", inner)))
    branch = Op("IfElse", fields=(("then_body", inner), ("else_body", (loop,))))
    out = optimize([branch, *ops("Hint(2) Hint(4)")])
    assert show(out) == "IfElse[Pop(2) | Loop(l)[Pop(2)]] Hint(5) Hint(1)"
