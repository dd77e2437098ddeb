"""The pairs format: writer, reader, deduplication, encoding, collate."""

from __future__ import annotations

import json

import pytest
import torch

from tasmopt.model.vocab import EOS, PAD
from tasmopt.train.dataset import (
    PairDataset,
    PairRow,
    PairsError,
    collate,
    read_manifest,
    read_pairs,
    write_pairs,
)


def test_rows_have_every_field_and_targets_never_lose(example_rows) -> None:
    assert example_rows
    fields = set(PairRow.__dataclass_fields__)
    assert {
        "id",
        "tir_hash",
        "origin",
        "module",
        "function",
        "block_index",
        "path",
        "split",
        "tir",
        "entry_depth",
        "net_effect",
        "baseline",
        "target",
        "target_source",
        "baseline_cycles",
        "target_cycles",
        "heights",
    } == fields
    for r in example_rows:
        assert r.origin == "real" and r.target_cycles <= r.baseline_cycles
        assert r.target_source in ("compiler", "rules")


def test_write_read_round_trip_and_dedup(tmp_path, example_rows) -> None:
    rows = example_rows + [example_rows[0]]  # a duplicate tir_hash
    manifest = write_pairs(tmp_path / "p", rows, name="p")
    assert manifest["rows"] == len({r.tir_hash for r in example_rows})
    assert read_manifest(tmp_path / "p")["format"] == "tasmopt-pairs"
    _, back = read_pairs(tmp_path / "p")
    first: dict[str, PairRow] = {}
    for r in example_rows:
        first.setdefault(r.tir_hash, r)
    assert [r.to_json() for r in back] == [r.to_json() for r in first.values()]
    _, hold = read_pairs(tmp_path / "p", ["holdout"])
    assert hold and all(r.split == "holdout" for r in hold)


def test_bad_rows_and_directories_are_refused(tmp_path, example_rows) -> None:
    bad = PairRow.from_dict({**json.loads(example_rows[0].to_json()), "split": "test"})
    with pytest.raises(PairsError):
        write_pairs(tmp_path / "x", [bad], name="x")
    worse = PairRow.from_dict(
        {
            **json.loads(example_rows[0].to_json()),
            "target_cycles": example_rows[0].baseline_cycles + 1,
        }
    )
    with pytest.raises(PairsError):
        write_pairs(tmp_path / "y", [worse], name="y")
    with pytest.raises(PairsError):
        read_pairs(tmp_path / "nothing")


def test_dataset_encodes_every_row_and_collates(example_rows) -> None:
    ds = PairDataset(example_rows, max_len=64)
    assert ds.coverage == 1.0 and not ds.skipped
    batch, tokens, exs = collate([ds[i] for i in range(min(4, len(ds)))])
    assert tokens.dtype == torch.long and tokens.shape[0] == batch.num_graphs == len(exs)
    for row, ex in zip(tokens, exs):
        n = len(ex.tokens)
        assert row[n - 1] == EOS and bool((row[n:] == PAD).all())
    assert batch.base_tokens.shape == (len(exs), 64) and batch.limit.shape == (len(exs),)


def test_copies_add_baseline_targets_for_improved_rows(example_rows) -> None:
    improved = [r for r in example_rows if r.target != r.baseline]
    assert improved
    plain = PairDataset(example_rows, max_len=64)
    both = PairDataset(example_rows, max_len=64, copies=True)
    assert len(both) == len(plain) + len(improved) and both.coverage == 1.0
