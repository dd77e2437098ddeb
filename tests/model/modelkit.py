"""Helpers of the model tests: a tiny config and small real blocks (importable as
``modelkit`` from the test modules of this directory)."""

from __future__ import annotations

import json
from pathlib import Path

from tasmopt.lower.triton import lower
from tasmopt.model.config import ModelConfig
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "trident-std"


def tiny_config(**kw) -> ModelConfig:
    """A model small enough to train in seconds on CPU."""
    base = dict(
        d_model=32,
        gnn_layers=1,
        gnn_heads=2,
        d_edge=8,
        dec_layers=1,
        dec_heads=2,
        d_ff=64,
        dropout=0.0,
        max_len=64,
    )
    base.update(kw)
    return ModelConfig(**base)


def lowered_blocks(path: Path) -> list[tuple]:
    """(ops, entry_depth, net_effect, baseline instrs) of every block of a module file."""
    ops = decode(json.loads(path.read_text())["tir"])
    low = lower(ops)
    out = []
    for f in low.functions:
        if f.unlowerable:
            continue
        for b in f.blocks:
            text = "\n".join(
                ln
                for ln in low.lines[b.start : b.end]
                if ln.strip() and not ln.strip().startswith("//")
            )
            base = parse_instructions(text)
            if base:
                out.append((b.ops, b.entry_depth, b.net_effect, base))
    return out
