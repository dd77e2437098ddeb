"""Greedy decoding with the baseline as the draft (speculative decoding, design §3).

A block's best program is mostly the compiler's own lowering with a few edits, and the model
learns to copy it (`tasmopt.model.model`: baseline memory and copy head). Decoding it one
token per forward pass spends a pass on every copied token. Here each pass feeds a *draft*
(the baseline's tokens that follow where the output last matched it, prompt-lookup style)
and checks all of it at once: the model's greedy choice at every draft position comes out
of one teacher-forced pass over the KV cache, the longest agreeing prefix is accepted and
the model's own token at the first disagreement is appended. The result is exactly greedy
decoding (the same tokens as one-beam beam search, up to
floating-point ties), in about one pass per edit instead of one per token.

Rows advance by different amounts, so every row keeps its own length: the cache is written
at per-row positions and attention is masked per row (`tasmopt.model.decoder.Decoder.extend`).
Blocks that finished leave the batch after each pass.

Sources: Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative
Decoding" (ICML 2023) for draft-and-check; Saxena, "Prompt Lookup Decoding" (2023) for a
draft taken from the input instead of a second model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from tasmopt.model.grammar import GrammarState
from tasmopt.model.hypothesis import Hypothesis, decode_limits
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import BOS, EOS, PAD

__all__ = ["greedy_decode", "draft_from"]

#: Suffix lengths tried, longest first, when re-aligning the output with the baseline.
_NGRAMS = (3, 2, 1)


def draft_from(base: Sequence[int], out: Sequence[int], hint: int, m: int) -> tuple[list[int], int]:
    """Up to ``m`` draft tokens for a row that has emitted ``out``.

    Args:
        base: the baseline's token ids, EOS last.
        out: tokens emitted so far.
        hint: the baseline index the row is expected to be at (where the previous draft
            left off); among several matches the nearest wins.
        m: most tokens.

    Returns:
        the draft and the baseline index it starts at: the baseline's continuation after the
        longest suffix of ``out`` (3, 2 or 1 tokens) found in it; with no match, the baseline
        from ``hint``.
    """
    if m <= 0:
        return [], hint
    n = len(out)
    for k in _NGRAMS:
        if n < k:
            continue
        suffix = list(out[n - k :])
        best = -1
        for p in range(k, len(base) + 1):
            if list(base[p - k : p]) == suffix and (best < 0 or abs(p - hint) < abs(best - hint)):
                best = p
        if best >= 0:
            return list(base[best : best + m]), best
    return list(base[hint : hint + m]), hint


@torch.no_grad()
def greedy_decode(
    model: TasmModel,
    batch,
    immediates: Sequence[Sequence[int]],
    *,
    draft: int = 16,
    alpha: float = 0.7,
    limits: torch.Tensor | None = None,
    stop: Callable[[], bool] | None = None,
    counts: dict[str, int] | None = None,
    max_passes: int | None = None,
) -> list[list[Hypothesis]]:
    """Greedy decoding of every graph of ``batch``, checking baseline drafts of up to
    ``draft`` tokens per forward pass.

    Args:
        model: the model (call ``model.eval()`` first).
        batch: torch-geometric ``Batch`` of G block graphs with ``base_tokens``
            (`tasmopt.model.inputs.block_data`).
        immediates: per graph, the block's immediates.
        draft: most draft tokens checked per pass (0: plain greedy, one token per pass).
        alpha: length-normalisation exponent of the reported score.
        limits: (G,) most tokens per block, EOS included (default ``batch.limit``).
        stop: looked at before every pass; when it returns True decoding ends and only the
            blocks finished by then have a hypothesis (a request's deadline).
        counts: if given, ``passes`` (forward passes) and ``fed`` (positions fed, drafts
            included) are added to it.
        max_passes: most forward passes; the blocks unfinished after them get no
            hypothesis (None: decode to the end, exactly greedy decoding).

    Returns:
        per graph, a list of at most one `Hypothesis` (none where the grammar left the row
        no token, or ``stop`` cut it).
    """
    g_count = int(batch.num_graphs)
    limits = decode_limits(batch, limits, model.config.max_len)
    enc = model.encode(batch)
    device = limits.device
    rows = enc.repeat(1)
    state = GrammarState.start(
        batch.entry_depth, batch.net_effect, batch.floor, batch.ptr_valid, limits
    )
    cap = int(limits.max()) + draft + 2 if g_count else 1
    cache = model.decoder.init_cache(enc.memory, enc.memory_mask, cap, 1)
    tables = model.grammar(device)
    base = [[int(t) for t in r if int(t) != PAD] + [EOS] for r in batch.base_tokens.cpu()]
    limit = [int(x) for x in limits.cpu()]
    out: list[list[int]] = [[] for _ in range(g_count)]
    logprob = [0.0] * g_count
    finished = [False] * g_count
    hint = [0] * g_count
    active = list(range(g_count))  # block ids of the rows, in row order
    last = torch.full((g_count,), BOS, dtype=torch.long, device=device)
    passes = 0
    while active:
        if stop is not None and stop():
            break
        if max_passes is not None and passes >= max_passes:
            break
        passes += 1
        drafts = []
        for b in active:
            d, hint[b] = draft_from(
                base[b], out[b], hint[b], min(draft, limit[b] - len(out[b]) - 1)
            )
            drafts.append(d)
        a, m = len(active), max(len(d) for d in drafts)
        tokens = torch.full((a, m + 1), PAD, dtype=torch.long)
        for r, d in enumerate(drafts):
            tokens[r, 1 : 1 + len(d)] = torch.tensor(d, dtype=torch.long)
        tokens = tokens.to(device)
        tokens[:, 0] = last
        start = torch.tensor([len(out[b]) for b in active], dtype=torch.long, device=device)
        positions = start[:, None] + torch.arange(m + 1, device=device)  # (A, M+1)
        states = [state]
        for i in range(m):
            states.append(states[-1].step(tables, tokens[:, i + 1]))
        h = torch.stack([s.h for s in states], 1)  # (A, M+1)
        types = torch.stack([s.types for s in states], 1)  # (A, M+1, W)
        steps = torch.stack([s.steps for s in states], 1)  # (A, M+1)
        allowed = _allowed_along(state, h, steps, tables)  # (A, M+1, V)
        logp = model.extend(
            rows, cache, tokens, positions, h, types, allowed, state.entry, state.net
        )
        if counts is not None:
            counts["passes"] = counts.get("passes", 0) + 1
            counts["fed"] = counts.get("fed", 0) + a * (m + 1)
        best, pred = logp.max(dim=-1)  # (A, M+1)
        best_c, pred_c = best.cpu().tolist(), pred.cpu().tolist()
        at, nxt, keep = [], [], []
        for r, b in enumerate(active):
            d, i = drafts[r], 0
            while i < len(d) and pred_c[r][i] == d[i] and not finished[b]:
                out[b].append(d[i])
                logprob[b] += best_c[r][i]
                finished[b] = d[i] == EOS
                i += 1
            at.append(i)
            nxt.append(pred_c[r][i])
            if finished[b]:
                continue
            if best_c[r][i] == float("-inf"):  # the grammar left no token: no hypothesis
                continue
            out[b].append(pred_c[r][i])
            logprob[b] += best_c[r][i]
            finished[b] = pred_c[r][i] == EOS
            hint[b] += i + 1
            if not finished[b]:
                keep.append(r)
        if not keep:
            break
        idx = torch.tensor(at, dtype=torch.long, device=device)
        lane = torch.arange(a, device=device)
        state = GrammarState(
            h[lane, idx],
            types[lane, idx],
            state.entry,
            state.net,
            state.floor,
            state.ptr_valid,
            steps[lane, idx],
            state.limit,
        ).step(tables, torch.tensor(nxt, dtype=torch.long, device=device))
        sel = torch.tensor(keep, dtype=torch.long, device=device)
        state = state.index_select(sel)
        rows = rows.select(sel, sel)
        cache = cache.select(sel, sel)
        last = torch.tensor([nxt[r] for r in keep], dtype=torch.long, device=device)
        active = [active[r] for r in keep]
    hyps: list[list[Hypothesis]] = []
    for b in range(g_count):
        if not finished[b]:
            hyps.append([])
            continue
        ids = [t for t in out[b] if t not in (EOS, PAD)]
        lp = logprob[b]
        hyps.append(
            [
                Hypothesis(
                    ids, model.vocab.decode(ids, immediates[b]), lp, lp / (len(ids) + 1) ** alpha
                )
            ]
        )
    return hyps


def _allowed_along(
    state: GrammarState, h: torch.Tensor, steps: torch.Tensor, tables
) -> torch.Tensor:
    """(A, M+1, V) grammar masks of A rows at M+1 positions along their drafts, in one call:
    the mask depends on the depth ``h`` and the tokens emitted ``steps`` (both (A, M+1)),
    not on the slot types, so the positions are laid out as A * (M+1) rows of one state."""
    a, n = h.shape
    flat = GrammarState(
        h.reshape(-1),
        h.new_empty((a * n, 0)),  # slot types: not read by `allowed`
        state.entry.repeat_interleave(n),
        state.net.repeat_interleave(n),
        state.floor.repeat_interleave(n),
        state.ptr_valid.repeat_interleave(n, 0),
        steps.reshape(-1),
        state.limit.repeat_interleave(n),
    )
    return flat.allowed(tables).view(a, n, -1)
