"""TirGraph: a straight-line TIR block as a typed graph, the model's encoder input (design §3).

Nodes are a context node (index 0, the block's entry stack) followed by one node per op.
Edges are typed:

* **DataDep** (0): value flow, from an abstract run of the block on an op stack of producer
  tags. Each op runs the instructions it lowers to (`tasmopt.lower.expansion.expand`) with
  their ISA value flow (`tasmopt.isa.slot_flow`), so every effect is the real one
  (``ExtMul`` 4 -> 3, ``MerkleLoad`` in-place writes, ``Sub`` = ``push -1 mul add``). The
  entry stack is produced by the context node, so parameters get edges too (the anchor's
  graph started from an empty stack, spec/neural-anchor.md §18.10). Values moved by a
  permutation (``Swap``) keep their producer; a copy (``Dup``) is produced by the copying op,
  so consumers link to it. The edge attribute holds
  the stack slot read (the entry slot for context edges): operand order and parameter index.
* **ControlFlow** (1): program order, context -> op 1 -> op 2 -> ...
* **MemOrder** (2): a chain through the ops with side effects on RAM, I/O, secret input or
  the sponge, in program order.

Every edge also appears reversed with its own type (3, 4, 5), so messages flow both ways.
`TirGraph.to_data` gives a torch-geometric ``Data``; `batch_graphs` joins many into one
disconnected ``Batch``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch_geometric.data import Batch, Data

from tasmopt.isa import IsaVariant, P, instruction_set, names_where, slot_flow
from tasmopt.lower.expansion import expand, split_instruction
from tasmopt.model.vocab import MAX_POINTERS, vocab
from tasmopt.tir.ops import VARIANTS, Op

__all__ = [
    "NODE_FEATURES",
    "EDGE_TYPES",
    "EDGE_FEATURES",
    "TirGraph",
    "tir_graph",
    "immediates",
    "batch_graphs",
]

N_KINDS = len(VARIANTS)  # 54
#: Feature layout: [op one-hot (54) | field type BFE, XFE, unknown (3) | has_immediate |
#: immediate: log2(1+v)/64, log2(1+p-v)/64, v < 2^32 | argument/16 | is_context |
#: entry_depth/16, net_effect/16 (context node only) | position i/n, i/64].
NODE_FEATURES = N_KINDS + 3 + 1 + 3 + 1 + 1 + 2 + 2  # 67
_F_FIELD = N_KINDS
_F_HAS_IMM = N_KINDS + 3
_F_IMM = _F_HAS_IMM + 1
_F_ARG = _F_IMM + 3
_F_CTX = _F_ARG + 1
_F_DEPTH = _F_CTX + 1
_F_POS = _F_DEPTH + 2

DATA_DEP, CONTROL_FLOW, MEM_ORDER = 0, 1, 2
#: Forward types and their reverses (``t + 3``).
EDGE_TYPES = (
    "data_dep",
    "control_flow",
    "mem_order",
    "data_dep_rev",
    "control_flow_rev",
    "mem_order_rev",
)
#: Edge attribute: [stack slot / 16, from the context node].
EDGE_FEATURES = 2

#: Instructions with side effects that must keep their order (ISA table ``has_side_effect``).
_EFFECTS = names_where(lambda i: i.has_side_effect)


def immediates(ops: Sequence[Op]) -> list[int]:
    """Immediates of the ops that carry one, in op order, canonical mod p: ``Push`` values and
    ``Reveal``/``Seal`` tags. Pointer token k of the vocabulary refers to entry k."""
    out: list[int] = []
    for op in ops:
        v = _immediate(op)
        if v is not None:
            out.append(v % P)
    return out


def _immediate(op: Op) -> int | None:
    if op.kind == "Push":
        return int(op.value)  # type: ignore[arg-type]  # Reveal/Seal/Push values are ints (TIR validation)
    if op.kind in ("Reveal", "Seal"):
        return int(op.get("tag"))
    return None


def _argument(op: Op) -> int | None:
    """The small argument: n of Pop/Dup/Swap/ReadIo/..., width of Hash/RamRead/RamWrite,
    field_count of Reveal/Seal."""
    if VARIANTS[op.kind].payload == "u32":
        return int(op.value)  # type: ignore[arg-type]  # Reveal/Seal/Push values are ints (TIR validation)
    if op.kind in ("Hash", "RamRead", "RamWrite"):
        return int(op.get("width"))
    if op.kind in ("Reveal", "Seal"):
        return int(op.get("field_count"))
    return None


def _instructions(op: Op) -> list[tuple[str, int | None]]:
    out = []
    for text in expand(op):
        name, arg = split_instruction(text)
        out.append((name, int(arg) if arg is not None and arg.lstrip("-").isdigit() else None))
    return out


def _field_type(instrs: list[tuple[str, int | None]]) -> int:
    """0 BFE, 1 XFE, 2 unknown, from the ISA groups of the instructions an op lowers to."""
    table = instruction_set()
    groups = {table[n].group for n, _ in instrs if n in table}
    if "ext_arith" in groups:
        return 1
    if groups & {"base_arith", "u32"} or any(n == "push" for n, _ in instrs):
        return 0
    return 2


def _has_side_effect(instrs: list[tuple[str, int | None]]) -> bool:
    return any(n in _EFFECTS for n, _ in instrs)


@dataclass
class TirGraph:
    """One block as a graph. Node 0 is the context node; node i (i >= 1) is op i - 1.

    Attributes:
        x: (N, NODE_FEATURES) float32 node features.
        edge_index: (2, E) int64, source row 0, destination row 1.
        edge_type: (E,) int64 in 0..5 (`EDGE_TYPES`).
        edge_attr: (E, EDGE_FEATURES) float32.
        imm_nodes: node index of the k-th immediate (k < MAX_POINTERS), in op order.
        immediates: the block's immediates, canonical mod p (`immediates`).
        entry_depth, net_effect: of the block (`tasmopt.lower.blocks.Block`).
        floor: lowest stack length the block may reach, relative to entry (<= 0): the
            baseline's low-water mark when known, else ``-entry_depth``.
    """

    x: torch.Tensor
    edge_index: torch.Tensor
    edge_type: torch.Tensor
    edge_attr: torch.Tensor
    imm_nodes: list[int]
    immediates: list[int]
    entry_depth: int
    net_effect: int
    floor: int

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    def to_data(self, isa: IsaVariant = "release") -> Data:
        """A torch-geometric ``Data`` with graph-level attributes (each a (1, ...) row):
        ``imm_local`` (1, MAX_POINTERS) node index or -1, ``ptr_valid`` (1, 4*MAX_POINTERS)
        bool (`tasmopt.model.vocab.Vocab.pointer_valid`), ``entry_depth``, ``net_effect``,
        ``floor`` (1,) int64."""
        imm = torch.full((1, MAX_POINTERS), -1, dtype=torch.long)
        k = min(len(self.imm_nodes), MAX_POINTERS)
        imm[0, :k] = torch.tensor(self.imm_nodes[:k], dtype=torch.long)
        valid = torch.tensor([vocab(isa).pointer_valid(self.immediates)], dtype=torch.bool)
        return Data(
            x=self.x,
            edge_index=self.edge_index,
            edge_type=self.edge_type,
            edge_attr=self.edge_attr,
            imm_local=imm,
            ptr_valid=valid,
            entry_depth=torch.tensor([self.entry_depth]),
            net_effect=torch.tensor([self.net_effect]),
            floor=torch.tensor([self.floor]),
            num_nodes=self.num_nodes,
        )


def _imm_features(v: int) -> list[float]:
    return [math.log2(1 + v) / 64, math.log2(1 + (P - v) % P) / 64, float(v < 2**32)]


def tir_graph(
    ops: Sequence[Op], entry_depth: int, net_effect: int, floor: int | None = None
) -> TirGraph:
    """Build the graph of one straight-line block.

    Args:
        ops: the block's ops (no structure ops; comments are ignored).
        entry_depth: elements the block reads on entry.
        net_effect: change of the stack length over the block.
        floor: the baseline's low-water mark (<= 0); default ``-entry_depth``.

    Raises:
        ValueError: a structure op (Call, IfElse, ...) in ``ops``.
    """
    ops = [o for o in ops if o.kind != "Comment"]
    n = len(ops) + 1
    x = torch.zeros(n, NODE_FEATURES)
    x[0, _F_CTX] = 1.0
    x[0, _F_FIELD + 2] = 1.0
    x[0, _F_DEPTH] = entry_depth / 16
    x[0, _F_DEPTH + 1] = net_effect / 16
    src: list[int] = []
    dst: list[int] = []
    etype: list[int] = []
    eattr: list[tuple[float, float]] = []
    seen: set[tuple[int, int, int, int, int]] = set()

    def edge(u: int, v: int, t: int, slot: float = 0.0, ctx: float = 0.0) -> None:
        key = (u, v, t, round(slot * 16), int(ctx))
        if u == v or key in seen:
            return
        seen.add(key)
        src.extend((u, v))
        dst.extend((v, u))
        etype.extend((t, t + 3))
        eattr.extend(((slot, ctx), (slot, ctx)))

    # stack of producer tags, top first: (node, entry slot or -1)
    stack: list[tuple[int, int]] = []
    entry_next = 0

    def ensure(k: int) -> None:
        nonlocal entry_next
        while len(stack) < k:
            stack.append((0, entry_next))
            entry_next += 1

    imm_nodes: list[int] = []
    last_effect = None
    for i, op in enumerate(ops):
        node = i + 1
        if op.is_structure:
            raise ValueError(f"op {i} ({op.kind}) is a structure op; a block has none")
        instrs = _instructions(op)
        x[node, VARIANTS[op.kind].index] = 1.0
        x[node, _F_FIELD + _field_type(instrs)] = 1.0
        imm = _immediate(op)
        if imm is not None:
            x[node, _F_HAS_IMM] = 1.0
            x[node, _F_IMM : _F_IMM + 3] = torch.tensor(_imm_features(imm % P))
            imm_nodes.append(node)
        arg = _argument(op)
        if arg is not None:
            x[node, _F_ARG] = arg / 16
        x[node, _F_POS] = node / n
        x[node, _F_POS + 1] = node / 64
        edge(node - 1, node, CONTROL_FLOW)
        if _has_side_effect(instrs):
            if last_effect is not None:
                edge(last_effect, node, MEM_ORDER)
            last_effect = node
        for name, a in instrs:
            flow = slot_flow(name, a)
            ensure(max(flow.consumed, max(flow.reads, default=-1) + 1))
            for r in flow.reads:
                u, entry = stack[r]
                if entry >= 0:
                    edge(u, node, DATA_DEP, entry / 16, 1.0)
                else:
                    edge(u, node, DATA_DEP, r / 16, 0.0)
            # moved values keep their producer; copies (dup) and fresh values are this op's
            new = [stack[s] if 0 <= s < flow.consumed else (node, -1) for s in flow.src]
            stack[: flow.consumed] = new
    return TirGraph(
        x=x,
        edge_index=torch.tensor([src, dst], dtype=torch.long).reshape(2, -1),  # (2, E)
        edge_type=torch.tensor(etype, dtype=torch.long),
        edge_attr=torch.tensor(eattr, dtype=torch.float32).reshape(-1, EDGE_FEATURES),
        imm_nodes=imm_nodes,
        immediates=immediates(ops),
        entry_depth=entry_depth,
        net_effect=net_effect,
        floor=-entry_depth if floor is None else floor,
    )


def batch_graphs(graphs: Sequence[TirGraph | Data], isa: IsaVariant = "release") -> Batch:
    """Many graphs as one disconnected graph (torch-geometric ``Batch``): node indices are
    offset per graph, ``batch`` maps nodes to graphs, ``ptr`` holds the offsets, graph-level
    attributes are stacked to (G, ...)."""
    data = [g.to_data(isa) if isinstance(g, TirGraph) else g for g in graphs]
    return Batch.from_data_list(data)
