"""The per-function result cache inside the optimizer (`tasmopt.optimizer.compile`'s
``cache``): what a key depends on, what a hit serves, what is stored, and that a stored
program that is wrong is caught by a spot check (`recheck`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tasmopt.deadline import Deadline
from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import keys as keys_module
from tasmopt.optimizer import recheck
from tasmopt.optimizer.keys import function_keys
from tasmopt.optimizer.prepare import decode_tir
from tasmopt.report import CachedFunction, CompileOptions, FunctionReport
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CALL = json.loads((EXAMPLES / "call.json").read_text())["tir"]
#: examples/lock_timelock.json (trident-std): the rules improve its one function, `main`.
TIMELOCK = json.loads((EXAMPLES / "lock_timelock.json").read_text())["tir"]
OPTS = CompileOptions(sources=("rules",))


class DictCache(dict):
    """A `FunctionCache` in memory; counts lookups."""

    lookups = 0

    def get_many(self, keys):
        self.lookups += 1
        return {k: self[k] for k in keys if k in self}

    def store(self, entries):
        for e in entries:
            self[e.key] = e

    def update_as_returned(self, remeasured):
        """As `service.core.result_cache.ResultCache.update_as_returned`."""
        n = 0
        for key, (lines, as_returned) in remeasured.items():
            if key in self and self[key].lines == lines:
                e = self[key]
                self[key] = replace(e, report={**e.report, "as_returned": as_returned})
                n += 1
        return n


def _keys(tir, baseline=None, options=OPTS):
    ops = decode_tir(tir)
    low = lower(ops, isa=options.isa)
    ours = ModuleText.from_lowering(low)
    labels = {n: f.label for n, f in ours.functions.items()}
    client = ModuleText.from_text(baseline, labels) if baseline is not None else None
    return function_keys(ops, low, ours, client, options)


def _output(tasm: str, inputs: list[int]) -> list[int]:
    from tasmopt.tasm.parser import parse

    # the module text starts with its first function; enter at `main` like the toolchain
    r = run(parse("call __main\nhalt\n" + tasm), VmInput(public_input=inputs))
    assert r.error is None, r.error
    return list(r.public_output)


def test_a_hit_serves_the_stored_program_without_working_on_it():
    cache = DictCache()
    cold = compile_tir(CALL, options=OPTS, cache=cache)
    assert {f.cache for f in cold.functions} == {"miss"}
    assert cold.cache_entries and all(
        e.key == f.cache_key for e, f in zip(cold.cache_entries, cold.functions)
    )
    cache.store(cold.cache_entries)
    warm = compile_tir(CALL, options=OPTS, cache=cache)
    assert {f.cache for f in warm.functions} == {"hit"}
    assert warm.tasm == cold.tasm
    assert warm.cache_entries == []  # nothing computed, nothing to store
    assert [f.cycles for f in warm.functions] == [f.cycles for f in cold.functions]
    assert all(not f.blocks or f.blocks == c.blocks for f, c in zip(warm.functions, cold.functions))
    assert "candidates" not in warm.timings or warm.timings["candidates"] < 0.01
    assert _output(warm.tasm, [3, 4]) == _output(cold.tasm, [3, 4]) == [25]


def test_use_cache_false_neither_reads_nor_stores():
    cache = DictCache()
    cache.store(compile_tir(CALL, options=OPTS, cache=cache).cache_entries)
    r = compile_tir(CALL, options=replace(OPTS, use_cache=False), cache=cache)
    assert {f.cache for f in r.functions} == {"off"} and r.cache_entries == []
    assert cache.lookups == 1


def test_a_key_changes_with_everything_the_answer_depends_on(monkeypatch):
    base = _keys(CALL)
    assert set(base) == {"square", "sum_of_squares", "main"}
    assert _keys(CALL) == base  # deterministic
    # a callee's TIR: its callers' keys change, functions that do not reach it keep theirs
    changed = json.loads(json.dumps(CALL))
    i = changed.index("Mul")
    changed[i] = "Add"
    k = _keys(changed)
    assert k["square"] != base["square"]
    assert k["sum_of_squares"] != base["sum_of_squares"] and k["main"] != base["main"]
    # witnesses, ISA variant and the client's baseline text
    assert _keys(CALL, options=replace(OPTS, witnesses=32))["square"] != base["square"]
    assert _keys(CALL, options=replace(OPTS, isa="head"))["square"] != base["square"]
    ours = lower(decode_tir(CALL)).text()
    with_client = _keys(CALL, ours)
    assert with_client["square"] != base["square"]
    assert (
        _keys(CALL, ours.replace("mul", "mul // same program"))["square"] != with_client["square"]
    )
    # a new verifier version invalidates every entry
    monkeypatch.setattr(keys_module, "VERIFIER_VERSION", "next")
    assert not set(_keys(CALL).values()) & set(base.values())


def test_a_function_of_another_module_is_not_disturbed_by_its_neighbours():
    """Only the call closure enters a key: adding an unrelated function keeps the others'."""
    extra = [{"FnStart": "unused"}, {"Push": 7}, "Return", "FnEnd"]
    assert _keys(CALL + extra)["square"] == _keys(CALL)["square"]


