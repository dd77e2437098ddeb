"""Checkpoints (safetensors + config.json) and the model as a candidate source."""

from __future__ import annotations

import json

import pytest
import torch
from modelkit import EXAMPLES, tiny_config

from tasmopt.model.beam import beam_search
from tasmopt.model.checkpoint import CheckpointError, load_model, read_config, save_checkpoint
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.model.source import load_model_source
from tasmopt.optimizer import compile as compile_tir
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet


def test_save_load_gives_identical_outputs(tmp_path, example_blocks) -> None:
    torch.manual_seed(0)
    model = TasmModel(tiny_config()).eval()
    save_checkpoint(model, tmp_path / "v1", "v1", metrics={"x": 1})
    cfg = read_config(tmp_path / "v1")
    assert cfg["version"] == "v1" and cfg["vocab"]["size"] == len(model.vocab)
    assert not list(tmp_path.glob("v1/*.pt")) and (tmp_path / "v1/model.safetensors").exists()
    loaded = load_model(tmp_path / "v1", "cpu")
    datas, imms = zip(*(block_data(o, e, n, b, max_len=64) for o, e, n, b in example_blocks[:5]))
    batch = batch_graphs(list(datas))
    tokens = torch.tensor([[3, 4, 2]] * len(datas))
    a, _ = model(batch, tokens)
    b, _ = loaded(batch, tokens)
    assert torch.equal(a, b)
    ha = beam_search(model, batch, imms, k=4)
    hb = beam_search(loaded, batch, imms, k=4)
    assert [[h.tokens for h in x] for x in ha] == [[h.tokens for h in x] for x in hb]


