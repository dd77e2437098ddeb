"""Graph encoder: GATv2 message passing over a batch of TirGraphs (design §3).

``h^0 = W_in x``; then per layer l (GATv2, Brody et al. 2022, arXiv:2105.14491, with edge
features ``e_ij`` = type embedding + projection of the slot attributes):

.. math::

    \\alpha_{ij} = \\mathrm{softmax}_j\\big(a^\\top \\mathrm{LeakyReLU}(W_s h_j + W_t h_i
        + W_e e_{ij})\\big), \\qquad
    h_i \\leftarrow \\mathrm{LN}\\big(h_i + \\mathrm{GELU}(\\textstyle\\sum_j \\alpha_{ij} W_s h_j)\\big),
    \\qquad h_i \\leftarrow \\mathrm{LN}(h_i + \\mathrm{FFN}(h_i))

and the global context of each graph is ``W_g [mean_i h_i | max_i h_i]``.

Shapes: ``|V|`` nodes and ``|E|`` edges of the batch, G graphs, d = ``d_model``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch_geometric.nn import GATv2Conv, global_max_pool, global_mean_pool
from torch_geometric.utils import to_dense_batch

from tasmopt.model.config import ModelConfig
from tasmopt.model.graph import EDGE_FEATURES, EDGE_TYPES, NODE_FEATURES

__all__ = ["GraphEncoder", "EncodedGraphs"]


@dataclass
class EncodedGraphs:
    """Encoder outputs for G graphs.

    Attributes:
        memory: (G, S, d) the global context token, then the node embeddings (padded).
        memory_mask: (G, S) bool, True = a real token.
        context: (G, d) global context.
        imm: (G, MAX_POINTERS, d) embeddings of the immediate nodes (zeros where none).
        imm_mask: (G, MAX_POINTERS) bool.
        base_tokens: (G, L) int64 the baseline's token ids (PAD-padded), or None; set by
            `tasmopt.model.model.TasmModel` when it uses the baseline.
        base_emb: (G, L, d) their embeddings (keys of the copy head), or None.
    """

    memory: torch.Tensor
    memory_mask: torch.Tensor
    context: torch.Tensor
    imm: torch.Tensor
    imm_mask: torch.Tensor
    base_tokens: torch.Tensor | None = None
    base_emb: torch.Tensor | None = None

    def select(self, rows: torch.Tensor, blocks: torch.Tensor) -> EncodedGraphs:
        """The outputs of some rows (per-row fields) of some graphs (``memory``,
        ``memory_mask``), after `repeat`: beam search drops finished blocks with it."""

        def rows_of(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.index_select(0, rows)

        return EncodedGraphs(
            self.memory.index_select(0, blocks),
            self.memory_mask.index_select(0, blocks),
            self.context.index_select(0, rows),
            self.imm.index_select(0, rows),
            self.imm_mask.index_select(0, rows),
            rows_of(self.base_tokens),
            rows_of(self.base_emb),
        )

    def repeat(self, k: int) -> EncodedGraphs:
        """Per-row outputs for ``k`` beams per graph (G -> G*k rows, a graph's consecutive).
        ``memory``/``memory_mask`` stay per graph: the decoder's cache shares them."""

        def each(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.repeat_interleave(k, dim=0)

        return EncodedGraphs(
            self.memory,
            self.memory_mask,
            self.context.repeat_interleave(k, dim=0),
            self.imm.repeat_interleave(k, dim=0),
            self.imm_mask.repeat_interleave(k, dim=0),
            each(self.base_tokens),
            each(self.base_emb),
        )


class _GatLayer(nn.Module):
    def __init__(self, d: int, heads: int, d_edge: int, dropout: float) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"d_model {d} is not divisible by gnn_heads {heads}")
        self.conv = GATv2Conv(
            d,
            d // heads,
            heads=heads,
            edge_dim=d_edge,
            concat=True,
            dropout=dropout,
            add_self_loops=True,
        )
        self.ln1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(
            nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.Dropout(dropout)
        )
        self.ln2 = nn.LayerNorm(d)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = self.ln1(h + nn.functional.gelu(self.conv(h, edge_index, e)))  # (|V|, d)
        return self.ln2(h + self.ff(h))


class GraphEncoder(nn.Module):
    """GATv2 encoder of TirGraph batches.

    Args:
        config: `ModelConfig` (``d_model``, ``gnn_layers``, ``gnn_heads``, ``d_edge``).

    Shapes:
        input: a torch-geometric ``Batch`` of `tasmopt.model.graph.TirGraph.to_data`:
        ``x`` (|V|, NODE_FEATURES), ``edge_index`` (2, |E|), ``edge_type`` (|E|,),
        ``edge_attr`` (|E|, EDGE_FEATURES), ``batch`` (|V|,), ``imm_local`` (G, P).
        output: `EncodedGraphs` with memory (G, S, d), S = 1 + most nodes in a graph.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.inp = nn.Linear(NODE_FEATURES, d)
        self.edge_type = nn.Embedding(len(EDGE_TYPES), config.d_edge)
        self.edge_attr = nn.Linear(EDGE_FEATURES, config.d_edge)
        self.layers = nn.ModuleList(
            _GatLayer(d, config.gnn_heads, config.d_edge, config.dropout)
            for _ in range(config.gnn_layers)
        )
        self.pool = nn.Linear(2 * d, d)

    def forward(self, batch) -> EncodedGraphs:
        h = self.inp(batch.x)  # (|V|, d)
        e = self.edge_type(batch.edge_type) + self.edge_attr(batch.edge_attr)  # (|E|, d_edge)
        for layer in self.layers:
            h = layer(h, batch.edge_index, e)
        g = int(batch.num_graphs)
        pooled = torch.cat(
            [global_mean_pool(h, batch.batch, g), global_max_pool(h, batch.batch, g)], dim=-1
        )  # (G, 2d)
        context = self.pool(pooled)  # (G, d)
        nodes, mask = to_dense_batch(h, batch.batch, batch_size=g)  # (G, Smax, d)
        memory = torch.cat([context[:, None, :], nodes], dim=1)  # (G, S, d)
        memory_mask = torch.cat([mask.new_ones(g, 1), mask], dim=1)  # (G, S)
        local = batch.imm_local  # (G, P)
        imm_mask = local >= 0
        # node i of graph b sits at memory[b, 1 + i]
        idx = (local.clamp(min=0) + 1)[:, :, None].expand(-1, -1, h.shape[-1])  # (G, P, d)
        imm = memory.gather(1, idx) * imm_mask[:, :, None]  # (G, P, d)
        return EncodedGraphs(memory, memory_mask, context, imm, imm_mask)
