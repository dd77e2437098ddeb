"""Stage 3: every judged candidate lands in the replay buffer with its block's model input,
replay prefers rewarding and recent blocks, and a micro-finetune is guarded."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from tasmopt.model.checkpoint import read_config, save_checkpoint
from tasmopt.model.config import ModelConfig
from tasmopt.model.model import TasmModel
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import default_sources
from tasmopt.report import CompileOptions, reward
from tasmopt.sources import BlockTask
from tasmopt.store import (
    BuildResult,
    Checkpoint,
    Trajectory,
    build_records,
    describe_checkpoint,
    get_checkpoint,
    insert_build_results,
    make_engine,
    make_sessionmaker,
    promote_checkpoint,
    prune_trajectories,
    register_checkpoint,
    replay_blocks,
)
from tasmopt.store.models import AdminAction
from tasmopt.store.records import rows_from_json, rows_to_json
from tasmopt.tasm.parser import parse_instructions
from tasmopt.train import online
from tasmopt.train.online import (
    FinetuneConfig,
    guard_refusal,
    micro_finetune,
    prioritized_indices,
    replay_rows,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class ScriptedModel:
    """A stand-in model source: proposes, per block, its baseline with one ``push 0 pop 1``
    pair removed or added, with made-up log-probabilities it remembers."""

    name = "model"
    version = "scripted-v1"

    def __init__(self) -> None:
        self.logps: dict[tuple, float] = {}

    def propose(self, tasks, options):
        out = []
        for t in tasks:
            base = [str(i) for i in t.baseline]
            cands = [base + ["push 0", "pop 1"], base[:-1] if len(base) > 1 else base]
            out.append([list(parse_instructions("\n".join(c))) for c in cands])
            for k, c in enumerate(cands):
                self.logps[(t.tir_hash, tuple(c))] = -1.5 - k
        return out

    def logprob(self, task: BlockTask, candidate) -> float | None:
        return self.logps.get((task.tir_hash, tuple(str(i) for i in candidate)))


@pytest.fixture()
def db(pg_database_factory):
    engine = make_engine(pg_database_factory())
    yield make_sessionmaker(engine)
    engine.dispose()


def _served(name: str = "u32_ops"):
    sources = default_sources()
    sources.add(ScriptedModel())
    tir = json.loads((EXAMPLES / f"{name}.json").read_text())["tir"]
    return compile_tir(
        tir,
        options=CompileOptions(sources=("rules", "model"), inline=False, use_cache=False),
        sources=sources,
    )


def test_every_judged_candidate_is_stored_with_its_block_context(db):
    result = _served()
    judged = sum(len(t.candidates) for t in result.trajectories)
    assert judged > 0
    rows = build_records(result, uuid.uuid4())
    rows = rows_from_json(json.loads(json.dumps(rows_to_json(rows))))  # through the spool
    with db() as s, s.begin():
        insert_build_results(s, rows=rows)
        insert_build_results(s, rows=rows)  # idempotent: trajectories are not doubled
    with db() as s:
        steps = list(s.scalars(select(Trajectory)))
        assert len(steps) == judged
        by_id = {r.id: r for r in s.scalars(select(BuildResult))}
        for t in steps:
            block = by_id[t.build_result_id]
            assert block.block_index is not None and block.context is not None
            assert set(block.context) == {
                "tir",
                "entry_depth",
                "net_effect",
                "baseline",
                "baseline_cycles",
            }
            assert t.reward == pytest.approx(reward(t.accepted, t.cycles, t.baseline_cycles))
            if t.source == "model":
                assert t.logprob is not None and t.logprob < 0
                assert t.model_version == "scripted-v1"
            else:
                assert t.logprob is None
        # the added `push 0 pop 1` is equivalent (accepted, dearer); dropping the last line
        # of a block is not (rejected with a reason)
        model = [t for t in steps if t.source == "model"]
        assert any(t.accepted for t in model) and any(not t.accepted for t in model)
        assert all(t.reason and t.reason_class for t in model if not t.accepted)


def test_trajectories_are_not_part_of_the_response():
    result = _served()
    assert "trajectories" not in json.dumps(result.to_dict())


def _step(session, *, accepted: bool, cycles: int, base: int, when: datetime, lines=("push 1",)):
    bid = uuid.uuid4()
    session.add(
        BuildResult(
            id=bid,
            request_id=uuid.uuid4(),
            tir_hash="f" * 64,
            function="f",
            block_index=0,
            tasm="\n".join(lines),
            valid=True,
            clock_cycles=cycles,
            compiler_cycles=base,
            table_heights={},
            fallback_used=False,
            source="rules",
            created_at=when,
            latency_ms=1.0,
            context={
                "tir": [],
                "entry_depth": 0,
                "net_effect": 1,
                "baseline": ["push 1", "push 0", "add"],
                "baseline_cycles": base,
            },
        )
    )
    session.flush()
    session.add(
        Trajectory(
            id=uuid.uuid4(),
            build_result_id=bid,
            tir_hash="f" * 64,
            source="search",
            tasm="\n".join(lines),
            accepted=accepted,
            cycles=cycles,
            baseline_cycles=base,
            heights={},
            reward=reward(accepted, cycles, base),
            created_at=when,
        )
    )
    session.flush()
    return bid


def test_replay_takes_the_best_verified_program_and_never_a_rejected_one(db):
    now = datetime.now(UTC)
    with db() as s, s.begin():
        good = _step(s, accepted=True, cycles=1, base=3, when=now)
        bad = _step(s, accepted=False, cycles=1, base=3, when=now, lines=("push 2",))
    with db() as s:
        blocks = {b.build_result_id: b for b in replay_blocks(s)}
    assert blocks[good].best == ["push 1"] and blocks[good].best_cycles == 1
    assert blocks[bad].best == ["push 1", "push 0", "add"]  # rejected: the baseline stays
    rows = replay_rows(list(blocks.values()))
    assert all(r.target_cycles <= r.baseline_cycles for r in rows)


def test_prioritized_replay_prefers_reward_and_recency(db):
    now = datetime.now(UTC)
    with db() as s, s.begin():
        saving = _step(s, accepted=True, cycles=1, base=3, when=now)
        copy = _step(s, accepted=True, cycles=3, base=3, when=now)
        old = _step(s, accepted=True, cycles=1, base=3, when=now - timedelta(hours=96))
    with db() as s:
        blocks = replay_blocks(s)
    picks = prioritized_indices(blocks, 6000, now=now, half_life_h=24, rng=random.Random(1))
    count = {b.build_result_id: 0 for b in blocks}
    for i in picks:
        count[blocks[i].build_result_id] += 1
    # weights 5/3 : 1 : 5/3 * 2^-4
    assert count[saving] > 1.4 * count[copy] > 10 * count[old] > 0


def test_prune_keeps_the_newest(db):
    now = datetime.now(UTC)
    with db() as s, s.begin():
        for k in range(5):
            _step(s, accepted=True, cycles=1, base=2, when=now - timedelta(minutes=k))
        assert prune_trajectories(s, keep=2) == 3
    with db() as s:
        assert len(list(s.scalars(select(Trajectory)))) == 2


def test_guard_rules():
    base = {"blocks": 10, "validity_excl_copies": 0.5, "mean_reduction": 0.1}
    assert guard_refusal(base, {**base, "validity_excl_copies": 0.49}) is None
    assert "validity" in guard_refusal(base, {**base, "validity_excl_copies": 0.47})
    assert "reduction" in guard_refusal(base, {**base, "mean_reduction": 0.099})
    assert guard_refusal(base, {**base, "mean_reduction": 0.2}) is None
    assert "no guard blocks" in guard_refusal({"blocks": 0}, {"blocks": 0})


# -- micro-finetunes on a tiny model ----------------------------------------------------------

TINY = ModelConfig(
    d_model=32, gnn_layers=1, gnn_heads=2, d_edge=8, dec_layers=1, dec_heads=2, d_ff=64
)


@pytest.fixture()
def store(tmp_path, db):
    """A model store with a tiny production checkpoint, and a served module in the replay
    buffer."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    prod = save_checkpoint(TasmModel(TINY), tmp_path / "tiny-v1", "tiny-v1")
    with db() as s, s.begin():
        s.execute(delete(Checkpoint))
        register_checkpoint(s, info=describe_checkpoint(prod, store=tmp_path))
        promote_checkpoint(s, version="tiny-v1")
        insert_build_results(s, rows=build_records(_served(), uuid.uuid4()))
    return tmp_path, prod


