"""The optimizer's own stages and fallback paths (`tasmopt.optimizer.compile`): candidate
sources are injected and never break a compile, and every way a function falls back says why
and returns exactly what the client (or our lowering) gave."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.triton import lower
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import default_sources, entry_hazard
from tasmopt.optimizer.candidates import build_checks, propose
from tasmopt.optimizer.rank import rank
from tasmopt.optimizer.state import FunctionState
from tasmopt.report import CompileOptions, FunctionReport
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tasm import Instr, parse, parse_instructions
from tasmopt.tir import codec
from tasmopt.vm import VmInput, run
from tasmopt.vm.equivalence import BlockCheck, Verdict, check_blocks, padded_height

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CALL = json.loads((EXAMPLES / "call.json").read_text())["tir"]


def _output(tasm: str, inputs: list[int]) -> list[int]:
    # the module text starts with its first function; enter at `main` like the toolchain
    r = run(parse("call __main\nhalt\n" + tasm), VmInput(public_input=inputs))
    assert r.error is None, r.error
    return list(r.public_output)


class Broken:
    name = "model"

    def __init__(self, result=None) -> None:
        self.result = result
        self.calls = 0

    def propose(self, tasks, options):
        self.calls += 1
        if self.result is None:
            raise RuntimeError("the model crashed")
        return self.result


def test_default_sources_are_fresh_and_builtin():
    a, b = default_sources(), default_sources()
    assert set(a.names()) == {"rules", "search"}
    a.add(Broken())
    assert "model" in a.names() and "model" not in b.names()  # no shared registry


def test_a_crashing_or_malformed_source_never_breaks_a_compile():
    reference = compile_tir(CALL, options=CompileOptions(sources=("rules",)))
    for source in (Broken(), Broken(result=[])):  # raises / wrong number of proposals
        result = compile_tir(
            CALL,
            options=CompileOptions(sources=("rules", "model")),
            sources=SourceSet([default_sources().get("rules"), source]),
        )
        assert source.calls == 1
        assert result.tasm == reference.tasm
        assert _output(result.tasm, [3, 4]) == [25]


def test_an_unknown_source_name_is_skipped():
    result = compile_tir(CALL, options=CompileOptions(sources=("model",)), sources=SourceSet())
    assert all(f.source == "compiler" for f in result.functions)
    assert result.tasm.strip() == lower(codec.decode(CALL)).text().strip()


def test_client_baseline_missing_a_function_is_passed_through():
    unused = [{"FnStart": "unused"}, {"Push": 1}, {"Pop": 1}, "Return", "FnEnd"]
    client = lower(codec.decode(CALL)).text()  # the client's module lacks `unused`
    result = compile_tir(CALL + unused, client, options=CompileOptions(sources=("rules",)))
    f = next(f for f in result.functions if f.name == "unused")
    assert f.fallback and f.mismatch is not None and "missing from baseline_tasm" in f.reason
    assert _output(result.tasm, [3, 4]) == [25]


def test_client_baseline_that_does_not_assemble_is_an_error():
    client = lower(codec.decode(CALL)).text()
    cut = client[: client.index("__sum_of_squares:")] + client[client.index("    call __main") :]
    with pytest.raises(TasmSyntaxError, match="undefined label '__sum_of_squares'"):
        compile_tir(CALL, cut, options=CompileOptions(sources=("rules",)))


def test_client_baseline_that_disagrees_is_returned_as_sent():
    client = lower(codec.decode(CALL)).text().replace("    mul\n", "    add\n", 1)
    assert "add" in client
    result = compile_tir(CALL, client, options=CompileOptions(sources=("rules", "search")))
    square = next(f for f in result.functions if f.name == "square")
    assert square.fallback and square.source == "client"
    assert square.mismatch is not None or "could not be proven" in (square.reason or "")
    # the client's (different) program is what comes back, never ours
    assert _output(result.tasm, [3, 4]) == _output(client, [3, 4])


def test_unlowerable_tir_falls_back_with_the_reason():
    tir = [{"Entry": "main"}, {"FnStart": "main"}, {"Push": 1}, {"Pop": 0}, "Return", "FnEnd"]
    result = compile_tir(tir, options=CompileOptions(sources=("rules",)))
    main = next(f for f in result.functions if f.name == "main")
    assert main.fallback and "cannot be lowered" in main.reason


# -- stage by stage -------------------------------------------------------------------------


def test_entry_hazard_names_what_makes_a_block_unsafe():
    lines = [
        "f:",
        "    push 1",
        "    skiz",
        "    push 2",
        "    add",
        "g:",
        "    pop 1",
        "    return",
    ]
    assert entry_hazard(lines, 1, 2, "release") is None  # `push 1` alone
    assert entry_hazard(lines, 3, 5, "release") is not None  # after skiz: may be skipped
    assert entry_hazard(lines, 1, 3, "release") is not None  # contains skiz
    assert entry_hazard(lines, 4, 7, "release") is not None  # a label inside


def _task(lines: list[str]) -> BlockTask:
    instrs = tuple(parse_instructions("\n".join(lines)))
    return BlockTask("f", 0, "f/0", (), instrs, 2, 0, "h")


def test_build_checks_measures_each_baseline_once_then_each_distinct_candidate():
    t = _task(["push 0", "add"])
    same, other = list(t.baseline), [Instr("nop")]
    checks, owners = build_checks(
        [t], {"rules": [[same, other]], "search": [[other]]}, CompileOptions()
    )
    assert owners == [(0, ""), (0, "rules")]  # baseline first; duplicates dropped
    assert checks[0].candidate == checks[0].baseline == ("push 0", "add")
    assert checks[1].candidate == ("nop",)


def test_build_checks_leaves_a_block_without_candidates_unmeasured():
    idle, busy = _task(["push 0", "add"]), _task(["push 1", "mul"])
    checks, owners = build_checks(
        [idle, busy],
        {"rules": [[list(idle.baseline)], [[Instr("nop")]]], "search": [[], []]},
        CompileOptions(),
    )
    assert owners == [(1, ""), (1, "rules")]  # only a copy for the first: nothing to check
    assert checks[0].baseline == checks[0].candidate == ("push 1", "mul")


def test_propose_skips_failing_and_malformed_sources():
    t = _task(["push 0", "add"])
    good = Broken(result=[[[Instr("nop")]]])
    good.name = "search"
    out = propose(
        [t],
        CompileOptions(sources=("model", "search", "rules")),
        SourceSet([Broken(), good, Broken(result=[[], []])]),  # the last replaces "model"
    )
    assert list(out) == ["search"]


def _state(t: BlockTask) -> FunctionState:
    return FunctionState(
        "f", FunctionReport(name="f", source="compiler", cycles=0, baseline_cycles=0), tasks=[t]
    )


def test_rank_takes_the_cheapest_verified_candidate_that_is_no_taller():
    t = _task(["push 0", "add", "push 1", "mul"])  # both no-ops: 4 cycles
    base = BlockCheck(tuple(map(str, t.baseline)), tuple(map(str, t.baseline)))
    cands = {
        "wrong": (("nop",), Verdict(False, "rejected", "differs", 1)),
        "taller": (
            ("swap 0",),
            Verdict(True, "symbolic", None, 1, {"processor": 2, "op_stack": 9}),
        ),
        "ok": (("nop", "nop"), Verdict(True, "symbolic", None, 2, {"processor": 3})),
        "worse": (("nop",) * 5, Verdict(True, "symbolic", None, 5, {})),
    }
    checks = [base] + [BlockCheck(base.baseline, c) for c, _ in cands.values()]
    verdicts = [Verdict(True, "symbolic", None, 4, {"processor": 5, "op_stack": 1})] + [
        v for _, v in cands.values()
    ]
    f = _state(t)
    rank([f], [t], [(0, "")] + [(0, s) for s in cands], checks, verdicts)
    source, lines, verdict = f.chosen[0]
    assert (source, lines, verdict.cycles) == ("ok", ["nop", "nop"], 2)
    stats = f.report.blocks[0].candidates
    assert stats["wrong"].valid == 0 and f.report.rejections  # counted by reason class


def test_rank_keeps_the_baseline_when_it_cannot_be_measured():
    t = _task(["push 0", "add"])
    base = BlockCheck(tuple(map(str, t.baseline)), tuple(map(str, t.baseline)))
    f = _state(t)
    rank(
        [f],
        [t],
        [(0, ""), (0, "ok")],
        [base, BlockCheck(base.baseline, ("nop",))],
        [Verdict(False, "rejected", "only 3 of 16 witnesses pass"), Verdict(True, "symbolic")],
    )
    assert f.chosen == {}


def test_a_lying_verify_backend_cannot_get_a_wrong_program_out():
    """Every block gets a wrong candidate (``addi 1`` appended) and a verify backend that
    calls every candidate proven and free: the whole-function re-verification must catch
    each one and fall back."""

    class Wrong:
        name = "search"

        def propose(self, tasks, options):
            return [[list(t.baseline) + [Instr("addi", 1)]] for t in tasks]

    def lying(checks):
        return [
            check_blocks([c])[0]
            if c.candidate == c.baseline
            else Verdict(True, "symbolic", None, 0)
            for c in checks
        ]

    result = compile_tir(
        CALL,
        options=CompileOptions(sources=("search",)),
        verify=lying,
        sources=SourceSet([Wrong()]),
    )
    assert _output(result.tasm, [3, 4]) == [25]
    changed = [f for f in result.functions if any(b.source != "compiler" for b in f.blocks)]
    assert not changed
    assert any("re-verification failed" in (f.reason or "") for f in result.functions)
    assert sum(f.rejections.get("function", 0) for f in result.functions) >= 1


def test_padded_height():
    assert [
        padded_height(h)
        for h in (
            {},
            {"op_stack": 0},
            {"processor": 1},
            {"processor": 5},
            {"processor": 8, "hash": 9},
        )
    ] == [0, 0, 1, 8, 16]