def test_load_refuses_another_vocabulary(tmp_path) -> None:
    model = TasmModel(tiny_config())
    save_checkpoint(model, tmp_path / "v", "v")
    cfg = json.loads((tmp_path / "v/config.json").read_text())
    cfg["vocab"]["fingerprint"] = "0" * 64
    (tmp_path / "v/config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError):
        load_model(tmp_path / "v")
    with pytest.raises(CheckpointError):
        read_config(tmp_path / "missing")


def test_model_source_in_compile(tmp_path) -> None:
    torch.manual_seed(0)
    save_checkpoint(TasmModel(tiny_config()), tmp_path / "m", "m-test")
    src = load_model_source(tmp_path / "m", "cpu", k=4)
    assert src.name == "model"
    req = json.loads((EXAMPLES / "u32_ops.json").read_text())
    result = compile_tir(
        req["tir"], options=CompileOptions(sources=("model",)), sources=SourceSet([src])
    )
    assert result.model_version == "m-test"
    blocks = [b for f in result.functions for b in f.blocks]
    assert blocks and all("model" in b.candidates for b in blocks)
    assert all(b.cycles <= b.baseline_cycles for b in blocks)


def test_sampling_model_source_repeats_for_a_seed(tmp_path) -> None:
    torch.manual_seed(0)
    save_checkpoint(TasmModel(tiny_config()), tmp_path / "m", "m-test")
    req = json.loads((EXAMPLES / "u32_ops.json").read_text())

    def candidates(samples: int, seed: int) -> list:
        src = load_model_source(tmp_path / "m", "cpu", k=2, samples=samples, temperature=1.5)
        result = compile_tir(
            req["tir"],
            options=CompileOptions(sources=("model",), seed=seed, use_cache=False),
            sources=SourceSet([src]),
        )
        return [b.candidates["model"] for f in result.functions for b in f.blocks]

    beam, sampled = candidates(0, 0), candidates(6, 0)
    assert sampled == candidates(6, 0)  # the same request gives the same candidates
    assert sum(c.generated for c in sampled) > sum(c.generated for c in beam)


def test_min_instrs_skips_short_blocks(tmp_path) -> None:
    """`min_instrs` (MODEL_MIN_INSTRS): blocks shorter than it are not decoded (no model
    candidates); the others get the same candidates as without the gate."""
    torch.manual_seed(0)
    save_checkpoint(TasmModel(tiny_config()), tmp_path / "m", "m-test")
    req = json.loads((EXAMPLES / "if_else.json").read_text())

    def generated(min_instrs: int) -> list[tuple[int, int]]:
        src = load_model_source(tmp_path / "m", "cpu", k=4, min_instrs=min_instrs)
        result = compile_tir(
            req["tir"],
            options=CompileOptions(sources=("model",), use_cache=False),
            sources=SourceSet([src]),
        )
        return [
            (
                len(b.baseline_tasm),
                b.candidates["model"].generated if "model" in b.candidates else 0,
            )
            for f in result.functions
            for b in f.blocks
        ]

    every = generated(0)
    cut = 5
    assert any(g for n, g in every if n < cut) and any(g for n, g in every if n >= cut)
    assert generated(cut) == [(n, g if n >= cut else 0) for n, g in every]


def test_the_same_block_twice_is_decoded_once(tmp_path, example_blocks, monkeypatch) -> None:
    """Blocks repeated within one request (keccak256 repeats most of its rounds) cost one
    decode; every copy gets the same candidates."""
    import tasmopt.model.source as source_mod
    from tasmopt.sources import BlockTask

    torch.manual_seed(0)
    save_checkpoint(TasmModel(tiny_config()), tmp_path / "m", "m-test")
    src = load_model_source(tmp_path / "m", "cpu", k=3)
    tasks = [
        BlockTask("f", i, f"f/{i}", tuple(ops), tuple(base), entry, net, f"h{i}")
        for i, (ops, entry, net, base) in enumerate(example_blocks[:4])
    ]
    decoded: list[int] = []
    real = source_mod.beam_search

    def counting(model, batch, imms, **kw):
        decoded.append(int(batch.num_graphs))
        return real(model, batch, imms, **kw)

    monkeypatch.setattr(source_mod, "beam_search", counting)
    once = src.propose(tasks, CompileOptions())
    src.clear_cache()
    decoded.clear()
    twice = src.propose(tasks + tasks, CompileOptions())
    assert sum(decoded) == len(tasks)
    assert twice == once + once


@pytest.mark.parametrize("k", [1, 4])
def test_int8_decodes_grammatical_candidates(tmp_path, example_blocks, k: int) -> None:
    """int8 weights (MODEL_PRECISION=int8) still decode through the grammar mask; the
    verifier judges their candidates like any other."""
    from tasmopt.model.checkpoint import for_inference

    torch.manual_seed(0)
    model = TasmModel(tiny_config()).eval()
    quantized = for_inference(model, "int8")
    assert quantized is not model
    assert for_inference(model, "float32") is model
    with pytest.raises(ValueError, match="float32 or int8"):
        for_inference(model, "bf16")  # type: ignore[arg-type]  # a wrong value on purpose
    datas, imms = zip(*(block_data(o, e, n, b, max_len=64) for o, e, n, b in example_blocks[:6]))
    hyps = beam_search(quantized, batch_graphs(list(datas)), list(imms), k=k)
    assert all(len(h) <= k for h in hyps) and any(hyps)


def test_the_measured_rates_place_the_models_tier(tmp_path) -> None:
    """The model's tier runs before the search's under a deadline only where the checkpoint's
    measured rates say it saves more per second (`tasmopt eval --marginal N --record`)."""
    from tasmopt.train.marginal import record_rates

    torch.manual_seed(0)
    save_checkpoint(TasmModel(tiny_config()), tmp_path / "m", "m-test", metrics={"x": 1})
    assert not load_model_source(tmp_path / "m").ahead_of_search  # type: ignore[attr-defined]  # ModelSource
    rates = {"model_first": True, "search": {"cycles_per_s": 1.0}, "model": {"cycles_per_s": 2.0}}
    record_rates(tmp_path / "m", rates)
    assert json.loads((tmp_path / "m/metrics.json").read_text())["x"] == 1
    assert load_model_source(tmp_path / "m").ahead_of_search  # type: ignore[attr-defined]  # ModelSource
    record_rates(tmp_path / "m", {**rates, "model_first": False})
    assert not load_model_source(tmp_path / "m").ahead_of_search  # type: ignore[attr-defined]  # ModelSource