def test_a_new_verifier_version_misses_the_old_entries(monkeypatch):
    cache = DictCache()
    cache.store(compile_tir(CALL, options=OPTS, cache=cache).cache_entries)
    monkeypatch.setattr(keys_module, "VERIFIER_VERSION", "next")
    r = compile_tir(CALL, options=OPTS, cache=cache)
    assert {f.cache for f in r.functions} == {"miss"}


def test_work_cut_by_the_deadline_is_stored_as_a_placeholder_that_serves_the_baseline(
    trident_std,
):
    d = trident_std["std_crypto_sha256"]
    cache = DictCache()
    opts = replace(OPTS, sources=("rules", "search"), deadline=Deadline(0.05))
    r = compile_tir(d["tir"], d["compiler_tasm"], options=opts, cache=cache)
    cut = {f.name for f in r.functions if f.reason and "deadline" in f.reason}
    assert cut, "a 50 ms deadline must cut some of sha256's 60 functions"
    assert all(f.fallback and f.status == "improving" for f in r.functions if f.name in cut)
    holders = {e.name: e for e in r.cache_entries if not e.measured}
    assert set(holders) == cut
    assert all(e.lines is None and not e.final and e.cycles == -1 for e in holders.values())
    cache.store(r.cache_entries)
    again = compile_tir(
        d["tir"], d["compiler_tasm"], options=replace(opts, deadline=None), cache=cache
    )
    served = {f.name: f for f in again.functions}
    for name in cut:  # the baseline again, at once, still improving: deepening will measure it
        f = served[name]
        assert f.cache == "hit" and f.fallback and f.status == "improving"
        assert "being deepened" in (f.reason or "")
    labels = {
        n: f.label
        for n, f in ModuleText.from_lowering(lower(decode_tir(d["tir"]))).functions.items()
    }
    client = ModuleText.from_text(d["compiler_tasm"], labels)
    out = ModuleText.from_text(again.tasm, labels)
    for name in cut:
        assert out.section_lines(name) == client.section_lines(name)


def test_status_is_final_only_at_the_deepening_budget():
    low = compile_tir(CALL, options=replace(OPTS, search_budget_s=0.1, final_budget_s=1.0))
    high = compile_tir(CALL, options=replace(OPTS, search_budget_s=1.0, final_budget_s=1.0))
    with_blocks = [f.name for f in low.functions if f.blocks]
    assert with_blocks
    assert all(f.status == "improving" for f in low.functions if f.name in with_blocks)
    assert all(f.status == "final" for f in high.functions)


