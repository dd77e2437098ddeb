"""The learning phase (design §4): one definition of its thresholds and of the rule, read by
the evaluation (`tasmopt.train.evaluate`, which writes a checkpoint's ``metrics.json``) and by
the service's model watcher (which reports the phase)."""

from __future__ import annotations

import math
import statistics
from typing import Any

__all__ = [
    "PHASE_A_VALIDITY",
    "PHASE_A_CI_LOW",
    "PHASE_B_ONLINE",
    "VALIDITY_KEY",
    "CI_LOW_KEY",
    "phase_a_exit",
    "compute_phase",
    "phase_b_figures",
    "wilson",
    "PHASE_B_VALIDITY",
    "PHASE_B_BEATS_COMPILER",
    "PHASE_B_MEDIAN_REDUCTION",
    "PHASE_B_P90_LATENCY_MS",
    "PHASE_B_FALLBACK",
]

#: Design §4: Phase A ends at holdout validity >= 80% with a 90% bootstrap CI lower bound
#: >= 70%; Phase B starts at >= 100 online results that the model proposed, that are valid,
#: not fallback and not copies of the baseline (`tasmopt.store.buffer_counts` ``online``).
PHASE_A_VALIDITY = 0.80
PHASE_A_CI_LOW = 0.70
PHASE_B_ONLINE = 100

#: Design §4 Phase B targets (fractions; latency in milliseconds).
PHASE_B_VALIDITY = 0.95
PHASE_B_BEATS_COMPILER = 0.60
PHASE_B_MEDIAN_REDUCTION = 0.10
PHASE_B_P90_LATENCY_MS = 200.0
PHASE_B_FALLBACK = 0.05

#: Keys of the production checkpoint's ``metrics.json`` read for the phase (fractions).
VALIDITY_KEY = "holdout_validity"
CI_LOW_KEY = "holdout_validity_ci_low"


def phase_a_exit(validity: object, ci_low: object) -> bool:
    """Phase A's exit criterion: holdout validity (fraction) >= `PHASE_A_VALIDITY` and the
    lower bound of its 90% bootstrap CI >= `PHASE_A_CI_LOW`; False for missing values."""
    return (
        isinstance(validity, int | float)
        and isinstance(ci_low, int | float)
        and validity >= PHASE_A_VALIDITY
        and ci_low >= PHASE_A_CI_LOW
    )


def compute_phase(
    counts: dict[str, Any] | None, metrics: dict[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """The learning phase (design §4) and why.

    Args:
        counts: `tasmopt.store.buffer_counts` (``online`` = valid, non-fallback block rows).
        metrics: the production checkpoint's metrics (`VALIDITY_KEY`, `CI_LOW_KEY`), if any.

    Returns:
        (``"A"`` or ``"B"``, detail): B once the Phase A exit criteria hold for the production
        checkpoint and the buffer holds `PHASE_B_ONLINE` online results.
    """
    metrics = metrics or {}
    counts = counts or {}
    validity, ci_low = metrics.get(VALIDITY_KEY), metrics.get(CI_LOW_KEY)
    a_done = phase_a_exit(validity, ci_low)
    online = int(counts.get("online", 0))
    b = a_done and online >= PHASE_B_ONLINE
    return ("B" if b else "A"), {
        "holdout_validity": validity,
        "holdout_validity_ci_low": ci_low,
        "phase_a_exit_met": a_done,
        "online_results": online,
        "phase_b": phase_b_figures(counts),
        "thresholds": {
            "holdout_validity": PHASE_A_VALIDITY,
            "holdout_validity_ci_low": PHASE_A_CI_LOW,
            "online_results": PHASE_B_ONLINE,
        },
    }


def wilson(successes: int, n: int, z: float = 1.645) -> tuple[float | None, float | None]:
    """90 % Wilson score interval of a proportion (None for no trials)."""
    if n <= 0:
        return None, None
    p = successes / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def _median_ci(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """Median and its 90 % distribution-free CI (order statistics of a binomial(n, 1/2))."""
    if not values:
        return None, None, None
    xs = sorted(values)
    n = len(xs)
    half = 1.645 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return statistics.median(xs), xs[lo], xs[hi]


def phase_b_figures(counts: dict[str, Any]) -> dict[str, Any]:
    """Design §4's Phase B targets with their current online values and 90 % CIs (from
    `tasmopt.store.buffer_counts`): model validity (its judged candidates, copies of the
    baseline never among them), share of valid outputs that beat the compiler, median cycle
    reduction of valid outputs, P90 latency per function, fallback rate per function."""
    model = counts.get("model") or {}
    judged, accepted = int(model.get("judged", 0)), int(model.get("accepted", 0))
    beats = int(model.get("beats_compiler", 0))
    med, med_lo, med_hi = _median_ci(list(model.get("reductions") or []))
    fns, fallback = int(counts.get("functions", 0)), int(counts.get("fallback", 0))
    lat = sorted(counts.get("latency_ms") or [])
    p90 = lat[min(len(lat) - 1, math.ceil(0.9 * len(lat)) - 1)] if lat else None

    def share(k: int, n: int, target: float, higher: bool = True) -> dict[str, Any]:
        lo, hi = wilson(k, n)
        value = k / n if n else None
        met = value is not None and (value >= target if higher else value <= target)
        return {"value": value, "ci90": [lo, hi], "n": n, "target": target, "met": met}

    return {
        "validity": share(accepted, judged, PHASE_B_VALIDITY),
        "beats_compiler_of_valid": share(beats, accepted, PHASE_B_BEATS_COMPILER),
        "median_reduction": {
            "value": med,
            "ci90": [med_lo, med_hi],
            "n": len(model.get("reductions") or []),
            "target": PHASE_B_MEDIAN_REDUCTION,
            "met": med is not None and med >= PHASE_B_MEDIAN_REDUCTION,
        },
        "p90_latency_ms": {
            "value": p90,
            "n": len(lat),
            "target": PHASE_B_P90_LATENCY_MS,
            "met": p90 is not None and p90 <= PHASE_B_P90_LATENCY_MS,
        },
        "fallback": share(fallback, fns, PHASE_B_FALLBACK, higher=False),
    }
