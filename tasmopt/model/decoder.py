"""Transformer decoder with cross-attention to node embeddings and a KV cache (design §3).

Pre-LN blocks, each: causal self-attention, cross-attention to the encoder memory (global
context token + node embeddings), GELU feed-forward:

.. math::

    x \\leftarrow x + \\mathrm{SelfAttn}(\\mathrm{LN}(x)), \\quad
    x \\leftarrow x + \\mathrm{CrossAttn}(\\mathrm{LN}(x), M), \\quad
    x \\leftarrow x + \\mathrm{FFN}(\\mathrm{LN}(x))

Incremental decoding keeps, per layer, the self-attention keys and values of every position
emitted so far (`KVCache`, preallocated to ``max_len``) and the cross-attention keys and
values of the memory (computed once per request, once per *block*: the K beams of a block
share them, and attend as K queries of one row), so a step costs O(T) instead of O(T^2) and
the memory is never copied per beam.

Shapes: B rows (blocks x beams), T positions, S memory tokens, H heads, hs = d / H.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from tasmopt.model.config import ModelConfig

__all__ = ["Decoder", "KVCache"]


@dataclass
class KVCache:
    """Per-layer attention state of B rows during incremental decoding.

    Attributes:
        k, v: per layer (B, H, max_len, hs) self-attention keys/values; positions < ``t``
            are filled.
        ck, cv: per layer (G, H, S, hs) cross-attention keys/values of the memory of the
            G = B / beams blocks.
        mask: (G, 1, 1, S) bool memory mask for cross-attention.
        t: positions filled.
        beams: rows per block (B = G * beams, a block's rows consecutive).
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    ck: list[torch.Tensor]
    cv: list[torch.Tensor]
    mask: torch.Tensor
    t: int = 0
    beams: int = 1

    def select(self, rows: torch.Tensor, blocks: torch.Tensor) -> KVCache:
        """A cache of only some rows and their blocks (beam search drops finished blocks):
        ``rows`` (B',) and ``blocks`` (G',) with B' = G' * beams."""
        return KVCache(
            [k.index_select(0, rows) for k in self.k],
            [v.index_select(0, rows) for v in self.v],
            [c.index_select(0, blocks) for c in self.ck],
            [c.index_select(0, blocks) for c in self.cv],
            self.mask.index_select(0, blocks),
            self.t,
            self.beams,
        )

    def index_select(self, rows: torch.Tensor) -> KVCache:
        """Reorder the self-attention state in place to ``rows`` ((B,) parent row of each new
        row); only the filled positions are copied.
        The cross-attention state is shared by the beams of a block and stays as is, so
        ``rows`` must map each row to a row of the same block."""
        t = self.t
        for k, v in zip(self.k, self.v):
            k[:, :, :t] = k[:, :, :t].index_select(0, rows)
            v[:, :, :t] = v[:, :, :t].index_select(0, rows)
        return self


class _Attention(nn.Module):
    """Multi-head attention; self- or cross-, with an optional cache."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.h, self.hs = heads, d // heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)
        self.dropout = dropout

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.hs).transpose(1, 2)  # (B, H, T, hs)

    def keys_values(self, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv(m).chunk(2, dim=-1)  # (B, S, d) each
        return self.split(k), self.split(v)  # (B, H, S, hs)

    def attend(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        causal: bool = False,
    ) -> torch.Tensor:
        b, t, d = x.shape
        q = self.split(self.q(x))  # (B, H, T, hs)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=causal,
            dropout_p=self.dropout if self.training else 0.0,
        )
        y = y.transpose(1, 2).reshape(b, t, d)  # (B, T, d)
        return F.dropout(self.out(y), self.dropout, self.training)


class _Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = _Attention(d, config.dec_heads, config.dropout)
        self.cross_attn = _Attention(d, config.dec_heads, config.dropout)
        self.ff = nn.Sequential(
            nn.Linear(d, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, d),
            nn.Dropout(config.dropout),
        )

    def forward(
        self, x: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: x (B, T, d), all positions at once."""
        y = self.ln1(x)
        k, v = self.self_attn.keys_values(y)
        x = x + self.self_attn.attend(y, k, v, causal=True)
        x = x + self.cross_attn.attend(self.ln2(x), ck, cv, mask)
        return x + self.ff(self.ln3(x))

    def step(self, x: torch.Tensor, cache: KVCache, layer: int) -> torch.Tensor:
        """One position: x (B, 1, d); appends its keys/values to the cache."""
        y = self.ln1(x)
        k, v = self.self_attn.keys_values(y)  # (B, H, 1, hs)
        t = cache.t
        cache.k[layer][:, :, t : t + 1] = k
        cache.v[layer][:, :, t : t + 1] = v
        x = x + self.self_attn.attend(
            y, cache.k[layer][:, :, : t + 1], cache.v[layer][:, :, : t + 1]
        )
        b, _, d = x.shape
        y = self.ln2(x).view(b // cache.beams, cache.beams, d)  # (G, K, d)
        y = self.cross_attn.attend(y, cache.ck[layer], cache.cv[layer], cache.mask)
        x = x + y.reshape(b, 1, d)  # (B, 1, d)
        return x + self.ff(self.ln3(x))

    def extend(
        self, x: torch.Tensor, cache: KVCache, layer: int, positions: torch.Tensor
    ) -> torch.Tensor:
        """Several positions per row at once, each row at its own offset (speculative
        decoding, `tasmopt.model.speculative`): x (B, M, d) at ``positions`` (B, M) int64;
        writes their keys/values into the cache (one row per block: ``cache.beams == 1``).
        Position p of a row attends to the row's cached positions <= p; cached entries at
        larger positions (a rejected draft's) are masked, and later overwritten."""
        y = self.ln1(x)
        k, v = self.self_attn.keys_values(y)  # (B, H, M, hs)
        at = positions[:, None, :, None].expand_as(k)  # (B, H, M, hs)
        cache.k[layer].scatter_(2, at, k)
        cache.v[layer].scatter_(2, at, v)
        t = int(positions.max()) + 1
        keys = torch.arange(t, device=x.device)
        mask = (keys[None, None, :] <= positions[:, :, None])[:, None]  # (B, 1, M, t)
        x = x + self.self_attn.attend(y, cache.k[layer][:, :, :t], cache.v[layer][:, :, :t], mask)
        x = x + self.cross_attn.attend(self.ln2(x), cache.ck[layer], cache.cv[layer], cache.mask)
        return x + self.ff(self.ln3(x))


class Decoder(nn.Module):
    """The decoder stack (inputs are embedded by `tasmopt.model.model.TasmModel`).

    Args:
        config: `ModelConfig` (``d_model``, ``dec_layers``, ``dec_heads``, ``d_ff``).

    Shapes:
        forward: x (B, T, d), memory (B, S, d), memory_mask (B, S) -> (B, T, d).
        step: x (B, 1, d) with a `KVCache` -> (B, 1, d), B = blocks x beams.
        extend: x (B, M, d) at positions (B, M) with a one-row-per-block `KVCache`
            -> (B, M, d).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.dec_layers))
        self.ln_f = nn.LayerNorm(config.d_model)

    def _blocks(self) -> list[_Block]:
        """The decoder blocks, typed (iterating an ``nn.ModuleList`` gives untyped modules)."""
        return cast("list[_Block]", list(self.blocks))

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor
    ) -> torch.Tensor:
        mask = memory_mask[:, None, None, :]  # (B, 1, 1, S)
        for block in self._blocks():
            ck, cv = block.cross_attn.keys_values(memory)
            x = block(x, ck, cv, mask)
        return self.ln_f(x)

    def init_cache(
        self, memory: torch.Tensor, memory_mask: torch.Tensor, max_len: int, beams: int = 1
    ) -> KVCache:
        """An empty cache for ``beams`` rows per block, given the G blocks' memory
        (G, S, d) and mask (G, S)."""
        b = memory.shape[0] * beams
        c = self.config
        hs = c.d_model // c.dec_heads
        shape = (b, c.dec_heads, max_len, hs)
        ks, vs, cks, cvs = [], [], [], []
        for block in self._blocks():
            ks.append(memory.new_zeros(shape))
            vs.append(memory.new_zeros(shape))
            ck, cv = block.cross_attn.keys_values(memory)  # (B, H, S, hs)
            cks.append(ck)
            cvs.append(cv)
        return KVCache(ks, vs, cks, cvs, memory_mask[:, None, None, :], 0, beams)

    def step(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        for i, block in enumerate(self._blocks()):
            x = block.step(x, cache, i)
        cache.t += 1
        return self.ln_f(x)

    def extend(self, x: torch.Tensor, cache: KVCache, positions: torch.Tensor) -> torch.Tensor:
        """x (B, M, d) at per-row ``positions`` (B, M) -> (B, M, d); see `_Block.extend`.
        ``cache.t`` is not used (each row's filled length is the caller's)."""
        for i, block in enumerate(self._blocks()):
            x = block.extend(x, cache, i, positions)
        return self.ln_f(x)
