"""Beam search and sampling over a batch of blocks, with the grammar mask (design §3).

All blocks of a request are decoded together: G blocks x K hypotheses = N rows. Beam search
keeps, per block, the K best hypotheses by length-normalised log-probability
``score / len^alpha``:

1. step 0 has a single live beam per block (the others start at -inf), so no two beams
   ever share a prefix and the K results are distinct by construction (the anchor's beam
   started with K copies of one beam and collapsed to greedy, spec/neural-anchor.md §8);
2. each step scores every (beam, token) pair, finished beams contribute exactly one
   candidate (themselves), and the top K per block survive;
3. the KV cache and grammar state follow their parent beams (`index_select`);
4. every 4 steps (one host sync) blocks whose beams have all ended are retired from the
   batch, so short blocks stop costing compute while long ones finish.

`sample` draws K independent hypotheses per block instead (temperature sampling, same mask)
for diversity. Both return per block the finished hypotheses, best first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from tasmopt.model.hypothesis import Hypothesis, decode_limits
from tasmopt.model.model import TasmModel
from tasmopt.model.speculative import greedy_decode
from tasmopt.model.vocab import EOS, PAD

__all__ = ["Hypothesis", "beam_search", "sample", "merged"]


def _collect(
    model: TasmModel,
    seqs: torch.Tensor,
    logprob: torch.Tensor,
    lengths: torch.Tensor,
    done: torch.Tensor,
    k: int,
    alpha: float,
    immediates: Sequence[Sequence[int]],
) -> list[list[Hypothesis]]:
    """Finished rows -> per-graph hypothesis lists, best first, distinct instruction lists."""
    seqs, logprob, lengths, done = (t.cpu() for t in (seqs, logprob, lengths, done))
    out: list[list[Hypothesis]] = []
    for g in range(len(immediates)):
        hyps: list[Hypothesis] = []
        seen: set[tuple[int, ...]] = set()
        for r in range(g * k, (g + 1) * k):
            lp = float(logprob[r])
            if not bool(done[r]) or lp == float("-inf"):
                continue
            ids = [int(t) for t in seqs[r, : int(lengths[r])] if int(t) not in (EOS, PAD)]
            if tuple(ids) in seen:
                continue
            seen.add(tuple(ids))
            instrs = model.vocab.decode(ids, immediates[g])
            hyps.append(Hypothesis(ids, instrs, lp, lp / (len(ids) + 1) ** alpha))
        hyps.sort(key=lambda h: -h.score)
        out.append(hyps)
    return out


@torch.no_grad()
def beam_search(
    model: TasmModel,
    batch,
    immediates: Sequence[Sequence[int]],
    *,
    k: int = 32,
    alpha: float = 0.7,
    limits: torch.Tensor | None = None,
    stop: Callable[[], bool] | None = None,
    draft: int = 16,
    max_passes: int | None = None,
) -> list[list[Hypothesis]]:
    """Beam search for every graph of ``batch`` at once; with ``k == 1`` and ``draft`` > 0,
    greedy decoding that checks baseline drafts of up to ``draft`` tokens per forward pass
    (`tasmopt.model.speculative.greedy_decode`: the same tokens in fewer passes).

    Args:
        model: the model (its mode is left as is; call ``model.eval()`` first).
        batch: torch-geometric ``Batch`` of G block graphs (`tasmopt.model.graph`).
        immediates: per graph, the block's immediates (to decode pointer tokens).
        k: beams per block.
        alpha: length-normalisation exponent.
        limits: (G,) most tokens per block, EOS included (default ``batch.limit`` or the
            model's ``max_len``).
        stop: looked at every 4 decoding steps (with the host sync); when it returns True
            decoding ends and only the hypotheses finished by then are returned (a request's
            deadline: the model never makes a request wait past its budget).
        draft: baseline draft tokens per pass of greedy decoding (``k == 1``).
        max_passes: ``k == 1`` only: most forward passes of greedy decoding
            (`tasmopt.model.config.GREEDY_MAX_PASSES` is the service's); the blocks
            unfinished by then get no hypothesis. None: no limit.

    Returns:
        per graph, up to ``k`` distinct finished hypotheses, best score first.
    """
    if k == 1 and draft > 0:
        return greedy_decode(
            model,
            batch,
            immediates,
            draft=draft,
            alpha=alpha,
            limits=limits,
            stop=stop,
            max_passes=max_passes,
        )
    g_count = int(batch.num_graphs)
    limits = decode_limits(batch, limits, model.config.max_len)
    enc = model.encode(batch)
    rows, state, cache, tok = model.start(batch, enc, k, limits)
    tables = model.grammar(tok.device)
    n, device = tok.shape[0], tok.device
    steps = int(limits.max())
    logprob = torch.full((n,), float("-inf"), device=device)
    logprob[::k] = 0.0  # one live beam per block
    done = torch.zeros(n, dtype=torch.bool, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)  # tokens emitted, EOS included
    seqs = torch.full((n, steps), PAD, dtype=torch.long, device=device)
    # results by global row; the loop works on the rows of blocks still decoding
    out = [seqs.clone(), logprob.clone(), lengths.clone(), done.clone()]
    active = torch.arange(g_count, device=device)  # (A,) block ids
    beam = torch.arange(k, device=device)

    def rows_of(blocks: torch.Tensor) -> torch.Tensor:
        return (blocks[:, None] * k + beam).flatten()  # (A*K,)

    def store(local: torch.Tensor, blocks: torch.Tensor) -> None:
        target = rows_of(blocks)
        for o, x in zip(out, (seqs, logprob, lengths, done)):
            o[target] = x.index_select(0, local)

    for t in range(steps):
        a = active.shape[0]
        logp = model.step(rows, state, cache, tok)  # (A*K, V)
        v = logp.shape[1]
        stay = torch.full_like(logp, float("-inf"))
        stay[:, PAD] = 0.0
        logp = torch.where(done[:, None], stay, logp)
        cand = logprob[:, None] + logp  # (A*K, V)
        new_len = (lengths + (~done).long()).clamp(min=1)  # (A*K,)
        norm = cand / new_len.float().pow(alpha)[:, None]  # (A*K, V)
        top = norm.view(a, k * v).topk(k, dim=1).indices  # (A, K)
        offsets = (torch.arange(a, device=device) * k)[:, None]
        parent = (top // v + offsets).flatten()  # (A*K,)
        token = (top % v).flatten()  # (A*K,)
        logprob = cand.view(a, k * v).gather(1, top).flatten()
        was_done = done.index_select(0, parent)
        seqs = seqs.index_select(0, parent)
        seqs[:, t] = torch.where(was_done, PAD, token)
        lengths = lengths.index_select(0, parent) + (~was_done).long()
        done = was_done | (token == EOS)
        state = state.index_select(parent).step(tables, token)
        cache = cache.index_select(parent)
        tok = token
        if t % 4 == 3:  # one host sync every 4 steps: retire blocks whose beams all ended
            if stop is not None and stop():
                break
            over = (done | torch.isinf(logprob)).view(a, k).all(dim=1)  # (A,)
            n_over = int(over.sum())
            if n_over == a:
                break
            if n_over:
                idx = torch.arange(a, device=device)
                store(rows_of(idx[over]), active[over])
                keep_blocks = idx[~over]
                keep = rows_of(keep_blocks)
                active = active[~over]
                seqs, logprob, lengths, done, tok = (
                    x.index_select(0, keep) for x in (seqs, logprob, lengths, done, tok)
                )
                state = state.index_select(keep)
                cache = cache.select(keep, keep_blocks)
                rows = rows.select(keep, keep_blocks)
    store(torch.arange(active.shape[0] * k, device=device), active)
    seqs, logprob, lengths, done = out
    return _collect(model, seqs, logprob, lengths, done, k, alpha, immediates)


@torch.no_grad()
def sample(
    model: TasmModel,
    batch,
    immediates: Sequence[Sequence[int]],
    *,
    k: int = 32,
    temperature: float = 1.0,
    alpha: float = 0.7,
    limits: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[list[Hypothesis]]:
    """``k`` samples per graph from the masked model distribution at ``temperature``;
    duplicates removed. Arguments as `beam_search` (``stop`` included)."""
    limits = decode_limits(batch, limits, model.config.max_len)
    enc = model.encode(batch)
    rows, state, cache, tok = model.start(batch, enc, k, limits)
    tables = model.grammar(tok.device)
    n, device = tok.shape[0], tok.device
    steps = int(limits.max())
    logprob = torch.zeros(n, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    seqs = torch.full((n, steps), PAD, dtype=torch.long, device=device)
    for t in range(steps):
        logp = model.step(rows, state, cache, tok)  # (N, V)
        probs = torch.softmax(logp / temperature, dim=-1)
        probs = torch.nan_to_num(probs, nan=0.0)
        probs[:, PAD] = torch.where(probs.sum(-1) > 0, probs[:, PAD], 1.0)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (N,)
        token = torch.where(done, PAD, token)
        picked = logp.gather(1, token[:, None]).squeeze(1)
        logprob = logprob + torch.where(done, 0.0, picked)
        seqs[:, t] = token
        lengths = lengths + (~done).long()
        done = done | (token == EOS)
        state = state.step(tables, token)
        tok = token
        if t % 4 == 3 and (bool(done.all()) or (stop is not None and stop())):
            break
    return _collect(model, seqs, logprob, lengths, done, k, alpha, immediates)


def merged(beam: Sequence[Hypothesis], extra: Sequence[Hypothesis]) -> list[Hypothesis]:
    """``beam``'s hypotheses in their order, then those of ``extra`` (e.g. `sample`'s) that
    spell other instructions, each once."""
    seen = {tuple(h.instrs) for h in beam}
    out = list(beam)
    for h in extra:
        key = tuple(h.instrs)
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out
