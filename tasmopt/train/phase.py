"""The learning phase (design §4): one definition of its thresholds and of the rule, read by
the evaluation (`tasmopt.train.evaluate`, which writes a checkpoint's ``metrics.json``) and by
the service's model watcher (which reports the phase)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "PHASE_A_VALIDITY",
    "PHASE_A_CI_LOW",
    "PHASE_B_ONLINE",
    "VALIDITY_KEY",
    "CI_LOW_KEY",
    "phase_a_exit",
    "compute_phase",
]

#: Design §4: Phase A ends at holdout validity >= 80% with a 90% bootstrap CI lower bound
#: >= 70%; Phase B starts at >= 100 online results that are valid and not fallback.
PHASE_A_VALIDITY = 0.80
PHASE_A_CI_LOW = 0.70
PHASE_B_ONLINE = 100

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
    validity, ci_low = metrics.get(VALIDITY_KEY), metrics.get(CI_LOW_KEY)
    a_done = phase_a_exit(validity, ci_low)
    online = int((counts or {}).get("online", 0))
    b = a_done and online >= PHASE_B_ONLINE
    return ("B" if b else "A"), {
        "holdout_validity": validity,
        "holdout_validity_ci_low": ci_low,
        "phase_a_exit_met": a_done,
        "online_results": online,
        "thresholds": {
            "holdout_validity": PHASE_A_VALIDITY,
            "holdout_validity_ci_low": PHASE_A_CI_LOW,
            "online_results": PHASE_B_ONLINE,
        },
    }
