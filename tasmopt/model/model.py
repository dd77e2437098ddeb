"""TasmModel: TirGraph batch in, next-token logits over the TASM vocabulary out (design §3).

Decoder input at position t (the token emitted at t-1, BOS at t = 0), all summed in d:

.. math::

    x_t = E_{tok}[y_{t-1}] + [y_{t-1} \\text{ pointer } k]\\, W_{p} n_k + E_{pos}[t]
        + E_{depth}[h_t] + E_{exit}[h_t - net] + E_{win}[E + h_t]
        + W_{type}\\, \\mathrm{onehot}(\\tau_t[0{:}8]) + W_{ctx}\\, c

with ``h_t`` the relative stack depth and ``tau_t`` the slot types from the grammar state
(`tasmopt.model.grammar`), ``n_k`` the embedding of the k-th immediate node and ``c`` the
global graph context. The decoder cross-attends to a memory of the global context token,
the node embeddings and (``baseline_memory``) the baseline's tokens
``E_{tok}[b_i] + E_{pos}[i] + s_b`` (positions shared with the decoder's, so aligning them
is easy), and its input at t also gets ``H_0[b_t] + H_1[b_{t+1}]``: the baseline tokens at
the same position. Where the target follows the baseline the next token is right there;
where an edit shifted it, cross-attention finds it. The model learns to copy the compiler's
lowering and edit it. Output logits are ``W_{out} z_t``; pointer tokens add a pointer score
``(W_{q,j} z_t) \\cdot (W_k n_k) / \\sqrt{d}`` per pointer kind j, so constants are copied from
the input by attention rather than memorised.

`TasmModel.forward` is teacher forcing and returns ``(logits, loss)``; `TasmModel.encode`,
`TasmModel.start` and `TasmModel.step` are the incremental interface beam search uses.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from tasmopt.model.config import ModelConfig
from tasmopt.model.decoder import Decoder, KVCache
from tasmopt.model.encoder import EncodedGraphs, GraphEncoder
from tasmopt.model.grammar import TYPES, GrammarState, GrammarTables
from tasmopt.model.vocab import BOS, MAX_POINTERS, PAD, POINTER_KINDS, vocab

__all__ = ["TasmModel", "MASK_PENALTY"]

#: Logit penalty of tokens the grammar forbids (a large finite value: training stays finite
#: even if a target broke the grammar; decoding uses -inf).
MASK_PENALTY = 1e4


class TasmModel(nn.Module):
    """Graph encoder + decoder + pointer head.

    Args:
        config: `ModelConfig`.

    Shapes (G graphs, B decoding rows, T positions, V tokens, d = ``d_model``):
        forward(batch, tokens (G, T) int64 target ids ending in EOS, PAD after)
            -> logits (G, T, V), loss (scalar mean token cross-entropy, PAD ignored).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.vocab = vocab(config.isa)
        d, v = config.d_model, len(self.vocab)
        self.encoder = GraphEncoder(config)
        self.tok = nn.Embedding(v, d)
        self.pos = nn.Embedding(config.max_len + 1, d)
        r = 2 * config.depth_range + 1
        self.depth = nn.Embedding(r, d)
        self.exit = nn.Embedding(r, d)
        self.window = nn.Embedding(r, d)
        self.types = nn.Linear(config.type_window * len(TYPES), d)
        self.ctx = nn.Linear(d, d)
        self.ptr_in = nn.Linear(d, d)
        if config.baseline_memory:
            self.base_seg = nn.Parameter(torch.zeros(d))
            self.hint = nn.ModuleList(nn.Embedding(v, d) for _ in range(2))
            self.copy_q = nn.Linear(d, d)
            self.copy_k = nn.Linear(d, d)
            self.copy_gate = nn.Linear(d, 1)
        self.decoder = Decoder(config)
        self.head = nn.Linear(d, v)
        self.ptr_q = nn.Linear(d, len(POINTER_KINDS) * d)
        self.ptr_k = nn.Linear(d, d)
        self.drop = nn.Dropout(config.dropout)
        self.tables = GrammarTables.build(self.vocab)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def grammar(self, device: torch.device) -> GrammarTables:
        if self.tables.delta.device != device:
            self.tables = self.tables.to(device)
        return self.tables

    # -- pieces ---------------------------------------------------------------------------
    def _tokens(self, tokens: torch.Tensor, enc: EncodedGraphs) -> torch.Tensor:
        """Token embeddings (B, T, d) of ids (B, T); pointer tokens add their node's."""
        base = self.vocab.pointer_base
        is_ptr = tokens >= base
        slot = (tokens - base).clamp(min=0) % MAX_POINTERS  # (B, T)
        idx = slot[:, :, None].expand(-1, -1, enc.imm.shape[-1])  # (B, T, d)
        node = enc.imm.gather(1, idx)  # (B, T, d)
        return self.tok(tokens) + self.ptr_in(node) * is_ptr[:, :, None]

    def _encode(self, batch) -> EncodedGraphs:
        """Encoder outputs, with the baseline's tokens appended to the memory."""
        enc = self.encoder(batch)
        if not self.config.baseline_memory:
            return enc
        base = batch.base_tokens  # (G, max_len)
        n = int((base != PAD).sum(dim=1).max()) if base.numel() else 0
        base = base[:, : max(1, n)]  # (G, L): one host sync per request
        pos = torch.arange(base.shape[1], device=base.device)
        emb = self._tokens(base, enc) + self.pos(pos)[None] + self.base_seg  # (G, L, d)
        enc.memory = torch.cat([enc.memory, emb], dim=1)  # (G, S + L, d)
        enc.memory_mask = torch.cat([enc.memory_mask, base != PAD], dim=1)  # (G, S + L)
        enc.base_tokens = base
        enc.base_emb = emb
        return enc

    def _embed(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        state_h: torch.Tensor,
        state_types: torch.Tensor,
        enc: EncodedGraphs,
        entry: torch.Tensor,
        net: torch.Tensor,
    ) -> torch.Tensor:
        """Decoder inputs. tokens, positions, state_h: (B, T); state_types (B, T, W);
        entry, net: (B,); enc rows = B. Returns (B, T, d)."""
        r = self.config.depth_range
        x = self._tokens(tokens, enc) + self.pos(positions.clamp(max=self.config.max_len))
        if enc.base_tokens is not None:
            # the baseline's tokens at the same and the next position: where the target
            # follows the baseline, the next token is right there
            base = F.pad(enc.base_tokens, (0, 2), value=PAD)  # (B, L + 2)
            for j, emb in enumerate(self.hint):
                at = (positions + j).clamp(max=base.shape[1] - 1)  # (B, T)
                x = x + emb(base.gather(1, at))
        x = x + self.depth((state_h + r).clamp(0, 2 * r))
        x = x + self.exit((state_h - net[:, None] + r).clamp(0, 2 * r))
        x = x + self.window((entry[:, None] + state_h).clamp(0, 2 * r))
        top = state_types[:, :, : self.config.type_window]  # (B, T, 8)
        onehot = F.one_hot(top, len(TYPES)).flatten(2).to(x.dtype)  # (B, T, 8*types)
        x = x + self.types(onehot) + self.ctx(enc.context)[:, None, :]
        return self.drop(x)

    def _logits(self, z: torch.Tensor, enc: EncodedGraphs) -> torch.Tensor:
        """z (B, T, d) -> next-token log-probabilities (B, T, V).

        Generator: ``softmax(W_out z)`` with pointer scores added to the pointer tokens.
        With the baseline memory it is mixed with a copy distribution over the baseline's
        tokens (pointer-generator): ``p = g P_gen + (1 - g) P_copy`` where ``g =
        sigmoid(w z)`` and ``P_copy[y] = sum_{i: b_i = y} softmax_i(q(z) . k(e_i))``.
        """
        logits = self.head(z)  # (B, T, V)
        b, t, d = z.shape
        q = self.ptr_q(z).view(b, t, len(POINTER_KINDS), d)  # (B, T, 4, d)
        k = self.ptr_k(enc.imm)  # (B, P, d)
        score = torch.einsum("btjd,bpd->btjp", q, k) / math.sqrt(d)  # (B, T, 4, P)
        base = self.vocab.pointer_base
        n = len(POINTER_KINDS) * MAX_POINTERS
        ptr = logits[..., base : base + n] + score.reshape(b, t, n)
        logits = torch.cat([logits[..., :base], ptr, logits[..., base + n :]], dim=-1)
        if enc.base_tokens is None:
            return torch.log_softmax(logits, dim=-1)
        keys = self.copy_k(enc.base_emb)  # (B, L, d)
        att = torch.einsum("btd,bld->btl", self.copy_q(z), keys) / math.sqrt(d)  # (B, T, L)
        present = enc.base_tokens != PAD  # (B, L)
        att = att.masked_fill(~present[:, None, :], float("-inf"))
        has = present.any(dim=1)  # (B,)
        att = torch.softmax(att.masked_fill(~has[:, None, None], 0.0), dim=-1)
        copy = torch.zeros_like(logits).scatter_add_(
            -1, enc.base_tokens[:, None, :].expand(-1, t, -1), att
        )  # (B, T, V)
        gate = torch.sigmoid(self.copy_gate(z))  # (B, T, 1)
        gate = torch.where(has[:, None, None], gate, torch.ones_like(gate))
        mix = gate * torch.softmax(logits, dim=-1) + (1 - gate) * copy
        return torch.log(mix.clamp(min=1e-9))

    @staticmethod
    def _graph_rows(batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return batch.entry_depth, batch.net_effect, batch.floor, batch.ptr_valid

    # -- teacher forcing ------------------------------------------------------------------
    def teacher_states(
        self, batch, tokens: torch.Tensor
    ) -> tuple[GrammarState, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Grammar states before each target token.

        Returns:
            the final state, and per position (G, T): depth h, slot types (G, T, W) and the
            allowed-token mask (G, T, V) bool.
        """
        g = self.grammar(tokens.device)
        entry, net, floor, valid = self._graph_rows(batch)
        limit = getattr(batch, "limit", None)
        if limit is None:
            limit = torch.full_like(entry, tokens.shape[1])
        state = GrammarState.start(entry, net, floor, valid, limit)
        hs, ts, masks = [], [], []
        for t in range(tokens.shape[1]):
            hs.append(state.h)
            ts.append(state.types)
            masks.append(state.allowed(g))
            state = state.step(g, tokens[:, t])
        return state, torch.stack(hs, 1), torch.stack(ts, 1), torch.stack(masks, 1)

    def forward(self, batch, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self._encode(batch)
        entry, net, _, _ = self._graph_rows(batch)
        _, h, types, allowed = self.teacher_states(batch, tokens)
        inputs = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        x = self._embed(inputs, positions, h, types, enc, entry, net)  # (G, T, d)
        z = self.decoder(x, enc.memory, enc.memory_mask)
        logits = self._logits(z, enc) - MASK_PENALTY * (~allowed).float()  # (G, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), ignore_index=PAD)
        return logits, loss

    # -- incremental ----------------------------------------------------------------------
    def encode(self, batch) -> EncodedGraphs:
        return self._encode(batch)

    def start(
        self, batch, enc: EncodedGraphs, k: int, limits: torch.Tensor
    ) -> tuple[EncodedGraphs, GrammarState, KVCache, torch.Tensor]:
        """Rows for ``k`` hypotheses per graph (G*k rows, a graph's rows consecutive).

        Args:
            limits: (G,) int64 most tokens per graph, EOS included.

        Returns:
            repeated encoder outputs, grammar state, empty KV cache, and the first input
            tokens (G*k,) (all BOS).
        """
        entry, net, floor, valid = self._graph_rows(batch)
        rows = enc.repeat(k)
        state = GrammarState.start(
            entry.repeat_interleave(k),
            net.repeat_interleave(k),
            floor.repeat_interleave(k),
            valid.repeat_interleave(k, 0),
            limits.repeat_interleave(k),
        )
        cache = self.decoder.init_cache(
            enc.memory, enc.memory_mask, int(limits.max()) if limits.numel() else 1, k
        )
        first = torch.full_like(state.h, BOS)
        return rows, state, cache, first

    def step(
        self, enc: EncodedGraphs, state: GrammarState, cache: KVCache, tokens: torch.Tensor
    ) -> torch.Tensor:
        """Log-probabilities (B, V) of the next token after feeding ``tokens`` (B,) at
        position ``cache.t``, grammar mask applied (forbidden tokens get -inf)."""
        pos = torch.full_like(tokens, cache.t)[:, None]  # (B, 1)
        x = self._embed(
            tokens[:, None],
            pos,
            state.h[:, None],
            state.types[:, None],
            enc,
            state.entry,
            state.net,
        )  # (B, 1, d)
        z = self.decoder.step(x, cache)  # (B, 1, d)
        logits = self._logits(z, enc)[:, 0]  # (B, V)
        allowed = state.allowed(self.grammar(tokens.device))
        logp = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        return logp.masked_fill(~allowed, float("-inf"))  # a row with nothing allowed: no NaN

    def extend(
        self,
        enc: EncodedGraphs,
        cache: KVCache,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        h: torch.Tensor,
        types: torch.Tensor,
        allowed: torch.Tensor,
        entry: torch.Tensor,
        net: torch.Tensor,
    ) -> torch.Tensor:
        """Log-probabilities (B, M, V) of the token after each of ``tokens`` (B, M) fed at
        ``positions`` (B, M), one row per block (speculative decoding checks a whole draft in
        one pass: `tasmopt.model.speculative`).

        Args:
            enc: encoder outputs with one row per block (``enc.repeat(1)``).
            cache: one-row-per-block `KVCache`; the keys/values of these positions are
                written into it.
            h, types: (B, M) and (B, M, W) grammar state before each predicted token.
            allowed: (B, M, V) bool grammar mask of each predicted token.
            entry, net: (B,) block entry depth and net effect.
        """
        x = self._embed(tokens, positions, h, types, enc, entry, net)  # (B, M, d)
        z = self.decoder.extend(x, cache, positions)  # (B, M, d)
        logits = self._logits(z, enc)  # (B, M, V)
        logp = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        return logp.masked_fill(~allowed, float("-inf"))
