"""Incremental decoding (KV cache, cross-attention shared by a block's beams) computes the
same distributions as teacher forcing over the whole sequence."""

from __future__ import annotations

import torch
from modelkit import tiny_config

from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import vocab
from tasmopt.train.dataset import pad_tokens


def test_incremental_equals_teacher_forcing(example_blocks) -> None:
    torch.manual_seed(0)
    model = TasmModel(tiny_config(dec_layers=2, gnn_layers=2)).eval()
    picked = [b for b in example_blocks if 3 <= len(b[3]) <= 10][:4]
    datas, seqs = [], []
    for ops, entry, net, base in picked:
        d, imms = block_data(ops, entry, net, base, max_len=64)
        datas.append(d)
        seqs.append(vocab().encode(base, imms))  # the baseline itself: grammatical
    batch = batch_graphs(datas)
    tokens = pad_tokens(seqs)  # (G, T)
    k = 3
    with torch.no_grad():
        logits, _ = model(batch, tokens)  # (G, T, V)
        full = torch.log_softmax(logits, dim=-1)
        enc = model.encode(batch)
        rows, state, cache, tok = model.start(batch, enc, k, batch.limit)
        tables = model.grammar(tok.device)
        for t in range(tokens.shape[1]):
            logp = model.step(rows, state, cache, tok)  # (G*k, V)
            want = full[:, t].repeat_interleave(k, dim=0)
            live = (tokens[:, t] != 0).repeat_interleave(k)
            ok = torch.isfinite(logp) & live[:, None]
            assert torch.allclose(logp[ok], want[ok], atol=1e-4)
            tok = tokens[:, t].repeat_interleave(k)
            state = state.step(tables, tok)
