"""The model's marginal contribution at equal wall clock (`tasmopt.train.marginal`): a model
source that only spends time changes nothing, and the equal-time run turns that time into
more search states at the rate the rules+search run showed (not a states budget the size of
the wall-clock time, which starved verification on a slow machine)."""

from __future__ import annotations

import time
from pathlib import Path

from tasmopt.train.marginal import marginal_contribution, marginal_markdown

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
    # the extra time becomes search states in proportion, not 0.05 + extra seconds of states
    assert row["search_budget_eq_s"] > 0.05
    table = marginal_markdown(rows, 0.05)
    assert "**total**" in table and str(row["cycles"]["rs"]) in table
