"""The function-level ``hot`` pass (`tasmopt.optimizer.hot`): loop bodies searched again with
a deeper budget. Which runs count as hot; factorial's body reaches the hand-written five
instructions and keeps its behaviour at trip counts 0, 1 and many; adversarial: a wrong body
that slipped past the block check is caught by the function check, and a source proposing a
wrong shorter body changes nothing."""

from __future__ import annotations

from math import factorial
from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.hot import hot_runs
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: a function with straight-line code before and after a loop, a branch body the loop
#: calls, and a branch body only the entry section calls
TEXT = """\
__f:
    dup 0
    add
    skiz
    call __cold
    call __loop__1
    pop 1
    return

__loop__1:
    dup 0
    push 0
    eq
    skiz
    return
    addi -1
    dup 1
    skiz
    call __then__1
    recurse

__then__1:
    swap 1
    addi 1
    swap 1
    return

__cold:
    push 1
    pop 1
    return
"""


def test_hot_runs_are_the_loop_sections_and_the_bodies_they_call():
    lines = TEXT.splitlines()
    runs = hot_runs(lines)
    hot = {ln.strip() for a, b in runs for ln in lines[a:b]}
    assert {"addi -1", "dup 1", "swap 1", "addi 1"} <= hot
    assert not {"dup 0", "add", "push 1", "pop 1"} & {
        ln.strip() for a, b in runs for ln in lines[a:b] if a < 8
    }
    # every hot run lies in __loop__1 or __then__1, none in __f or __cold
    starts = {lab.strip()[:-1]: i for i, lab in enumerate(lines) if lab.endswith(":")}
    for a, b in runs:
        section = max((i, n) for n, i in starts.items() if i < a)[1]
        assert section in ("__loop__1", "__then__1"), (section, lines[a:b])


def test_a_function_without_a_loop_has_no_hot_run():
    text = "__g:\n    dup 0\n    skiz\n    call __t\n    return\n\n__t:\n    push 1\n    add\n    return\n"
    assert hot_runs(text.splitlines()) == []


def _compile_series(
    monkeypatch: pytest.MonkeyPatch | None = None, hot: bool = True, loops_deep: bool = True
):
    import tasmopt.optimizer.loops as loops

    if not loops_deep:  # the loops pass searches its new body at the request's budget
        assert monkeypatch is not None
        monkeypatch.setattr(loops, "deeper", lambda options: options)
    mods = compile_modules(ROOT / "corpus" / "field" / "series.tri", [ROOT / "corpus"])
    opts = CompileOptions(
        sources=("rules", "search"),
        only=frozenset({"factorial"}),
        skip=frozenset() if hot else frozenset({"hot"}),
    )
    r = compile_tir(mods[-1].ops, options=opts)
    return next(f for f in r.functions if f.name == "factorial")


def _factorial(text: str, n: int) -> list[int]:
    main = "main:\n    read_io 1\n    call __factorial\n    write_io 1\n    halt\n"
    r = run(parse(main + text), VmInput(public_input=(n,), initial_stack=[0] * 16))
    assert r.error is None, r.error
    return list(r.public_output)


def test_factorial_loop_body_searched_deeper_is_cheaper_and_keeps_behaviour(monkeypatch):
    """field.series factorial: the loops pass leaves a seven-instruction body at the
    request's budget; searched with `HOT_FACTOR` times it, it is the five instructions of
    the hand-written version (corpus/hand: 1,543 cycles at the witnesses' n). The loops pass
    itself searches its new bodies that deeply; with that off, the hot pass finds it."""
    with monkeypatch.context() as m:
        f = _compile_series(m, loops_deep=False)
    assert any("loop bodies searched deeper" in n for n in f.notes), f.notes
    with monkeypatch.context() as m:
        cold = _compile_series(m, hot=False, loops_deep=False)
    assert f.cycles < cold.cycles
    assert f.padded_height <= cold.padded_height
    deep = _compile_series()  # the loops pass alone gets there now
    assert deep.cycles == f.cycles and not any("searched deeper" in n for n in deep.notes)
    for g in (f, deep):
        text = "\n".join(g.tasm) + "\n"
        for n in (0, 1, 2, 9, 20):
            assert _factorial(text, n) == [factorial(n) % P]


def test_a_wrong_body_is_caught_by_the_function_check(monkeypatch):
    """If a block rewrite that changed the loop body slipped through, the function check
    must refuse the result: factorial keeps what it had."""
    import tasmopt.optimizer.hot as mod

    def wrong(f, lines, spans, options, sources, verify):
        out = list(lines)
        for a, b in spans:  # the body's step counts 2 instead of 1
            for i in range(a, b):
                if out[i].strip() == "addi 1":
                    out[i] = out[i].replace("addi 1", "addi 2")
                    return out
        raise AssertionError("expected the loop body to step by addi 1")

    monkeypatch.setattr(mod, "_reoptimize", wrong)
    f = _compile_series()
    assert not any("searched deeper" in n and "->" in n for n in f.notes), f.notes
    assert any(n.startswith("hot loop bodies") for n in f.notes), f.notes
    text = "\n".join(f.tasm) + "\n"
    for n in (0, 1, 5):
        assert _factorial(text, n) == [factorial(n) % P]
