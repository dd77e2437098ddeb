"""A decoded hypothesis and the decoding limits shared by beam search, sampling and greedy
decoding (`tasmopt.model.beam`, `tasmopt.model.speculative`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasmopt.tasm.program import Instr

__all__ = ["Hypothesis", "decode_limits"]


@dataclass
class Hypothesis:
    """One decoded candidate.

    Attributes:
        tokens: token ids, EOS excluded.
        instrs: the instructions they spell.
        logprob: total log-probability (EOS included).
        score: ``logprob / (len(tokens) + 1) ** alpha`` (the ranking key).
    """

    tokens: list[int]
    instrs: list[Instr]
    logprob: float
    score: float


def decode_limits(batch, limits: torch.Tensor | None, max_len: int) -> torch.Tensor:
    """(G,) int64 most tokens per graph, EOS included: ``limits``, else ``batch.limit``, else
    ``max_len``; clamped to [1, max_len]."""
    g = int(batch.num_graphs)
    if limits is None:
        limits = getattr(batch, "limit", None)
    if limits is None:
        return torch.full((g,), max_len, dtype=torch.long, device=batch.x.device)
    return limits.to(batch.x.device).clamp(1, max_len)
