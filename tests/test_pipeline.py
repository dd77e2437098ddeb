"""The optimizer's pipeline as data (issue 37): the declared order is checked, options select
and bound the function-level passes, and each pass runs through the pipeline API on a small
program of its own (with the passes it builds on, where it has any), keeps its rewrite, and
the program still behaves as the unoptimized one (`tasmopt.fuzz.check`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tasmopt.fuzz import check, generate
from tasmopt.optimizer import PASSES, PIPELINE, PipelineError, describe
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.pipeline import Step, validate
from tasmopt.report import CompileOptions

ROOT = Path(__file__).resolve().parents[1]


def test_the_declared_pipeline_is_valid_and_names_every_pass():
    validate(PIPELINE)
    assert PASSES[:3] == ("client", "conditions", "inline") and PASSES[-1] == "checks"
    assert len(PASSES) == 15
    lines = describe()
    assert any(line.startswith("on  pass   dots") for line in lines)
    assert any(line.startswith("off pass   client") for line in lines)  # opt-in


def test_a_pass_placed_before_one_it_needs_fails_validation():
    steps = list(PIPELINE)
    i = next(k for k, s in enumerate(steps) if s.name == "early_exit")
    j = next(k for k, s in enumerate(steps) if s.name == "branches")
    steps[i], steps[j] = steps[j], steps[i]  # branches now runs before early_exit
    with pytest.raises(PipelineError, match="'branches' runs before 'early_exit'"):
        validate(steps)


def test_duplicate_and_unknown_steps_fail_validation():
    first = PIPELINE[0]
    with pytest.raises(PipelineError, match="declared twice"):
        validate([first, first])
    ghost = Step("x", first.run, "", "", after=("nowhere",))
    with pytest.raises(PipelineError, match="not declared"):
        validate([first, ghost])


def test_an_unknown_pass_name_is_a_clear_error(add_mul_tir):
    with pytest.raises(ValueError, match="unknown function-level pass.*nope"):
        compile_tir(add_mul_tir, options=CompileOptions(skip=frozenset({"nope"})))


def test_skip_and_passes_select_and_timings_show_what_ran():
    prog = generate(0, "unroll")
    base = CompileOptions(sources=("rules", "search"), search_budget_s=0.2)
    on = check(prog, base, runs=2)
    assert "unroll" in on.rewrites
    off = check(prog, replace(base, skip=frozenset({"unroll"})), runs=2)
    assert "unroll" not in off.rewrites and not off.findings
    none = check(prog, replace(base, passes=frozenset()), runs=2)
    assert not none.rewrites and not none.findings
    from tasmopt.fuzz import compile_program

    r = compile_tir(compile_program(prog), options=replace(base, passes=frozenset({"unroll"})))
    assert "unroll" in r.timings and "inline" not in r.timings and "splice" in r.timings


def test_a_pass_budget_bounds_the_pass(monkeypatch):
    """``pass_budget_s``: the pass sees a deadline of its own, the others do not."""
    import tasmopt.optimizer.unroll as unroll

    seen = {}
    real = unroll.unroll_stage

    def spy(fns, text, client, options, sources, verify):
        seen["deadline"] = options.deadline
        return real(fns, text, client, options, sources, verify)

    from tasmopt import optimizer

    steps = [
        replace(s, run=optimizer.function_pass(spy)) if s.name == "unroll" else s for s in PIPELINE
    ]
    monkeypatch.setattr(optimizer, "PIPELINE", tuple(steps))
    from tasmopt.fuzz import compile_program

    opts = CompileOptions(sources=("rules", "search"), pass_budget_s={"unroll": 5.0})
    compile_tir(compile_program(generate(0, "unroll")), options=opts)
    dl = seen["deadline"]
    assert dl is not None and 0 < dl.remaining() <= 5.0


#: pass -> (fuzz family, seed, the passes it builds on): a small program on which it fires.
ALONE = {
    "conditions": ("chain", 1, ()),
    "inline": ("calls", 1, ()),
    "unroll": ("unroll", 0, ()),
    "early_exit": ("early", 0, ()),
    "branches": ("search", 8, ()),
    "loops": ("sum", 2, ()),
    "pointers": ("sum", 2, ("loops",)),
    "shortcuts": ("early", 0, ("early_exit",)),
    "reverse": ("sum", 2, ("loops", "pointers")),
    "layouts": ("sum", 2, ("loops", "pointers")),
    "absorb": ("absorb", 1, ("loops", "pointers")),
    "dots": ("xdot", 5, ("inline", "loops", "pointers")),
    "checks": ("u32", 9, ()),
}


@pytest.mark.parametrize("name", sorted(ALONE))
def test_each_pass_runs_through_the_pipeline_api_and_keeps_behaviour(name):
    family, seed, builds_on = ALONE[name]
    opts = CompileOptions(
        sources=("rules", "search"),
        search_budget_s=0.2,
        passes=frozenset({name, *builds_on}),
    )
    out = check(generate(seed, family), opts, runs=4)
    assert out.compiled, out.error
    assert name in out.rewrites, dict(out.rewrites)
    assert set(out.rewrites) <= {name, *builds_on}
    assert not out.findings
    assert out.cycles < out.baseline_cycles


def test_the_hot_pass_runs_through_the_pipeline_api(monkeypatch):
    """field.series factorial (as in tests/test_hot.py): with the loops pass searching its
    new body only at the request's budget, the hot pass searches it deeper."""
    import tasmopt.optimizer.loops as loops
    from tasmopt.frontend import compile_modules

    monkeypatch.setattr(loops, "deeper", lambda options: options)
    mods = compile_modules(ROOT / "corpus" / "field" / "series.tri", [ROOT / "corpus"])
    opts = CompileOptions(
        sources=("rules", "search"),
        only=frozenset({"factorial"}),
        passes=frozenset({"loops", "hot"}),
    )
    f = next(f for f in compile_tir(mods[-1].ops, options=opts).functions if f.name == "factorial")
    assert f.rewrites == ["loops", "hot"], f.rewrites


