"""Expert iteration end to end (issue 35 item 1), on real PostgreSQL: a background deepening
writes what its search found into the replay buffer; a Stage 3 micro-finetune learns the
blocks it improved (copies of the baseline are not targets); the regression guard admits the
new checkpoint; and the new model's cold answer on the module, decoding alone, takes fewer
cycles than the old model's. A tiny model and a few dozen steps: the slow search's result is
carried into the model's one-pass decode."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_deepen_replay import SETTINGS, _Putting
from test_function_cache import OPTS

from service.core.compiling import DbBreaker
from service.core.deepen import DEEPEN_KIND, replay_writer, run_payload
from service.core.spool import Spool
from tasmopt.model.checkpoint import save_checkpoint
from tasmopt.model.config import ModelConfig
from tasmopt.model.model import TasmModel
from tasmopt.model.source import load_model_source
from tasmopt.optimizer import compile as compile_tir
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.store import (
    describe_checkpoint,
    get_checkpoint,
    make_engine,
    make_sessionmaker,
    promote_checkpoint,
    register_checkpoint,
)
from tasmopt.store.trajectories import replay_blocks
from tasmopt.train.online import FinetuneConfig, micro_finetune

pytestmark = pytest.mark.slow

TINY = ModelConfig(
    d_model=64, gnn_layers=1, gnn_heads=2, d_edge=8, dec_layers=2, dec_heads=2, d_ff=128
)
MODULE = "std_crypto_auth"


def _model_only_cycles(checkpoint: Path, tir, baseline) -> int:
    """The module answered by the model alone (greedy, one pass per block: the fast path),
    cold: no result cache, nothing memoized by the model source. Decoded to the end: this
    two-layer model, finetuned for 120 steps, hardly copies the baseline (15 passes for four
    blocks of at most 21 tokens), while the pass budget of the service
    (`GREEDY_MAX_PASSES`) is set for trained checkpoints, which finish every valid
    hypothesis of 524 held-out blocks within it; what this test shows is the learning."""
    src = load_model_source(checkpoint, k=1, max_passes=None)
    result = compile_tir(
        tir,
        baseline,
        options=CompileOptions(sources=("model",), use_cache=False, seed=0),
        sources=SourceSet([src]),
    )
    return result.cycles


def test_deepen_finetune_guard_and_a_better_cold_answer(trident_std, pg_database_factory, tmp_path):
    engine = make_engine(pg_database_factory())
    factory = make_sessionmaker(engine)
    torch.manual_seed(0)
    prod = save_checkpoint(TasmModel(TINY), tmp_path / "tiny-v1", "tiny-v1")
    with factory() as s, s.begin():
        register_checkpoint(s, info=describe_checkpoint(prod, store=tmp_path))
        promote_checkpoint(s, version="tiny-v1")

    # 1. background deepening of every function of the module: its judged blocks go into
    #    the replay buffer
    mod = trident_std[MODULE]
    cache = _Putting()
    cold = compile_tir(mod["tir"], mod["compiler_tasm"], options=OPTS, cache=cache)
    payload = {
        "kind": DEEPEN_KIND,
        "tir": mod["tir"],
        "baseline_tasm": mod["compiler_tasm"],
        "functions": {e.name: e.key for e in cold.cache_entries},
        "isa": "release",
        "witnesses": 16,
        "seed": 0,
    }
    run_payload(
        payload,
        cache=cache,  # type: ignore[arg-type]  # the ResultCache calls this test makes
        sources=None,
        settings=SETTINGS,
        seed=0,
        replay=replay_writer(factory, Spool(tmp_path / "spool"), DbBreaker(cooldown_s=60)),
    )
    with factory() as s:
        improved = [b for b in replay_blocks(s) if b.best_cycles < b.baseline_cycles]
    assert improved, "the deepening found nothing to learn"

    # 2. Stage 3 on the replay buffer; the guard decodes the labeled online results
    cfg = FinetuneConfig(
        steps=120, batch_size=8, lr=3e-3, warmup=5, guard_k=2, device="cpu", history_share=0.0
    )
    with factory() as s, s.begin():
        out = micro_finetune(s, production=prod, model_store=tmp_path, cfg=cfg)
    assert out.outcome == "candidate", out.detail
    with factory() as s:
        assert get_checkpoint(s, version=out.version).status == "candidate"
    after, before = out.detail["guard_after"], out.detail["guard_before"]
    assert after["mean_reduction"] > before["mean_reduction"]

    # 3. the new model's cold answer, decoding alone, is cheaper than the old one's
    old = _model_only_cycles(prod, mod["tir"], mod["compiler_tasm"])
    new = _model_only_cycles(tmp_path / out.version, mod["tir"], mod["compiler_tasm"])
    assert new < old, (new, old)
    engine.dispose()