def test_only_works_on_the_named_functions_and_serves_the_others_from_the_cache():
    """`CompileOptions.only` (deepening): the named functions are computed afresh even when
    the cache holds them; the others are served from the cache (so the named ones are
    measured with their callers and callees as they are returned), else passed through."""
    cache = DictCache()
    cold = compile_tir(CALL, options=OPTS, cache=cache)
    cache.store(cold.cache_entries)
    r = compile_tir(CALL, options=replace(OPTS, only=frozenset({"square"})), cache=cache)
    by = {f.name: f for f in r.functions}
    assert by["square"].cache == "miss"  # computed afresh
    assert [e.name for e in r.cache_entries] == ["square"]
    assert by["main"].cache == "hit" and not by["main"].fallback
    assert r.tasm == cold.tasm
    del cache[next(e.key for e in cold.cache_entries if e.name == "main")]
    r = compile_tir(CALL, options=replace(OPTS, only=frozenset({"square"})), cache=cache)
    by = {f.name: f for f in r.functions}
    assert by["main"].fallback and "not among the functions" in (by["main"].reason or "")


def test_costs_of_a_hit_follow_the_closure_it_is_returned_in(trident_std):
    """A hit reuses its costs as returned where its callees' returned code is the one it was
    measured with; otherwise it is measured again as returned, and where there is no time
    for that, it reports its own costs and says so. lock_multisig: the rules improve
    `verify_key` and its caller `main`."""
    tir = trident_std["lock_multisig"]["tir"]
    cache = DictCache()
    cold = compile_tir(tir, options=OPTS, cache=cache)
    cache.store(cold.cache_entries)
    warm = compile_tir(tir, options=OPTS, cache=cache)
    assert [f.cycles for f in warm.functions] == [f.cycles for f in cold.functions]
    callee = next(e for e in cold.cache_entries if e.name == "verify_key")
    assert callee.lines is not None
    cache[callee.key] = replace(callee, lines=None)  # now the callee is returned unimproved
    cold_main = next(f for f in cold.functions if f.name == "main")
    r = compile_tir(tir, options=OPTS, cache=cache)
    main = next(f for f in r.functions if f.name == "main")
    assert main.cache == "hit" and not main.notes
    assert main.cycles == (cold_main.own_cycles or cold_main.cycles)  # measured as returned
    late = compile_tir(tir, options=replace(OPTS, deadline=Deadline(0)), cache=cache)
    main = next(f for f in late.functions if f.name == "main")
    assert main.cache == "hit" and any("baseline code" in n for n in main.notes)
    assert main.own_cycles == main.cycles
    # the measurement comes back for the caller to write into the entry; written back, the
    # next hit reuses it even with no time left to measure
    main_key = next(e.key for e in cold.cache_entries if e.name == "main")
    assert set(r.remeasured) == {main_key} and not late.remeasured
    lines, as_returned = r.remeasured[main_key]
    assert lines == cache[main_key].lines
    assert as_returned["cycles"] == (cold_main.own_cycles or cold_main.cycles)
    stored = cache[main_key]
    cache[main_key] = replace(stored, report={**stored.report, "as_returned": as_returned})
    again = compile_tir(tir, options=replace(OPTS, deadline=Deadline(0)), cache=cache)
    main = next(f for f in again.functions if f.name == "main")
    assert main.cache == "hit" and not main.notes and not again.remeasured
    assert main.cycles == as_returned["cycles"]


def _callee_unimproved(tir, cache):
    """lock_multisig compiled into ``cache``, then its callee ``verify_key`` stored as
    returned unimproved, so that ``main``'s stored costs as returned are stale: (the cold
    result, the callee's original entry, main's key)."""
    cold = compile_tir(tir, options=OPTS, cache=cache)
    cache.store(cold.cache_entries)
    callee = next(e for e in cold.cache_entries if e.name == "verify_key")
    main_key = next(e.key for e in cold.cache_entries if e.name == "main")
    cache[callee.key] = replace(callee, lines=None)
    return cold, callee, main_key


