"""The function-level ``inline`` pass (`tasmopt.optimizer.inline`): small straight-line
callees inlined where proven and cheaper. Adversarial: an inlined callee keeps its failures
and outputs, a call a ``skiz`` may skip is never inlined, a callee with control flow is
never inlined, and a wrong inlining is caught by the proof."""

from __future__ import annotations

import random

import pytest

from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.inline import _Run, inline_calls, inline_parts, straight_body
from tasmopt.optimizer.prepare import decode_tir
from tasmopt.optimizer.state import FunctionState
from tasmopt.report import CompileOptions, FunctionReport
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

OPTS = CompileOptions(sources=("rules", "search"))
NO_INLINE = CompileOptions(sources=("rules", "search"), inline=False)


def program(*functions, main):
    return [{"Entry": "main"}, *[op for fn in functions for op in fn], *main]


#: g(x, y) = assert y != ... : prints x, fails unless y == 7, leaves x * y
G = [
    {"FnStart": "g"},
    {"Dup": 1},
    {"WriteIo": 1},
    {"Dup": 0},
    {"Push": 7},
    "Eq",
    {"Assert": 1},
    "Mul",
    "Return",
    "FnEnd",
]
MAIN = [
    {"FnStart": "main"},
    {"ReadIo": 1},
    {"ReadIo": 1},
    {"Call": "g"},
    {"WriteIo": 1},
    {"Push": 1},
    {"WriteIo": 1},
    "Return",
    "FnEnd",
]


def behaviour(tasm: str, inputs):
    r = run(parse(tasm), VmInput(public_input=tuple(inputs)), measure=False)
    failed = r.error is not None
    return failed, [] if failed else list(r.public_output)  # a failing run proves nothing


def fn(result, name):
    return next(f for f in result.functions if f.name == name)


def test_an_inlined_callee_keeps_its_failures_and_outputs():
    tir = program(G, main=MAIN)
    r = compile_tir(tir, options=OPTS)
    main = fn(r, "main")
    assert any("inlined __g" in n for n in main.notes), main.notes
    assert "call __g" not in "\n".join(main.tasm)
    assert main.cycles < main.baseline_cycles
    base = lower(decode_tir(tir)).text()
    rng = random.Random(3)
    for x, y in [(5, 7), (5, 8), (0, 7), (0, 0)] + [(rng.randrange(2**64), 7) for _ in range(4)]:
        failed, out = behaviour(r.tasm, [x, y])
        assert failed == behaviour(base, [x, y])[0]
        if not failed:
            assert out == behaviour(base, [x, y])[1]
    assert behaviour(r.tasm, [5, 7]) == (False, [5, 35, 1])
    assert behaviour(r.tasm, [5, 8])[0]  # fails (a failing run's output proves nothing)


def test_inlining_can_be_switched_off():
    r = compile_tir(program(G, main=MAIN), options=NO_INLINE)
    assert "call __g" in "\n".join(fn(r, "main").tasm)


