"""The model's marginal contribution at equal wall clock (`tasmopt.train.marginal`): a model
source that only spends time changes nothing, and the equal-time run turns that time into
more search states at the rate the rules+search run showed (not a states budget the size of
the wall-clock time, which starved verification on a slow machine)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tasmopt.optimizer import compile as compile_tir
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse_instructions
from tasmopt.train.marginal import marginal_contribution, marginal_markdown, search_curve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
AUTH = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "trident-std" / "std_crypto_auth.json"
)


class SlowNothing:
    """A candidate source named ``model`` that thinks for ``seconds`` and proposes nothing."""

    name = "model"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def propose(self, tasks, options):
        self.calls += 1
        time.sleep(self.seconds)
        return [[] for _ in tasks]


def test_a_model_that_only_costs_time() -> None:
    model = SlowNothing(1.0)
    rows = marginal_contribution(model, [EXAMPLES / "loop.json"], budget_s=0.05)
    assert model.calls >= 1
    (row,) = rows
    assert row["model_blocks"] == 0
    assert row["cycles"]["all"] == row["cycles"]["rs"]  # no candidates: the same program
    assert row["seconds"]["all"] >= model.seconds * model.calls  # the model's time is counted
    # the extra time becomes search states at the rate the plain run's candidate stage showed,
    # not 0.05 + extra seconds of states (the extra time is measured, not assumed: on a loaded
    # machine the plain run can take as long as the model run)
    extra = max(0.0, row["seconds"]["all"] - row["seconds"]["rs"])
    t_c = row["rs_candidates_s"]
    assert t_c > 0
    assert row["search_budget_eq_s"] == pytest.approx(0.05 * (t_c + extra) / t_c)
    assert row["model_wins"] == []
    table = marginal_markdown(rows, 0.05)
    assert "**total**" in table and str(row["cycles"]["rs"]) in table
    assert "cheaper than rules+search: 0\n" in table


class OneRewrite:
    """A ``model`` that knows one rewrite rules+search miss (found by the shipped model on
    std.crypto.auth's ``lock_and_read_kernel``): moving the read word under the five old ones
    with one ``place 9`` instead of five swaps."""

    name = "model"
    BEFORE = ("read_io 5", "swap 9", "swap 8", "swap 7", "swap 6", "swap 5", "pop 5")
    AFTER = "read_io 5\nplace 9\npop 5"

    def propose(self, tasks, options):
        return [
            [parse_instructions(self.AFTER)] if tuple(map(str, t.baseline)) == self.BEFORE else []
            for t in tasks
        ]


def test_model_wins_name_the_blocks_the_model_made_cheaper() -> None:
    (row,) = marginal_contribution(OneRewrite(), [AUTH], budget_s=0.05)
    wins = row["model_wins"]
    assert wins, "the rewrite is cheaper and equivalent: the verifier takes it"
    assert all(w["source"] == "model" and w["all"] < w["rs"] for w in wins)
    assert {"function": "lock_and_read_kernel", "instrs": 7, "rs": 7, "all": 3} in [
        {k: w[k] for k in ("function", "instrs", "rs", "all")} for w in wins
    ]
    assert row["model_blocks"] >= len(wins)
    table = marginal_markdown([row], 0.05)
    assert f"cheaper than rules+search: {len(wins)}," in table
    assert "| lock_and_read_kernel:" in table and "| 7 | 7 | 3 |" in table


def test_search_curve_sums_the_plain_compiles() -> None:
    """Budgets at which the search over the example's blocks runs to its end (a budget it
    cuts would make the cycles depend on the machine's load): the curve's rows are the
    plain compiles' cycles, each with a fresh search source."""
    from tasmopt.rules import RulesSource
    from tasmopt.search.source import SearchSource
    from tasmopt.sources import SourceSet

    budgets = [0.5, 1.0]
    rows = search_curve([EXAMPLES / "loop.json"], budgets)
    assert [r["budget_s"] for r in rows] == budgets
    tir = json.loads((EXAMPLES / "loop.json").read_text())["tir"]
    for r in rows:
        opts = CompileOptions(
            sources=("rules", "search"), search_budget_s=r["budget_s"], use_cache=False
        )
        fresh = SourceSet([RulesSource(), SearchSource()])
        assert r["cycles"] == compile_tir(tir, options=opts, sources=fresh).cycles
        assert r["seconds"] > 0


def test_source_rates_measure_each_source_over_the_rules() -> None:
    from tasmopt.train.marginal import rates_markdown, source_rates

    rates = source_rates(OneRewrite(), [AUTH], budget_s=0.05)
    assert rates["model"]["saved"] >= 4  # 7 -> 3 cycles, once per run through the block
    assert rates["model"]["cycles_per_s"] > 0
    assert rates["model_first"] == (
        rates["model"]["cycles_per_s"] > rates["search"]["cycles_per_s"]
    )
    nothing = source_rates(SlowNothing(0.2), [EXAMPLES / "loop.json"], budget_s=0.05)
    assert nothing["model"] == {
        "saved": 0,
        "extra_s": pytest.approx(nothing["model"]["extra_s"]),
        "cycles_per_s": 0.0,
    }
    assert nothing["model"]["extra_s"] >= 0.1  # its thinking time is charged to it
    assert not nothing["model_first"]
    assert "| model | 0 |" in rates_markdown(nothing)


def test_cold_answers_with_a_model_that_knows_a_rewrite() -> None:
    from tasmopt.train.marginal import cold_answers, cold_markdown

    # a deadline long enough for every tier: the model's tier comes after the search's and
    # adds its rewrite; the answer without the model lacks it
    (row,) = cold_answers(OneRewrite(), [AUTH], deadline_ms=60_000)
    assert row["cycles"]["model"] <= row["cycles"]["rs"] - 4
    assert row["cycles"]["rs"] <= row["baseline_cycles"]
    (same,) = cold_answers(SlowNothing(0.0), [AUTH], deadline_ms=60_000)
    assert same["cycles"]["model"] == same["cycles"]["rs"]
    assert "**total**" in cold_markdown([row, same], 60_000)