def test_a_deepening_that_improves_a_callee_measures_its_callers_as_returned(trident_std):
    """After a deepening stores new code for a callee, its callers' entries get their costs
    as returned with it (`service.core.deepen._measure_as_returned`): the next request is
    served from the cache without measuring anything, even with no time left."""
    from service.core.config import Settings
    from service.core.deepen import DEEPEN_KIND, run_payload

    class Putting(DictCache):
        def put(self, entries):
            self.store(entries)
            return {e.key: "inserted" for e in entries}

    tir = trident_std["lock_multisig"]["tir"]
    cache = Putting()
    cold, callee, main_key = _callee_unimproved(tir, cache)  # the callee returned unimproved...
    stale = compile_tir(tir, options=OPTS, cache=cache)
    assert cache.update_as_returned(stale.remeasured) == 1  # ...and main measured with it
    main_before = cache[main_key].report["as_returned"]
    payload = {
        "kind": DEEPEN_KIND,
        "tir": tir,
        "baseline_tasm": None,
        "functions": {"verify_key": callee.key},
        "isa": "release",
        "witnesses": 16,
        "seed": OPTS.seed,
    }
    settings = Settings(deepen_sources=["rules"], deepen_budget_s=0.2)
    out = run_payload(payload, cache=cache, sources=None, settings=settings, seed=3)  # type: ignore[arg-type]  # the ResultCache calls this test makes
    assert out == {"verify_key": "inserted"}
    after = cache[main_key].report["as_returned"]
    assert after["closure"] != main_before["closure"]  # measured with the new callee code
    late = compile_tir(tir, options=replace(OPTS, deadline=Deadline(0)), cache=cache)
    by = {f.name: f for f in late.functions}
    assert by["main"].cache == "hit" and not by["main"].notes and not late.remeasured
    assert by["main"].cycles == after["cycles"]
    assert by["main"].cycles == next(f.cycles for f in cold.functions if f.name == "main")


def test_a_hit_with_no_time_to_be_measured_is_measured_in_the_background(trident_std):
    """A hit whose costs as returned a request had no time to measure is listed in
    `CompileResult.unmeasured_hits`; the follow-up's REMEASURE payload (`run_payload`)
    measures it as returned and writes it back, so that the next request in the same
    context is served without measuring and without the note, even with no time left.
    lock_multisig: the callee `verify_key` returned unimproved makes `main`'s stored costs
    stale."""
    from service.core.config import Settings
    from service.core.deepen import REMEASURE, run_payload
    from tasmopt.optimizer.steps import STALE_COSTS

    tir = trident_std["lock_multisig"]["tir"]
    cache = DictCache()
    _, _, main_key = _callee_unimproved(tir, cache)
    late = compile_tir(tir, options=replace(OPTS, deadline=Deadline(0)), cache=cache)
    assert late.unmeasured_hits == {"main": main_key} and not late.remeasured
    assert STALE_COSTS in next(f for f in late.functions if f.name == "main").notes
    payload = {
        "kind": REMEASURE,
        "tir": tir,
        "baseline_tasm": None,
        "functions": dict(late.unmeasured_hits),
        "isa": "release",
        "witnesses": 16,
        "seed": OPTS.seed,
    }
    out = run_payload(payload, cache=cache, sources=None, settings=Settings(), seed=3)  # type: ignore[arg-type]  # the ResultCache calls this test makes
    assert out == {"main": "remeasured"}
    again = compile_tir(tir, options=replace(OPTS, deadline=Deadline(0)), cache=cache)
    main = next(f for f in again.functions if f.name == "main")
    assert main.cache == "hit" and not main.notes
    assert not again.unmeasured_hits and not again.remeasured
    assert main.cycles == cache[main_key].report["as_returned"]["cycles"]
    # and a measurement that finished in the request itself is not sent again
    fresh = compile_tir(tir, options=OPTS, cache=cache)
    assert not fresh.unmeasured_hits


def test_report_round_trips_through_its_dict():
    r = compile_tir(CALL, options=OPTS)
    for f in r.functions:
        back = FunctionReport.from_dict(json.loads(json.dumps(f.to_dict())))
        assert back == f


