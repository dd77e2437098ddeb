"""Deepening feeds the replay buffer (issue 35 item 1, `service.core.deepen.replay_records`):
the blocks a background deepening judged are stored with their model input and candidates,
so that Stage 3 learns the best program the slow search found. On real PostgreSQL; with the
database down the rows are spooled and the deepening's outcome is unchanged."""

from __future__ import annotations

from test_function_cache import OPTS, DictCache

from service.core.compiling import DbBreaker
from service.core.config import Settings
from service.core.deepen import DEEPEN_KIND, replay_records, replay_writer, run_payload
from service.core.spool import Spool
from tasmopt.optimizer import compile as compile_tir
from tasmopt.store import BuildResult, make_engine, make_sessionmaker
from tasmopt.store.trajectories import replay_blocks


class _Putting(DictCache):
    def put(self, entries):
        self.store(entries)
        return {e.key: "inserted" for e in entries}


def _payload(trident_std, cache) -> tuple[dict, dict[str, str]]:
    tir = trident_std["lock_multisig"]["tir"]
    cold = compile_tir(tir, options=OPTS, cache=cache)
    cache.store(cold.cache_entries)
    keys = {e.name: e.key for e in cold.cache_entries}
    wanted = {"verify_key": keys["verify_key"]}
    return {
        "kind": DEEPEN_KIND,
        "tir": tir,
        "baseline_tasm": None,
        "functions": wanted,
        "isa": "release",
        "witnesses": 16,
        "seed": OPTS.seed,
    }, keys


SETTINGS = Settings(deepen_sources=["rules", "search"], deepen_budget_s=0.2)


def _deepen(trident_std, replay) -> dict[str, str]:
    """Deepen lock_multisig's ``verify_key`` with ``replay`` as the replay writer."""
    cache = _Putting()
    payload, _ = _payload(trident_std, cache)
    return run_payload(
        payload,
        cache=cache,  # type: ignore[arg-type]  # the ResultCache calls this test makes
        sources=None,
        settings=SETTINGS,
        seed=3,
        replay=replay,
    )


def test_replay_records_are_the_judged_blocks_of_the_deepened_functions(trident_std) -> None:
    tir = trident_std["lock_multisig"]["tir"]
    result = compile_tir(tir, options=OPTS)
    rows = replay_records(result, ["verify_key"])
    judged = {
        t.block_index for t in result.trajectories if t.function == "verify_key" and t.candidates
    }
    assert rows and {r["block_index"] for r in rows} == judged
    assert all(r["function"] == "verify_key" and r["context"]["baseline"] for r in rows)
    assert len({r["request_id"] for r in rows}) == 1
    assert replay_records(result, []) == []


def test_a_deepening_writes_its_judged_blocks_to_the_replay_buffer(
    trident_std, pg_database_factory, tmp_path
) -> None:
    engine = make_engine(pg_database_factory())
    factory = make_sessionmaker(engine)
    spool = Spool(tmp_path / "spool")
    out = _deepen(trident_std, replay_writer(factory, spool, DbBreaker(cooldown_s=60)))
    assert out == {"verify_key": "inserted"}
    with factory() as s:
        stored = list(s.query(BuildResult))
        blocks = replay_blocks(s)
    assert stored and all(r.function == "verify_key" and r.block_index is not None for r in stored)
    assert len(blocks) == len(stored)
    for b in blocks:  # the target is the cheapest accepted program: never worse than the baseline
        assert b.best_cycles <= b.baseline_cycles and b.judged >= 1
    assert spool.pending_rows() == 0
    engine.dispose()


def test_with_the_database_down_the_replay_rows_are_spooled(trident_std, tmp_path) -> None:
    dead = make_sessionmaker(
        make_engine("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1)
    )
    spool = Spool(tmp_path / "spool")
    out = _deepen(trident_std, replay_writer(dead, spool, DbBreaker(cooldown_s=60)))
    assert out == {"verify_key": "inserted"}
    assert spool.pending_rows() > 0


def test_a_failing_replay_writer_changes_no_outcome(trident_std) -> None:
    def broken(rows):
        raise RuntimeError("boom")

    out = _deepen(trident_std, broken)
    assert out == {"verify_key": "inserted"}
