"""Fixtures for the training tests: a small pairs directory built from ``examples/``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasmopt.report import CompileOptions
from tasmopt.tir.codec import decode
from tasmopt.train.corpus import module_rows
from tasmopt.train.dataset import write_pairs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Small hand-written examples: fast to compile, varied blocks.
FILES = ("u32_ops", "events", "ram_writes", "sponge", "xfield_scale_invert", "call")


@pytest.fixture(scope="session")
def example_rows() -> list:
    rows = []
    for i, name in enumerate(FILES):
        split = "holdout" if i == len(FILES) - 1 else "train"
        ops = decode(json.loads((EXAMPLES / f"{name}.json").read_text())["tir"])
        blocks, _ = module_rows(
            ops, name, "real", split, options=CompileOptions(sources=("rules",))
        )
        rows.extend(blocks)
    return rows


@pytest.fixture(scope="session")
def pairs_dir(tmp_path_factory, example_rows) -> Path:
    out = tmp_path_factory.mktemp("pairs") / "examples-v1"
    write_pairs(out, example_rows, name="examples-v1")
    return out