# -- a wrong stored program is caught by a spot check -------------------------------------------


def test_recheck_proves_a_stored_program_again_and_refuses_a_wrong_one():
    cold = compile_tir(TIMELOCK, options=OPTS, cache=DictCache())
    entry = next(e for e in cold.cache_entries if e.lines is not None)
    opts = CompileOptions(seed=12345)
    assert recheck(TIMELOCK, None, entry.name, entry.lines, options=opts) is None
    # adversarial: one stack index off (an all-zero witness could not tell them apart)
    wrong = [ln.replace("dup 0", "dup 1", 1) if "dup 0" in ln else ln for ln in entry.lines]
    if wrong == entry.lines:
        wrong = [*entry.lines[:-1], "    push 1", "    add", entry.lines[-1]]
    why = recheck(TIMELOCK, None, entry.name, wrong, options=opts)
    assert why is not None and not why.startswith("unverified")
    # and a recheck past its deadline never says "proven"
    late = recheck(
        TIMELOCK, None, entry.name, entry.lines, options=replace(opts, deadline=Deadline(0))
    )
    assert late is not None and late.startswith("unverified")


def test_a_poisoned_entry_is_served_only_until_a_spot_check_deletes_it():
    """The cache is trusted on the request path (it holds what the verifier proved); the
    spot check is the second line of defence against a verifier bug or a tampered row."""
    from service.core.config import Settings
    from service.core.deepen import SPOT_CHECK, run_payload

    cache = DictCache()
    cold = compile_tir(TIMELOCK, options=OPTS, cache=cache)
    cache.store(cold.cache_entries)
    entry = next(e for e in cold.cache_entries if e.lines is not None)
    poisoned = [*entry.lines[:-1], "    push 1", "    add", entry.lines[-1]]
    cache[entry.key] = replace(entry, lines=poisoned)
    served = compile_tir(TIMELOCK, options=OPTS, cache=cache)
    assert "\n".join(poisoned) in served.tasm  # trusted on the request path

    class Deleting(DictCache):
        def delete(self, key):
            return self.pop(key, None) is not None

        def passed_spot_check(self, key):
            pass

    sc = Deleting(cache)
    out = run_payload(
        {
            "kind": SPOT_CHECK,
            "tir": TIMELOCK,
            "baseline_tasm": None,
            "functions": {entry.name: entry.key},
            "isa": "release",
            "witnesses": 16,
        },
        cache=sc,  # type: ignore[arg-type]
        sources=None,
        settings=Settings(database_url="sqlite://"),
        seed=99,
    )
    assert out == {entry.name: "failed"} and entry.key not in sc
    after = compile_tir(TIMELOCK, options=OPTS, cache=sc)
    assert {f.cache for f in after.functions} == {"miss"}
    assert "\n".join(poisoned) not in after.tasm
    clean = [e for e in cold.cache_entries if e.lines is not None and e.key != entry.key]
    for e in clean:
        sc[e.key] = e
    names = {e.name: e.key for e in clean}
    if names:
        ok = run_payload(
            {
                "kind": SPOT_CHECK,
                "tir": TIMELOCK,
                "baseline_tasm": None,
                "functions": names,
                "isa": "release",
                "witnesses": 16,
            },
            cache=sc,  # type: ignore[arg-type]
            sources=None,
            settings=Settings(database_url="sqlite://"),
            seed=7,
        )
        assert set(ok.values()) == {"passed"}


@pytest.mark.parametrize(
    "module",
    ["std_crypto_ecdsa", "coin", "lock_multisig", "std_crypto_secp256k1", "std_io_storage"],
)
def test_real_modules_warm_answers_equal_cold_ones(trident_std, module):
    """trident-std modules with the compiler's TASM as baseline: the second compile is all
    hits (every function the client's baseline defines) and returns the same text."""
    d = trident_std[module]
    cache = DictCache()
    cold = compile_tir(d["tir"], d["compiler_tasm"], options=OPTS, cache=cache)
    cache.store(cold.cache_entries)
    warm = compile_tir(d["tir"], d["compiler_tasm"], options=OPTS, cache=cache)
    keyed = [f for f in cold.functions if f.cache_key]
    assert keyed and all(f.cache == "hit" for f in warm.functions if f.cache_key)
    assert warm.tasm == cold.tasm
    assert warm.cycles == cold.cycles


