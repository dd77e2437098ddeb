"""RQ jobs: plain functions over `tasmopt`, importable by name from a worker process."""

from __future__ import annotations

from tasmopt.vm.equivalence import BlockCheck, check_blocks

__all__ = ["check_blocks_job"]


def check_blocks_job(payload: list[dict]) -> list[dict]:
    """Check candidate blocks; JSON in, JSON out.

    Args:
        payload: `BlockCheck.to_dict()` of each check.

    Returns:
        `Verdict.to_dict()` of each check, in order.

    Raises:
        KeyError, TypeError: a malformed payload (the job fails; the caller checks locally).
    """
    return [v.to_dict() for v in check_blocks([BlockCheck.from_dict(d) for d in payload])]