def _cfg(**kw) -> FinetuneConfig:
    return FinetuneConfig(steps=3, batch_size=4, guard_k=2, device="cpu", **kw)


def test_a_micro_finetune_writes_registers_and_guards_a_checkpoint(store, db, example_rows):
    root, prod = store
    guard = [r for r in example_rows if r.split == "holdout"][:6]
    with db() as s, s.begin():
        out = micro_finetune(s, production=prod, model_store=root, cfg=_cfg(), guard=guard)
    assert out.outcome in ("candidate", "rejected") and out.steps == 3
    assert read_config(root / out.version)["training"]["stage"] == 3
    assert out.detail["guard_before"]["blocks"] == out.detail["guard_after"]["blocks"] > 0
    with db() as s:
        row = get_checkpoint(s, version=out.version)
        assert row.status == out.outcome and row.parent == "tiny-v1"
        actions = [a.action for a in s.scalars(select(AdminAction))]
    assert "register" in actions
    assert out.line().startswith(f"finetune: outcome={out.outcome} steps=3 validity_before=")


def test_the_guard_rejects_a_damaged_checkpoint(store, db, example_rows, monkeypatch):
    root, prod = store
    scores = iter(
        [
            {"blocks": 6, "validity_excl_copies": 0.5, "mean_reduction": 0.1},  # production
            {"blocks": 6, "validity_excl_copies": 0.0, "mean_reduction": 0.0},  # damaged
        ]
    )
    monkeypatch.setattr(online, "guard_metrics", lambda model, rows, cfg: next(scores))
    with db() as s, s.begin():
        out = micro_finetune(s, production=prod, model_store=root, cfg=_cfg(auto_promote=True))
    assert out.outcome == "rejected" and "validity" in out.detail["guard"]
    with db() as s:
        assert get_checkpoint(s, version=out.version).status == "rejected"
        assert get_checkpoint(s, version="tiny-v1").status == "production"  # untouched