def test_cached_function_cycles_come_from_its_report():
    e = CachedFunction("k", "f", None, {"cycles": 7}, False, 0.5, "rules")
    assert e.cycles == 7


# -- a request's functions split over concurrent groups (tasmopt.optimizer.split) -------------


def _split(tir, baseline, cache=None, fail=False, groups=2):
    from tasmopt.optimizer.split import compile_group, compile_split

    seen: list[frozenset[str]] = []

    def run(parts):
        if fail:
            raise RuntimeError("a process died")
        seen.extend(parts)
        return [
            compile_group(tir, baseline, options=replace(OPTS, only=p), compile_fn=compile_tir)
            for p in parts
        ]

    out = compile_split(
        tir,
        baseline,
        options=OPTS,
        run_groups=run,
        groups=groups,
        compile_fn=compile_tir,
        cache=cache,
    )
    return out, seen


def test_a_split_compile_returns_what_a_sequential_one_proves(trident_std):
    d = trident_std["lock_multisig"]  # `main` calls `verify_key`: both improve
    seq = compile_tir(d["tir"], d["compiler_tasm"], options=OPTS)
    out, parts = _split(d["tir"], d["compiler_tasm"], cache=DictCache())
    assert sorted(len(p) for p in parts) == [1, 1]  # one function per group
    assert out.tasm == seq.tasm
    assert [f.cycles for f in out.functions] == [f.cycles for f in seq.functions]
    assert {f.cache for f in out.functions} == {"miss"} and len(out.cache_entries) == 2
    assert "split" in out.timings


def test_a_split_compile_farms_out_only_what_the_cache_does_not_know(trident_std):
    d = trident_std["std_crypto_ecdsa"]
    cache = DictCache()
    first, _ = _split(d["tir"], d["compiler_tasm"], cache=cache)
    cache.store(first.cache_entries)
    again, parts = _split(d["tir"], d["compiler_tasm"], cache=cache)
    assert parts == [] and {f.cache for f in again.functions} == {"hit"}
    assert again.tasm == first.tasm


def test_a_failed_group_run_falls_back_to_one_process(trident_std):
    d = trident_std["lock_multisig"]
    out, _ = _split(d["tir"], d["compiler_tasm"], fail=True)
    seq = compile_tir(d["tir"], d["compiler_tasm"], options=OPTS)
    assert out.tasm == seq.tasm and "split" not in out.timings


def test_partition_balances_by_weight():
    from tasmopt.optimizer.split import partition

    parts = partition({"a": 10, "b": 6, "c": 5, "d": 1}, 2)
    assert sorted(sorted(p) for p in parts) == [["a", "d"], ["b", "c"]]
    assert partition({"a": 1}, 4) == [frozenset({"a"})]
    assert partition({}, 2) == []


