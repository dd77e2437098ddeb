"""Anytime compiles (issue 34 item 1, `tasmopt.optimizer.anytime`): under a deadline the
rules and the function-level passes answer first, every other source works on what time is
left, and each function keeps the better proven answer. A longer deadline never returns more
cycles, and a tier the deadline cuts never takes away what the first one proved."""

from __future__ import annotations

import pytest

from tasmopt.deadline import Deadline
from tasmopt.optimizer import QUICK_SOURCES, default_sources
from tasmopt.optimizer import compile as compile_tir
from tasmopt.report import CompileOptions
from tasmopt.tasm import Instr
from tasmopt.vm.equivalence import Verdict, check_blocks


def _baselines(mod: dict) -> dict[str, int]:
    """Each function's baseline cycles, measured without any deadline."""
    r = compile_tir(
        mod["tir"], mod["compiler_tasm"], options=CompileOptions(sources=(), use_cache=False)
    )
    return {f.name: f.baseline_cycles for f in r.functions}


def _answered(result, baselines: dict[str, int]) -> int:
    """Cycles of the answer: a measured function at its cycles, one returned unmeasured (so
    unchanged) at its baseline."""
    return sum(f.cycles if f.measured else baselines[f.name] for f in result.functions)


def _as_returned(mod: dict, tasm: str) -> int:
    """Cycles of a returned module, measured here function by function against the client's
    program with the callees as returned (a caller whose own measurement the deadline cut
    still runs its callees' rewrites)."""
    from tasmopt.lower.triton import lower
    from tasmopt.module import ModuleText
    from tasmopt.optimizer.prepare import decode_tir
    from tasmopt.optimizer.recheck import measure_as_returned

    ours = ModuleText.from_lowering(lower(decode_tir(mod["tir"])))
    labels = {n: f.label for n, f in ours.functions.items()}
    client = ModuleText.from_text(mod["compiler_tasm"], labels)
    out = ModuleText.from_text(tasm, labels)
    total = 0
    for name in client.functions:
        v = measure_as_returned(client, out, name, witnesses=8)
        assert v is None or v.witness < 0, (name, v.reason)  # never unlike the client's
        total += v.cycles if v is not None else 0
    return total


@pytest.mark.parametrize("module", ["coin", "std_crypto_auth", "std_crypto_keccak256"])
def test_a_longer_deadline_never_returns_more_cycles(trident_std, module: str) -> None:
    """Same request, same seed, deadlines 0.5 s < 2 s < 5 s: the cycles of the answer,
    measured as returned, do not grow, and the longest deadline saves something. (The
    reported figures are not compared: coin and keccak256 have a focus tier,
    `tasmopt.optimizer.priority`, and a report the deadline cut can be pessimistic, callers
    measured with their callees' baseline code: a clean-clone CI run saw coin's reports at
    1,424, 1,459 and 1,270 cycles.)"""
    mod = trident_std[module]
    baselines = _baselines(mod)
    answers = []
    returned = []
    for seconds in (0.5, 2.0, 5.0):
        opts = CompileOptions(
            sources=("rules", "search"), use_cache=False, deadline=Deadline(seconds)
        )
        r = compile_tir(mod["tir"], mod["compiler_tasm"], options=opts)
        answers.append(_answered(r, baselines))
        returned.append(_as_returned(mod, r.tasm))
    assert answers[-1] < sum(baselines.values())
    assert returned[-1] < _as_returned(mod, mod["compiler_tasm"])
    assert returned == sorted(returned, reverse=True), returned


class _MarkedSearch:
    """A source named ``search`` whose proposals (the baseline and one ``nop``: never
    chosen) mark the second tier's checks, so that the test's verify backend can tell them
    from the first tier's."""

    name = "search"

    def propose(self, tasks, options):
        return [[[*t.baseline, Instr("nop")]] for t in tasks]


def test_a_deadline_that_cuts_the_second_tier_keeps_what_the_first_proved(trident_std) -> None:
    """The deadline expires while the second tier's candidates are being verified: every
    function keeps the first tier's proven answer (the same module text as a rules-only
    compile) and says it is still ``improving``."""
    mod = trident_std["coin"]
    quick = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(sources=QUICK_SOURCES, use_cache=False),
    )
    assert quick.cycles < quick.baseline_cycles  # the rules and passes save something here
    deadline = Deadline(120.0)
    second_tier = []

    def verify(checks):
        if any(c.candidate and c.candidate[-1] == "nop" for c in checks):
            second_tier.append(len(checks))
            deadline.cancel("the test's deadline")  # expires while these are checked
            return [Verdict(False, "rejected", "unverified: deadline") for _ in checks]
        return check_blocks(checks)

    sources = default_sources()
    sources.add(_MarkedSearch())
    r = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(sources=("rules", "search"), use_cache=False, deadline=deadline),
        sources=sources,
        verify=verify,
    )
    assert second_tier, "the second tier never reached verification"
    assert r.tasm == quick.tasm  # every proven rewrite of the first tier kept
    assert r.cycles <= quick.cycles < r.baseline_cycles
    assert all(f.status == "improving" for f in r.functions if f.blocks)


class _Dict(dict):
    def get_many(self, keys):
        return {k: self[k] for k in keys if k in self}


def test_a_request_answered_wholly_from_the_cache_runs_one_tier(trident_std) -> None:
    """Every function a cache hit: a second tier could only repeat the first (it deep-copied
    the first answer and ran the pipeline again: 40 of keccak256's 103 ms); the answer is the
    cached one either way, and a function that misses still gets both tiers."""
    mod = trident_std["lock_multisig"]
    cache = _Dict()
    cold = compile_tir(
        mod["tir"], mod["compiler_tasm"], options=CompileOptions(seed=0), cache=cache
    )
    cache.update({e.key: e for e in cold.cache_entries})
    assert cache
    opts = CompileOptions(seed=0, sources=("rules", "search"), deadline=Deadline(5.0))
    hit = compile_tir(mod["tir"], mod["compiler_tasm"], options=opts, cache=cache)
    assert {f.cache for f in hit.functions} == {"hit"}
    assert "quick" not in hit.timings
    assert hit.tasm == compile_tir(mod["tir"], mod["compiler_tasm"], options=opts, cache=cache).tasm
    for f in hit.functions:
        assert f.cycles == next(g.cycles for g in cold.functions if g.name == f.name)
    cache.pop(next(iter(cache)))  # one function misses: it is worked on in two tiers
    part = compile_tir(mod["tir"], mod["compiler_tasm"], options=opts, cache=cache)
    assert "quick" in part.timings and "miss" in {f.cache for f in part.functions}