def test_a_passing_checkpoint_is_promoted_with_auto_promote(store, db, monkeypatch):
    root, prod = store
    same = {"blocks": 6, "validity_excl_copies": 0.5, "mean_reduction": 0.1}
    monkeypatch.setattr(online, "guard_metrics", lambda model, rows, cfg: dict(same))
    with db() as s, s.begin():
        out = micro_finetune(s, production=prod, model_store=root, cfg=_cfg(auto_promote=True))
    assert out.outcome == "promoted"
    with db() as s:
        assert get_checkpoint(s, version=out.version).status == "production"
        assert get_checkpoint(s, version="tiny-v1").status == "archived"


def test_no_replay_means_no_new_results(tmp_path, db):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    prod = save_checkpoint(TasmModel(TINY), tmp_path / "tiny-v1", "tiny-v1")
    with db() as s, s.begin():
        out = micro_finetune(s, production=prod, model_store=tmp_path, cfg=_cfg())
    assert out.outcome == "no_new_results" and out.version is None


def test_phase_b_counts_only_what_the_model_proposed_and_that_saved_cycles(db):
    from tasmopt.store import buffer_counts
    from tasmopt.train.phase import compute_phase, phase_b_figures, wilson

    now = datetime.now(UTC)
    with db() as s, s.begin():
        s.execute(delete(Trajectory))
        s.execute(delete(BuildResult))
        ids = [_step(s, accepted=True, cycles=c, base=4, when=now) for c in (1, 2, 4, 4)]
        rows = {r.id: r for r in s.scalars(select(BuildResult))}
        # served: model cheaper (counts), model equal cost (a copy: no), rules cheaper (no),
        # model but a fallback (no)
        for bid, (source, cycles, fallback) in zip(
            ids, [("model", 1, False), ("model", 4, False), ("rules", 2, False), ("model", 2, True)]
        ):
            rows[bid].source, rows[bid].clock_cycles, rows[bid].fallback_used = (
                source,
                cycles,
                fallback,
            )
        for t in s.scalars(select(Trajectory)):
            t.source = "model"
        s.add(
            Trajectory(
                id=uuid.uuid4(),
                build_result_id=ids[0],
                tir_hash="f" * 64,
                source="model",
                tasm="pop 1",
                accepted=False,
                cycles=0,
                baseline_cycles=4,
                heights={},
                reward=reward(False, 0, 4),
                created_at=now,
            )
        )
    with db() as s:
        counts = buffer_counts(s)
    assert counts["online"] == 1
    assert counts["model"]["judged"] == 5 and counts["model"]["accepted"] == 4
    figs = phase_b_figures(counts)
    assert figs["validity"]["value"] == pytest.approx(0.8)
    lo, hi = figs["validity"]["ci90"]
    assert lo < 0.8 < hi and (lo, hi) == wilson(4, 5)
    assert figs["beats_compiler_of_valid"]["value"] == pytest.approx(0.5)  # 1 and 2 of 4
    assert figs["median_reduction"]["value"] == pytest.approx(0.25)  # of 0.75, 0.5, 0, 0
    phase, detail = compute_phase(counts, {"holdout_validity": 0.9, "holdout_validity_ci_low": 0.8})
    assert phase == "A" and detail["online_results"] == 1  # 100 needed
    assert detail["phase_b"]["validity"]["target"] == 0.95