def test_the_client_pass_runs_through_the_pipeline_api():
    """``client`` (opt-in: rewrite_mismatched) is selected by name like the others."""
    on = [s.name for s in PIPELINE if s.name == "client"]
    assert on == ["client"]
    step = next(s for s in PIPELINE if s.name == "client")
    from tasmopt.optimizer.pipeline import Run, selected

    assert selected(step, CompileOptions(passes=frozenset({"client"})))
    assert not selected(step, CompileOptions(skip=frozenset({"client"})))
    run = Run(None, None, CompileOptions(), None, None, None)  # type: ignore[arg-type]
    assert step.when is not None and not step.when(run)  # off unless rewrite_mismatched


class _BudgetRecorder:
    """The block search, recording the budget (seconds) each call was made with, split into
    the request's block search (block indices >= 0) and the passes' re-searches."""

    name = "search"

    def __init__(self) -> None:
        from tasmopt.search.source import SearchSource

        self.inner = SearchSource()
        self.blocks: list[float] = []
        self.passes: list[float] = []

    def propose(self, tasks, options):
        if tasks:
            (self.blocks if tasks[0].index >= 0 else self.passes).append(options.search_budget_s)
        return self.inner.propose(tasks, options)


def test_a_pass_searches_one_function_at_the_final_budget_at_most():
    """A deepening asks for DEEPEN_BUDGET_S times its functions; the request's block search
    gets all of it, each pass's re-search of one function at most ``final_budget_s`` (loop
    bodies `HOT_FACTOR` times that): before, every re-search got the whole request budget,
    a cost quadratic in the module's functions (issue 34 item 4)."""
    import json

    from tasmopt.optimizer.inline import HOT_FACTOR
    from tasmopt.optimizer.pipeline import pass_options
    from tasmopt.rules import RulesSource
    from tasmopt.sources import SourceSet

    mod = json.loads((ROOT.parent / "shared/data/trident-std/lock_multisig.json").read_text())
    rec = _BudgetRecorder()
    deepening = CompileOptions(sources=("rules", "search"), search_budget_s=1.5, final_budget_s=0.1)
    r = compile_tir(
        mod["tir"], mod["compiler_tasm"], options=deepening, sources=SourceSet([RulesSource(), rec])
    )
    assert rec.blocks == [1.5]
    assert rec.passes, "no pass re-searched anything: the test shows nothing"
    assert max(rec.passes) <= 0.1 * HOT_FACTOR
    assert sum(f.cycles for f in r.functions) < sum(f.baseline_cycles for f in r.functions)
    # a request at or below the final budget is passed through unchanged
    plain = CompileOptions(search_budget_s=0.5, final_budget_s=2.0)
    assert pass_options(plain) is plain
    assert pass_options(deepening).search_budget_s == 0.1
    assert pass_options(deepening).final_budget_s == 0.1