def test_a_spot_check_of_a_pass_rewrite_repeats_its_differential_check_not_an_alignment():
    """A function-level pass may change the control skeleton (keccak256's ``rc12``: its call
    of ``make_lane`` inlined) and proves that with its own obligations; the spot check cannot replay
    those, so a failed alignment that only says the skeletons differ is no finding for an
    entry the report says a pass rewrote (it was one: entries deleted and errors logged in
    the latency benchmark). The fresh differential check still decides: a wrong program
    under the same report is refused."""
    mod = json.loads(
        (
            Path(__file__).resolve().parents[2]
            / "shared/data/trident-std/std_crypto_keccak256.json"
        ).read_text()
    )
    tir, base = mod["tir"], mod["compiler_tasm"]
    r = compile_tir(
        tir,
        base,
        options=CompileOptions(sources=("rules",)),
        cache=DictCache(),
    )
    entry = next(e for e in r.cache_entries if e.name == "rc12")
    rewrites = entry.report["rewrites"]
    assert entry.lines is not None and rewrites, entry.report
    opts = CompileOptions(seed=424242)
    strict = recheck(tir, base, "rc12", entry.lines, options=opts)
    assert strict is not None and "control skeletons differ" in strict
    assert recheck(tir, base, "rc12", entry.lines, options=opts, rewrites=rewrites) is None
    # adversarial: the same report over a program that computes another constant
    pushes = [k for k, ln in enumerate(entry.lines) if ln.split()[:1] == ["push"]]
    assert pushes, entry.lines
    wrong = list(entry.lines)
    k = pushes[0]
    wrong[k] = f"    push {int(wrong[k].split()[1]) + 1}"
    why = recheck(tir, base, "rc12", wrong, options=opts, rewrites=rewrites)
    assert why is not None and not why.startswith("unverified")


def test_deepening_asks_the_sources_of_deepen_sources_only():
    """DEEPEN_SOURCES decides which candidate sources a deepening consults: a registered
    model is not asked unless it is listed (issue 34: the shipped checkpoint made deepening
    2.5x slower for no cycle), and is asked when it is."""
    from service.core.config import Settings
    from service.core.deepen import DEEPEN_KIND, run_payload
    from tasmopt.rules import RulesSource
    from tasmopt.sources import SourceSet

    class Recording:
        name = "model"

        def __init__(self):
            self.asked = 0

        def propose(self, tasks, options):
            self.asked += len(tasks)
            return [[] for _ in tasks]

    class Putting(DictCache):
        def put(self, entries):
            self.store(entries)
            return {e.key: "inserted" for e in entries}

    key = _keys(TIMELOCK)["main"]
    payload = {
        "kind": DEEPEN_KIND,
        "tir": TIMELOCK,
        "baseline_tasm": None,
        "functions": {"main": key},
        "isa": "release",
        "witnesses": 16,
    }
    for listed in (False, True):
        model = Recording()
        sources = ["rules", "search", "model"] if listed else ["rules", "search"]
        cache = Putting()
        out = run_payload(
            payload,
            cache=cache,  # type: ignore[arg-type]  # the ResultCache calls this test makes
            sources=SourceSet([RulesSource(), model]),
            settings=Settings(
                database_url="sqlite://", deepen_sources=sources, deepen_budget_s=0.1
            ),
            seed=5,
        )
        assert out == {"main": "inserted"}
        assert (model.asked > 0) is listed


def test_a_cut_function_keeps_its_measurement_when_it_has_one():
    """`settle` (`tasmopt.optimizer.steps._settle`): a function the deadline cut before it was
    measured gets a placeholder (unmeasured, no lines); one measured before the cut (a focus
    tier that proved its baseline and found nothing, then the search did not run) gets a
    non-final entry with its measurement, served as the baseline and deepened later. Before,
    both got a placeholder, so a response said "measured" while its cache entry said not."""
    from tasmopt.optimizer.splice import mark_unmeasured
    from tasmopt.optimizer.state import FunctionState
    from tasmopt.optimizer.steps import _settle
    from tasmopt.tasm.parser import parse

    opts = replace(OPTS, search_budget_s=0.0)
    cut = "request deadline reached before the search ran"
    unmeasured = FunctionReport(name="f", source="compiler", cycles=0, baseline_cycles=0)
    mark_unmeasured(unmeasured, cut)
    holder = _settle(FunctionState("f", unmeasured, key="k", cut=cut), opts)
    assert holder is not None and not holder.measured and holder.lines is None
    measured = FunctionReport(name="g", source="compiler", cycles=16, baseline_cycles=16)
    state = FunctionState("g", measured, parse("push 1\nhalt\n"), key="k2", cut=cut)
    entry = _settle(state, opts)
    assert entry is not None and entry.measured and not entry.final and entry.lines is None
    assert entry.report["cycles"] == 16 and state.report.status == "improving"
