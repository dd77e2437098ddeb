"""TirGraph: DataDep from the entry stack (parameters), ControlFlow, MemOrder, batching."""

from __future__ import annotations

import torch

from tasmopt.lower.effects import sequence_effect
from tasmopt.model.graph import (
    CONTROL_FLOW,
    DATA_DEP,
    MEM_ORDER,
    NODE_FEATURES,
    batch_graphs,
    tir_graph,
)
from tasmopt.tir.codec import decode


def _graph(tir):
    ops = decode(tir)
    eff = sequence_effect(ops)
    return tir_graph(ops, eff.depth, eff.net)


def _edges(g, kind):
    keep = g.edge_type == kind
    return {(int(a), int(b)) for a, b in g.edge_index[:, keep].T}


def test_parameters_get_data_edges_from_the_context_node() -> None:
    # example A of spec/tir.md: both Dup 1 read parameters, so does Dup 3
    g = _graph(
        [{"Dup": 1}, {"Dup": 1}, "Add", {"Dup": 0}, {"Dup": 3}, "Mul", {"Swap": 3}, {"Pop": 3}]
    )
    assert g.x.shape == (9, NODE_FEATURES)
    data = _edges(g, DATA_DEP)
    assert {(0, 1), (0, 2), (0, 5)} <= data
    assert {(1, 3), (2, 3), (3, 4), (4, 6), (5, 6)} <= data
    assert _edges(g, CONTROL_FLOW) == {(i, i + 1) for i in range(8)}
    assert not _edges(g, MEM_ORDER)
    # every edge appears reversed with type + 3
    assert (g.edge_type >= 3).sum() == (g.edge_type < 3).sum()
    # the context edge of Dup 1 names entry slot 1
    k = next(
        i
        for i in range(g.edge_index.shape[1])
        if tuple(g.edge_index[:, i].tolist()) == (0, 1) and g.edge_type[i] == DATA_DEP
    )
    assert torch.allclose(g.edge_attr[k], torch.tensor([1 / 16, 1.0]))


def test_mem_order_chains_side_effects_and_sub_is_one_node() -> None:
    g = _graph(
        [{"ReadIo": 1}, {"Push": 7}, "Sub", {"RamWrite": {"width": 1}}, {"Hint": 1}, {"WriteIo": 1}]
    )
    assert _edges(g, MEM_ORDER) == {(1, 4), (4, 5), (5, 6)}
    assert (2, 3) in _edges(g, DATA_DEP) and (1, 3) in _edges(g, DATA_DEP)
    assert g.immediates == [7] and g.imm_nodes == [2]


def test_batch_is_one_disconnected_graph() -> None:
    a = _graph([{"Dup": 0}, "Add"])
    b = _graph([{"Push": 3}, {"Push": 4}, "Mul", {"Pop": 1}])
    batch = batch_graphs([a, b])
    assert batch.num_graphs == 2 and batch.x.shape[0] == a.num_nodes + b.num_nodes
    assert batch.imm_local.shape[0] == 2
    assert int(batch.imm_local[1, 0]) == 1  # local index: not offset by the batch
    src, dst = batch.edge_index
    same = batch.batch[src] == batch.batch[dst]
    assert bool(same.all())
