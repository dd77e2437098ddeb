"""The model's hyper-parameters: one small dataclass, stored as ``config.json`` with every
checkpoint (`tasmopt.model.checkpoint`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from tasmopt.isa import IsaVariant

__all__ = ["ModelConfig", "SERVICE_BEAMS", "GREEDY_MAX_PASSES"]

#: Beams per block the model source decodes unless told otherwise (the service's MODEL_BEAMS
#: default; design §3: K = 32).
SERVICE_BEAMS = 32

#: Forward passes greedy decoding with baseline drafts (K = 1) may take per batch before the
#: blocks still unfinished are given up (`tasmopt.model.speculative.greedy_decode`). A pass
#: accepts a draft up to the model's first disagreement, so a block needs about one pass per
#: edit; the few blocks rewritten almost everywhere set the latency of the whole batch (71
#: passes for std.crypto.sha256). Measured on the 524 held-out blocks of the corpus build
#: (`tasmopt eval --k 1`, both shipped-size and 1.4M-parameter models): 8 passes keep every
#: valid hypothesis and the same cycles, with the per-function P90 at 128 ms instead of 292
#: (shipped model); 6 and 4 lose 13 cycles.
GREEDY_MAX_PASSES = 8


@dataclass
class ModelConfig:
    """Sizes of the encoder and decoder (design §3 defaults).

    Attributes:
        d_model: width of node embeddings and decoder states.
        gnn_layers: GATv2 layers of the encoder.
        gnn_heads: attention heads per GATv2 layer (``d_model`` split across them).
        d_edge: width of the edge embedding (type embedding + slot features).
        dec_layers, dec_heads, d_ff: decoder transformer sizes.
        max_len: most decoded tokens per block, EOS included (block targets of the real
            data are at most ~110 lines; longer blocks are not rewritten).
        depth_range: relative stack depths are clamped to ``[-depth_range, depth_range]``
            before their embedding.
        type_window: stack slots (from the top) whose tracked types feed the decoder.
        dropout: dropout in attention outputs and feed-forward blocks (training only).
        baseline_memory: the decoder also cross-attends to the baseline's tokens (the
            compiler's lowering of the same block, which every request has): the model
            learns to copy and edit it instead of re-deriving the lowering from the graph.
        isa: instruction-set variant the vocabulary was derived from.
    """

    d_model: int = 256
    gnn_layers: int = 4
    gnn_heads: int = 4
    d_edge: int = 32
    dec_layers: int = 6
    dec_heads: int = 8
    d_ff: int = 1024
    max_len: int = 128
    depth_range: int = 32
    type_window: int = 8
    dropout: float = 0.1
    baseline_memory: bool = True
    isa: IsaVariant = "release"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a dict, ignoring keys this version does not know."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