def test_tasmopt_finetune_on_an_empty_embedded_home(tmp_path, monkeypatch):
    # a newcomer's first run: embedded database, the shipped checkpoint bootstrapped, nothing
    # served yet: one line, no training, no guard compile
    import shutil

    from click.testing import CliRunner

    from tasmopt.cli import main

    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "model_store", tmp_path / "model_store")
    for var in ("DATABASE_URL", "REDIS_URL", "MODEL_STORE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TASMOPT_HOME", str(tmp_path))
    res = CliRunner().invoke(main, ["finetune", "--steps", "3"])
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1] == (
        "finetune: outcome=no_new_results steps=0 validity_before=n/a validity_after=n/a"
    )


def test_copies_of_the_baseline_are_not_targets(tmp_path, db):
    """Issue 35: a replay block whose best verified program is the baseline teaches nothing;
    with only such blocks there is nothing to learn."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    prod = save_checkpoint(TasmModel(TINY), tmp_path / "tiny-v1", "tiny-v1")
    now = datetime.now(UTC)
    with db() as s, s.begin():
        s.execute(delete(Trajectory))
        s.execute(delete(BuildResult))
        _step(s, accepted=True, cycles=3, base=3, when=now)  # accepted, but no cheaper
        _step(s, accepted=False, cycles=1, base=3, when=now, lines=("push 2",))  # refused
    with db() as s, s.begin():
        out = micro_finetune(s, production=prod, model_store=tmp_path, cfg=_cfg())
    assert out.outcome == "no_new_results" and out.steps == 0
    assert out.detail == {"replay_blocks": 2, "improved_blocks": 0}
