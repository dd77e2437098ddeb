"""Evaluation figures: bootstrap CI, summary, Phase A gate."""

from __future__ import annotations

import math

from tasmopt.train.evaluate import BlockResult, bootstrap_ci, summarize


def _r(i: int, valid: bool, base: int = 10, best: int = 10, fn: str = "f") -> BlockResult:
    return BlockResult(
        id=str(i),
        origin="real",
        module="m",
        function=fn,
        lines=base,
        hypotheses=4,
        valid_hypotheses=int(valid),
        valid=valid,
        top1_valid=valid,
        novel_valid=valid,
        accepted=valid,
        beats_compiler=valid and best < base,
        baseline_cycles=base,
        target_cycles=best,
        best_cycles=best if valid else base,
        reduction=(base - best) / base if valid else 0.0,
        latency_s=0.01,
    )


def test_bootstrap_ci_brackets_the_mean() -> None:
    lo, hi = bootstrap_ci([1.0] * 85 + [0.0] * 15)
    assert lo < 0.85 < hi and 0.75 < lo and hi < 0.95
    assert bootstrap_ci([1.0, 1.0]) == (1.0, 1.0)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_summary_and_gate() -> None:
    good = [_r(i, True, best=8, fn=f"f{i % 5}") for i in range(90)] + [
        _r(100 + i, False, fn=f"f{i % 5}") for i in range(10)
    ]
    s = summarize(good)
    assert s["validity"]["value"] == 0.9 and s["phase_a"]["passed"]
    assert abs(s["median_reduction_valid"] - 0.2) < 1e-9
    assert s["functions"]["count"] == 5 and s["functions"]["validity"]["value"] == 0.0
    bad = summarize([_r(i, i % 2 == 0) for i in range(40)])
    assert not bad["phase_a"]["passed"]
