"""Model inputs of one block: its graph (`tasmopt.model.graph`) with the decoding limits the
grammar needs (floor, token limit), built the same way for training, evaluation and serving.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch_geometric.data import Data

from tasmopt.isa import IsaVariant, instruction_set
from tasmopt.model.graph import tir_graph
from tasmopt.model.vocab import PAD, VocabError, vocab
from tasmopt.tasm.program import Instr
from tasmopt.tir.ops import Op

__all__ = ["low_water", "block_data"]


def low_water(instrs: Sequence[Instr], isa: IsaVariant = "release") -> int:
    """Lowest stack length relative to entry that any shrinking instruction reaches (<= 0);
    the verifier's ``SymbolicRun.low_water`` from the ISA deltas alone."""
    table = instruction_set(isa)
    depth = low = 0
    for ins in instrs:
        d = table[ins.name].stack_delta(ins.arg if isinstance(ins.arg, int) else None)
        depth += d
        if d < 0:
            low = min(low, depth)
    return low


def block_data(
    ops: Sequence[Op],
    entry_depth: int,
    net_effect: int,
    baseline: Sequence[Instr],
    *,
    max_len: int,
    isa: IsaVariant = "release",
) -> tuple[Data, list[int]]:
    """The graph ``Data`` of a block and its immediates.

    Besides the graph (`tasmopt.model.graph.TirGraph.to_data`) the data holds ``limit`` (1,):
    most tokens to decode, EOS included (``len(baseline) + 1`` capped at ``max_len``), and
    ``base_tokens`` (1, max_len): the baseline's token ids, PAD-padded (lines without a
    token are left out), which the model reads as a second memory.
    """
    g = tir_graph(ops, entry_depth, net_effect, floor=low_water(baseline, isa))
    data = g.to_data(isa)
    data.limit = torch.tensor([min(len(baseline) + 1, max_len)])
    voc = vocab(isa)
    ids = []
    for ins in baseline[:max_len]:
        try:
            ids.append(voc.encode_instr(ins, g.immediates))
        except VocabError:
            continue
    base = torch.full((1, max_len), PAD, dtype=torch.long)
    base[0, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    data.base_tokens = base
    return data, g.immediates