def test_a_call_skiz_may_skip_is_not_inlined():
    # `skiz; call g`: inlining would make skiz skip only g's first instruction
    h = [{"FnStart": "h"}, {"Push": 3}, "Add", "Return", "FnEnd"]
    main = [
        {"FnStart": "main"},
        {"ReadIo": 1},
        {"ReadIo": 1},
        {"Asm": {"lines": ["skiz"], "effect": -1}},
        {"Call": "h"},
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    tir = program(h, main=main)
    r = compile_tir(tir, options=OPTS)
    text = "\n".join(fn(r, "main").tasm)
    assert "call __h" in text
    base = lower(decode_tir(tir)).text()
    for x, flag in [(4, 0), (4, 1), (4, 9)]:
        assert behaviour(r.tasm, [x, flag]) == behaviour(base, [x, flag])


def test_a_callee_that_can_return_early_is_not_inlined():
    # `skiz; return` in the callee's main section: inlined, it would return from the caller
    k = [
        {"FnStart": "k"},
        {"Dup": 0},
        {"Asm": {"lines": ["skiz", "return"], "effect": -1}},
        {"Push": 1},
        "Add",
        "Return",
        "FnEnd",
    ]
    main = [
        {"FnStart": "main"},
        {"ReadIo": 1},
        {"Call": "k"},
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    tir = program(k, main=main)
    r = compile_tir(tir, options=OPTS)
    assert "call __k" in "\n".join(fn(r, "main").tasm)
    base = lower(decode_tir(tir)).text()
    for x in (0, 1, 7):
        assert behaviour(r.tasm, [x]) == behaviour(base, [x])


def test_straight_body_and_call_sites():
    assert straight_body(["__g:", "    dup 0", "    add", "    return"]) == ["    dup 0", "    add"]
    assert straight_body(["__g:", "    skiz", "    add", "    return"]) is None
    assert straight_body(["__g:", "    call __x", "    return"]) is None
    assert straight_body(["__g:", "    add", "__h:", "    return"]) is None
    assert straight_body(["__g:", "    add"]) is None  # falls through: no return
    lines = ["    push 1", "    call __g", "    skiz", "    call __g", "    call __h"]
    out, spans, sites = inline_calls(lines, {"__g": ["    add"]})
    assert out == ["    push 1", "    add", "    skiz", "    call __g", "    call __h"]
    assert spans == [(1, 2)] and sites == {"__g": 1}


@pytest.mark.parametrize(
    "wrong",
    [
        [
            "    dup 1",
            "    write_io 1",
            "    dup 0",
            "    push 8",
            "    eq",
            "    assert",
            "    mul",
        ],
        ["    dup 1", "    write_io 1", "    mul"],  # the assert dropped
        [
            "    dup 0",
            "    write_io 1",
            "    dup 0",
            "    push 7",
            "    eq",
            "    assert",
            "    mul",
        ],
    ],
)
def test_a_wrong_inlining_is_not_kept(wrong):
    ops = decode_tir(program(G, main=MAIN))
    ours = ModuleText.from_lowering(lower(ops))
    f = FunctionState(
        "main",
        FunctionReport(name="main", source="compiler", cycles=10**6, baseline_cycles=10**6),
    )
    f.reference = ours.harness("main", "release")
    lines = ours.section_lines("main")
    cand, _, sites = inline_calls(lines, {"__g": wrong})
    norm, _, _ = inline_calls(lines, {"__g": straight_body(ours.section_lines("g")) or []})
    run = _Run([f], ours, None, OPTS, None, None)  # type: ignore[arg-type]  # not used by prove
    assert not run.prove(f, cand, norm, sites, best=10**6)
    assert f.new_lines is None
    assert any("not verified" in n or "not proven" in n for n in f.report.notes), f.report.notes


def test_inline_parts_renames_the_helpers_it_copies():
    text = [
        "__g:",
        "    dup 0",
        "    skiz",
        "    call __then__3",
        "    return",
        "",
        "__then__3:",
        "    push 1",
        "    return",
    ]
    body, helpers = inline_parts(text, "in_f") or ([], [])
    assert body == ["    dup 0", "    skiz", "    call __then__3__in_f"]
    assert "__then__3__in_f:" in helpers and "    push 1" in helpers
    # a main section with an early return, or one acting on its own frame, does not qualify
    assert inline_parts(["__g:", "    skiz", "    return", "    push 1", "    return"], "x") is None
    assert inline_parts(["__g:", "    push 1", "    recurse"], "x") is None
    assert inline_parts(["__g:", "    push 1", "    recurse_or_return", "    return"], "x") is None


def test_a_callee_with_branches_is_inlined_with_its_helpers():
    k = [
        {"FnStart": "k"},
        {"Dup": 0},
        {"IfElse": {"then_body": [{"Push": 1}, "Add"], "else_body": [{"Push": 5}, "Add"]}},
        "Return",
        "FnEnd",
    ]
    main = [
        {"FnStart": "main"},
        {"ReadIo": 1},
        {"Call": "k"},
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    tir = program(k, main=main)
    r = compile_tir(tir, options=OPTS)
    m = fn(r, "main")
    base = lower(decode_tir(tir)).text()
    for x in (0, 1, 2, 2**64 - 2**32):
        assert behaviour(r.tasm, [x]) == behaviour(base, [x])
    assert any("inlined __k" in n for n in m.notes), m.notes
    assert "call __k" not in "\n".join(m.tasm)
    assert any(ln.strip().endswith("__in_main:") for ln in m.tasm)


def test_an_entry_stub_between_functions_belongs_to_no_function():
    # `call __main; halt` after a function's return (spec/tir.md §3.5): not part of that
    # function, so its harness (and the costs reported for it) does not run main
    text = "\n".join(
        [
            "__square:",
            "    dup 0",
            "    mul",
            "    return",
            "",
            "    call __main",
            "    halt",
            "",
            "__main:",
            "    read_io 1",
            "    call __square",
            "    write_io 1",
            "    return",
        ]
    )
    mod = ModuleText.from_text(text, {"square": "__square", "main": "__main"})
    assert "call __main" not in "\n".join(mod.section_lines("square"))
    assert mod.functions["square"].callees == set()
    # a labelled helper after the return stays with the function
    helper = text.replace(
        "    return\n\n    call __main", "    return\n__then__1:\n    call __main"
    )
    mod = ModuleText.from_text(helper, {"square": "__square", "main": "__main"})
    assert "__then__1:" in mod.section_lines("square")


def test_reported_padded_height_of_a_caller_is_not_inflated_by_the_entry_stub():
    # examples/call.json puts the entry stub after sum_of_squares: measured as returned, its
    # padded height must not count main's code
    import json
    from pathlib import Path

    call = json.loads((Path(__file__).parents[1] / "examples" / "call.json").read_text())["tir"]
    r = compile_tir(call, options=NO_INLINE)
    for f in r.functions:
        assert f.padded_height <= f.baseline_padded_height, f.name


def test_a_callee_entered_mid_way_is_not_inlined():
    # a label inside the callee's straight-line code: another caller may enter there, and the
    # main section does not end in return
    text = ["__g:", "    push 1", "__g_inner:", "    add", "    return"]
    assert inline_parts(text, "x") is None
    assert straight_body(text) is None


# -- merged runs optimized once per compile (run_memo) -----------------------------------------


class _CountingSource:
    """A block source that proposes ``dup 0; pop 1`` -> nothing, and counts what it is
    asked."""

    name = "rules"

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def propose(self, tasks, options):
        self.asked += [tuple(str(i) for i in t.baseline) for t in tasks]
        out = []
        for t in tasks:
            text = [str(i) for i in t.baseline]
            shorter = [s for s in text if s not in ("dup 0", "pop 1")]
            out.append([list(parse_instructions("\n".join(shorter)))] if shorter != text else [])
        return out


RUN = ["    push 3", "    dup 0", "    pop 1", "    push 4", "    add"]
TWICE = [*RUN, "    call other", *RUN, "    return"]


def _reopt(lines, options=None):
    from tasmopt.optimizer.inline import _reoptimize
    from tasmopt.sources import SourceSet
    from tasmopt.vm.equivalence import check_blocks

    src = _CountingSource()
    f = FunctionState(
        "main", FunctionReport(name="main", source="compiler", cycles=0, baseline_cycles=0)
    )
    spans = [(i, i + 1) for i, ln in enumerate(lines) if ln.strip() == "dup 0"]
    opts = options or CompileOptions(sources=("rules",))
    out = _reoptimize(f, lines, spans, opts, SourceSet([src]), check_blocks)
    return out, src.asked


def test_the_same_run_twice_in_a_function_is_searched_once():
    out, asked = _reopt(TWICE)
    assert len(asked) == 1
    assert [ln.strip() for ln in out].count("dup 0") == 0  # both occurrences rewritten
    assert [ln.strip() for ln in out].count("push 3") == 2


def test_within_one_compile_a_run_met_again_is_answered_from_memory():
    from tasmopt.optimizer.inline import run_memo

    with run_memo():
        first, asked1 = _reopt(TWICE)
        again, asked2 = _reopt(RUN + ["    return"])
    assert len(asked1) == 1 and asked2 == []
    assert [ln.strip() for ln in again][:3] == ["push 3", "push 4", "add"]
    _, asked3 = _reopt(TWICE)  # outside the compile: nothing remembered
    assert len(asked3) == 1


def test_a_run_worked_on_past_the_deadline_is_not_remembered():
    """An answer computed once the deadline had expired may be cut short (verification
    answers "unverified"): the next attempt must work on the run again, not reuse it."""
    from tasmopt.deadline import Deadline
    from tasmopt.optimizer.inline import run_memo

    expired = CompileOptions(sources=("rules",), deadline=Deadline(0.0))
    with run_memo():
        cut, asked1 = _reopt(TWICE, expired)
        fresh, asked2 = _reopt(TWICE)
    assert len(asked1) == 1 and len(asked2) == 1
    assert [ln.strip() for ln in cut].count("dup 0") == 2  # unverified: the run kept
    assert [ln.strip() for ln in fresh].count("dup 0") == 0


def test_a_remembered_run_is_not_reused_across_a_label_or_other_options():
    """Adversarial for `run_memo`: the same instructions with a label inside (an entry in
    the middle: two runs, not one) are not answered by the remembered replacement, and a
    run remembered under one seed and witness count is worked on again under others."""
    from tasmopt.optimizer.inline import run_memo

    entered = [*RUN[:2], "mid:", *RUN[2:], "    return"]
    with run_memo():
        _, asked1 = _reopt(TWICE)
        split, asked2 = _reopt(entered)
        _, asked3 = _reopt(TWICE, CompileOptions(sources=("rules",), seed=9, witnesses=20))
    assert len(asked1) == 1
    assert asked2 and all(len(a) < len(RUN) for a in asked2)  # the two halves, afresh
    assert "mid:" in [ln.strip() for ln in split]
    assert [ln.strip() for ln in split].count("dup 0") == 1  # no run spans the label
    assert len(asked3) == 1
