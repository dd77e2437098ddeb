"""The model's own tier (issue 35, `tasmopt.optimizer.tiers`): a compile that adds the model
to its sources first runs without it, then with it, and each function keeps the better proven
answer, so adding the model never returns more cycles (same request and seed). Adversarial
models (wrong, longer, or truncated candidates) leave the answer exactly as without them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tasmopt.deadline import Deadline
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import default_sources, tiers
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm import Instr

SHIPPED = Path(__file__).resolve().parents[1] / "model_store" / "s1-corpus-v1"


class _Model:
    """A candidate source named ``model`` proposing ``make(task)`` for every block."""

    name = "model"

    def __init__(self, make, ahead: bool = False) -> None:
        self.make = make
        self.ahead_of_search = ahead
        self.calls = 0

    def propose(self, tasks, options):
        self.calls += 1
        return [[c for c in self.make(t) if c] for t in tasks]


def _sources(*extra) -> SourceSet:
    s = default_sources()
    for e in extra:
        s.add(e)
    return s


def _plan(names, *, deadline: bool, model=None) -> list[tuple[str, ...]]:
    opts = CompileOptions(sources=names, deadline=Deadline(60.0) if deadline else None)
    run = SimpleNamespace(options=opts, sources=_sources(*([model] if model else [])))
    return tiers(run)  # type: ignore[arg-type]  # tiers reads only options and sources


def test_tiers() -> None:
    m, ahead = _Model(lambda t: []), _Model(lambda t: [], ahead=True)
    rs, rsm = ("rules", "search"), ("rules", "search", "model")
    assert _plan(rs, deadline=False) == [rs]
    assert _plan(rs, deadline=True) == [("rules",), rs]
    assert _plan(rsm, deadline=False, model=m) == [rs, rsm]
    assert _plan(rsm, deadline=True, model=m) == [("rules",), rs, rsm]
    # measured to pay more per second than the search: before it, under a deadline only
    assert _plan(rsm, deadline=True, model=ahead) == [("rules",), ("rules", "model"), rsm]
    assert _plan(rsm, deadline=False, model=ahead) == [rs, rsm]
    # requested but not loaded: the model's tier would repeat the one before
    assert _plan(rsm, deadline=False) == [rsm]
    assert _plan(rsm, deadline=True) == [("rules",), rsm]
    # nothing to run before it
    assert _plan(("model",), deadline=False, model=m) == [("model",)]
    assert _plan(("rules", "model"), deadline=False, model=m) == [("rules", "model")]
    assert _plan(("rules", "model"), deadline=True, model=m) == [("rules",), ("rules", "model")]


def _wrong_dup(task) -> list[list[Instr]]:
    """The baseline with its first ``dup i`` reading one slot deeper: cheaper-looking
    nothing, different always (the verifier must refuse it)."""
    base = list(task.baseline)
    for i, ins in enumerate(base):
        if ins.name == "dup" and isinstance(ins.arg, int) and ins.arg < 15:
            return [base[:i] + [Instr("dup", ins.arg + 1)] + base[i + 1 :]]
    return []


def _truncated(task) -> list[list[Instr]]:
    """The baseline without its last instruction: cheaper, and wrong."""
    return [list(task.baseline[:-1])] if len(task.baseline) > 1 else []


def _longer(task) -> list[list[Instr]]:
    """The baseline plus a ``push 0; pop 1``: equivalent, and never cheaper."""
    return [[*task.baseline, Instr("push", 0), Instr("pop", 1)]]


@pytest.mark.parametrize("make", [_wrong_dup, _truncated, _longer])
def test_an_adversarial_model_leaves_the_answer_as_without_it(trident_std, make) -> None:
    mod = trident_std["lock_multisig"]
    opts = CompileOptions(seed=0, use_cache=False, search_budget_s=0.2)
    without = compile_tir(mod["tir"], mod["compiler_tasm"], options=opts)
    model = _Model(make)
    with_model = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(
            seed=0, use_cache=False, search_budget_s=0.2, sources=("rules", "search", "model")
        ),
        sources=_sources(model),
    )
    assert model.calls >= 1
    assert with_model.tasm == without.tasm
    assert [f.cycles for f in with_model.functions] == [f.cycles for f in without.functions]
    # the answer is the tier without the model, but it reports the model's candidates, and
    # the replay buffer gets them (judged, none accepted as cheaper)
    assert any("model" in b.candidates for f in with_model.functions for b in f.blocks)
    judged = [c for t in with_model.trajectories for c in t.candidates if c.source == "model"]
    assert judged and not any(
        c.accepted and c.cycles < t.baseline_cycles
        for t in with_model.trajectories
        for c in t.candidates
        if c.source == "model"
    )


@pytest.mark.skipif(not SHIPPED.exists(), reason="no shipped checkpoint")
@pytest.mark.parametrize("module", ["std_crypto_auth", "std_fhe_lwe"])
@pytest.mark.parametrize("k", [1, 4])
def test_adding_the_shipped_model_never_returns_more_cycles(trident_std, module, k) -> None:
    """Same request and seed, with and without the shipped checkpoint as a source: no
    function takes more cycles with it (each function's answer is the better of the tier
    without the model and the tier with it)."""
    from tasmopt.model.source import load_model_source

    mod = trident_std[module]
    base = dict(seed=0, use_cache=False, search_budget_s=0.2)
    without = compile_tir(mod["tir"], mod["compiler_tasm"], options=CompileOptions(**base))
    src = load_model_source(SHIPPED, k=k)
    with_model = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(**base, sources=("rules", "search", "model")),
        sources=_sources(src),
    )
    assert with_model.model_version == "s1-corpus-v1" or with_model.model_version is None
    before = {f.name: f.cycles for f in without.functions if f.measured}
    for f in with_model.functions:
        if f.measured and f.name in before:
            assert f.cycles <= before[f.name], f.name
    assert with_model.cycles <= without.cycles
