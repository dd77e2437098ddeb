"""The block superoptimizer: known optima, verified candidates, budgets, determinism."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tasmopt.lower.triton import lower
from tasmopt.report import CompileOptions
from tasmopt.search import schedule
from tasmopt.search.algebra import simplify
from tasmopt.search.dataflow import extract
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.search.schedule import Budget, exact
from tasmopt.search.source import SearchSource
from tasmopt.search.stoke import stoke
from tasmopt.sources import BlockTask
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode
from tasmopt.vm.equivalence import BlockCheck, check_block

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "trident-std"


def code(text: str):
    return parse_instructions(text.replace(";", "\n"))


def text(instrs) -> str:
    return ";".join(str(i) for i in instrs)


# Blocks whose optimum we know by hand (lengths checked exhaustively by `exact` below).
KNOWN = [
    # spec/tir.md §2.1 example A: (a + b) * a
    ("dup 1;dup 1;add;dup 0;dup 3;mul;swap 3;pop 3", 3),
    # f(a, b) = a + b with copies and an epilogue
    ("dup 1;dup 1;add;swap 2;pop 2", 1),
    # digest copy then cleanup (trident-std lock_generation style)
    ("dup 4;dup 4;dup 4;dup 4;dup 4;swap 10;pop 5;pop 1", 2),
    # as_u32 of a constant, then doubled
    ("push 5;split;pop 1;dup 0;add", 1),
    # x^4 by squaring, with builder-style copies
    ("dup 0;dup 1;mul;dup 0;dup 1;mul;swap 2;pop 2", 4),
    # ... and dropping the element below as well
    ("dup 0;dup 1;mul;dup 0;dup 1;mul;swap 2;pop 2;swap 1;pop 1", 6),
    # u32 division, quotient dropped, remainder kept over the operands
    ("dup 1;dup 1;div_mod;pop 1;dup 0;swap 3;pop 3", 2),
    # a dead copy and a dead pure computation
    ("dup 0;dup 0;add;pop 1;dup 1;pop 1", 0),
]


@pytest.mark.parametrize("baseline,optimum", KNOWN)
def test_search_finds_the_known_optimum(baseline: str, optimum: int) -> None:
    cands = optimize_block(code(baseline), SearchConfig(states=20_000))
    if optimum == 0:
        # an empty replacement is found by the exact search, but a block must keep at least
        # one instruction to be spliced; nothing shorter than the baseline must be invalid
        for c in cands:
            assert check_block(
                BlockCheck(tuple(baseline.split(";")), tuple(map(str, c)))
            ).equivalent
        return
    assert cands, "search found nothing"
    assert len(cands[0]) == optimum, text(cands[0])
    v = check_block(BlockCheck(tuple(baseline.split(";")), tuple(str(i) for i in cands[0])))
    assert v.equivalent, v.reason


@pytest.mark.parametrize("baseline,optimum", KNOWN)
def test_exact_search_proves_the_optimum_is_optimal(baseline: str, optimum: int) -> None:
    df = simplify(extract(code(baseline)))
    found = exact(df, max_length=len(baseline.split(";")), budget=Budget(200_000))
    assert found is not None and len(found) == optimum
    if optimum:  # nothing shorter exists
        assert exact(df, max_length=optimum - 1, budget=Budget(200_000)) is None


def _real_blocks(limit: int = 60) -> list[tuple[str, ...]]:
    out = []
    for path in sorted(DATA.glob("*.json"))[:8]:
        low = lower(decode(json.loads(path.read_text())["tir"]))
        for fn in low.functions:
            if fn.unlowerable:
                continue
            for b in fn.blocks:
                lines = tuple(
                    ln.strip()
                    for ln in low.lines[b.start : b.end]
                    if ln.strip() and not ln.strip().startswith("//")
                )
                if len(lines) >= 3:
                    out.append(lines)
    return out[:limit]


def test_every_candidate_on_real_blocks_is_verified_and_cheaper() -> None:
    blocks = _real_blocks()
    assert len(blocks) >= 30
    improved = 0
    for lines in blocks:
        for cand in optimize_block(code(";".join(lines)), SearchConfig(states=4_000)):
            v = check_block(BlockCheck(lines, tuple(str(i) for i in cand)))
            assert v.equivalent, (lines, text(cand), v.reason)
            assert len(cand) < len(lines)
            improved += 1
    assert improved >= len(blocks) // 3


class CountingBudget(Budget):
    def __init__(self, states: int) -> None:
        super().__init__(states)
        self.taken = 0

    def spend(self, n: int = 1) -> bool:
        ok = super().spend(n)
        self.taken += n if ok else 0
        return ok


@pytest.mark.parametrize("states", [50, 300, 2000])
def test_budget_is_respected(states: int) -> None:
    baseline = code("dup 3;dup 3;add;dup 4;dup 4;mul;add;dup 5;dup 5;xor;pop 1;swap 4;pop 4")
    df = extract(baseline)
    for run in (
        lambda b: exact(df, max_length=len(baseline) - 1, budget=b),
        lambda b: schedule.beam(df, width=8, budget=b),
    ):
        b = CountingBudget(states)
        run(b)
        assert b.taken <= states and b.left >= 0


def test_source_respects_the_request_time_budget() -> None:
    blocks = _real_blocks(40) if DATA.exists() else [("dup 1", "dup 1", "add")] * 40
    tasks = [
        BlockTask("f", i, f"tir[{i}]", (), tuple(code(";".join(b))), 0, 0, str(i))
        for i, b in enumerate(blocks)
    ]
    t = time.monotonic()
    SearchSource().propose(tasks, CompileOptions(search_budget_s=0.5))
    assert time.monotonic() - t < 3 * 0.5 + 1.0 + 1.0  # the guard, plus slack for a slow CI


def test_search_is_deterministic_for_a_seed() -> None:
    baseline = code("dup 2;dup 2;mul;dup 3;dup 2;add;mul;swap 3;pop 3")
    a = optimize_block(baseline, SearchConfig(states=3_000, seed=7))
    b = optimize_block(baseline, SearchConfig(states=3_000, seed=7))
    assert [text(c) for c in a] == [text(c) for c in b]


def test_stoke_only_returns_symbolically_checked_programs() -> None:
    baseline = code("dup 0;push 0;add;push 1;mul;swap 1;pop 1")
    found = stoke(baseline, baseline, iterations=3_000, seed=3)
    assert found is not None and len(found) < len(baseline)
    assert check_block(BlockCheck(tuple(map(str, baseline)), tuple(map(str, found)))).equivalent


def test_effects_keep_their_order() -> None:
    # two reads and two writes: the search may shuffle around them but never reorder them
    baseline = code("read_io 1;read_io 1;dup 1;dup 1;write_io 1;write_io 1;pop 2")
    for cand in optimize_block(baseline, SearchConfig(states=20_000)):
        names = [i.name for i in cand if i.name in ("read_io", "write_io")]
        assert names == ["read_io", "read_io", "write_io", "write_io"]
        assert check_block(BlockCheck(tuple(map(str, baseline)), tuple(map(str, cand)))).equivalent


def _metropolis_full(cand, cases, want, cur_cost, beta, rng, isa, dead_slots):
    """The Metropolis step as it was before early rejection: every test input run, then
    one draw when the cost exceeds the current one."""
    import math

    from tasmopt.search.stoke import _observe, _penalty

    cost = len(cand) + _penalty(_observe(cand, cases, isa, dead_slots), want)
    if cost <= cur_cost or rng.random() < math.exp(-beta * (cost - cur_cost)):
        return cost
    return None


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize(
    "text",
    [
        "dup 1;dup 1;add;dup 0;dup 3;mul;swap 3;pop 3",
        "push 0;hash;dup 4;dup 4;add;swap 6;pop 1;dup 1;push 3;mul;add",
        "dup 2;dup 2;mul;dup 1;mul;swap 1;pop 1;dup 0;dup 0;add;swap 2;add",
    ],
)
def test_stoke_early_rejection_walks_the_same_chain(monkeypatch, text: str, seed: int) -> None:
    """Running a proposal's test inputs one at a time and stopping once the draw rejects it
    must not change the chain: same draws, same decisions, same result as the full
    evaluation, with fewer simulator runs."""
    import tasmopt.search.stoke as st

    baseline = list(parse_instructions(text.replace(";", "\n")))
    calls = {"n": 0}
    real_one = st._observe_one

    def counting(*a, **k):
        calls["n"] += 1
        return real_one(*a, **k)

    monkeypatch.setattr(st, "_observe_one", counting)
    fast = stoke(baseline, baseline, iterations=1_500, seed=seed)
    fast_runs = calls["n"]
    monkeypatch.setattr(st, "_metropolis", _metropolis_full)
    calls["n"] = 0
    full = stoke(baseline, baseline, iterations=1_500, seed=seed)
    assert fast == full
    assert fast_runs < calls["n"]  # the point of it: rejected proposals stop early
