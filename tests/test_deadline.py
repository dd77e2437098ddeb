"""Every stage has a deadline (`tasmopt.deadline`): past it, or once cancelled, a compile
returns what is proven by then (at worst the baseline, unchanged), and no candidate source
keeps working."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

from tasmopt.deadline import Deadline
from tasmopt.lower.triton import lower
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import default_sources
from tasmopt.report import CompileOptions
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.search.schedule import Budget
from tasmopt.search.source import MAX_SEARCH_INSTRS, SearchSource
from tasmopt.search.stoke import stoke
from tasmopt.sources import BlockTask, SourceSet
from tasmopt.tasm import Instr, parse_instructions
from tasmopt.tir import codec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CALL = json.loads((EXAMPLES / "call.json").read_text())["tir"]


def test_deadline_basics():
    d = Deadline(60)
    assert not d.expired and 59 < d.remaining() <= 60
    d.cancel("client disconnected")
    assert d.expired and d.remaining() == 0 and d.why() == "client disconnected"
    assert Deadline(0).expired and Deadline(0).why() == "deadline"
    assert not Deadline().expired and Deadline().remaining() == float("inf")
    copy = pickle.loads(pickle.dumps(d))  # crosses a process pool
    assert copy.expired and copy is not d


def test_an_expired_deadline_returns_the_baseline_unchanged_at_once():
    t = time.perf_counter()
    result = compile_tir(CALL, options=CompileOptions(deadline=Deadline(0)))
    assert time.perf_counter() - t < 2.0
    assert result.tasm.strip() == lower(codec.decode(CALL)).text().strip()
    assert all(f.fallback and "deadline" in (f.reason or "") for f in result.functions)


def test_cancelling_during_the_candidate_stage_verifies_nothing_more():
    deadline = Deadline(60)

    class Leaves:  # proposes, then the client goes away
        name = "search"

        def propose(self, tasks, options):
            deadline.cancel("client disconnected")
            return [[[Instr("nop")]] for _ in tasks]

    calls: list[int] = []

    def verify(checks):
        calls.append(len(checks))
        raise AssertionError("nothing is verified after a cancel")

    result = compile_tir(
        CALL,
        options=CompileOptions(sources=("search",), deadline=deadline),
        verify=verify,
        sources=SourceSet([Leaves()]),
    )
    assert calls == []
    assert all(f.source == "compiler" for f in result.functions)
    assert any("client disconnected" in (f.reason or "") for f in result.functions)


def test_search_budget_and_stoke_stop_at_the_deadline():
    done = Deadline(0)
    budget = Budget(10**9, done)
    spent = 0
    while budget.spend():
        spent += 1
    assert spent < Budget.DEADLINE_EVERY  # looked at within the first few states
    block = parse_instructions("dup 0\npush 0\nadd\npush 1\nmul\nswap 1\npop 1")
    assert stoke(block, block, iterations=10**9, seed=1, deadline=done) is None
    t = time.perf_counter()
    optimize_block(block, SearchConfig(states=10**8, deadline=done))
    assert time.perf_counter() - t < 2.0


def test_the_search_skips_blocks_too_long_to_search():
    long = tuple(Instr("push", k) for k in range(MAX_SEARCH_INSTRS + 1))
    task = BlockTask("f", 0, "tir[0]", (), long, 0, len(long), "h")
    t = time.perf_counter()
    assert SearchSource().propose([task], CompileOptions(search_budget_s=5.0)) == [[]]
    assert time.perf_counter() - t < 1.0


def test_a_huge_block_is_bounded_by_the_request_deadline():
    # issue 15: 10,000 `Push 1` in one function ran past 35 s inside the MCMC loop
    tir = [{"FnStart": "main"}, *[{"Push": 1}] * 10_000, {"Pop": 5}, "Return", "FnEnd"]
    t = time.perf_counter()
    result = compile_tir(
        tir,
        options=CompileOptions(sources=("rules", "search"), deadline=Deadline(2.0)),
        sources=default_sources(),
    )
    assert time.perf_counter() - t < 15.0  # the deadline plus the baseline's measurement
    assert result.functions[0].source in ("compiler", "rules")


def test_verification_is_chunked_only_for_backends_without_their_own_deadline():
    from tasmopt.optimizer.state import VERIFY_CHUNK, verify_within
    from tasmopt.vm.equivalence import BlockCheck, Verdict

    checks = [BlockCheck(("push 1",), ("push 1",))] * (2 * VERIFY_CHUNK + 3)
    calls: list[int] = []

    seen: list[object] = []

    def in_process(batch, **kw):
        calls.append(len(batch))
        seen.append(kw.get("deadline"))
        return [Verdict(True, "symbolic")] * len(batch)

    opts = CompileOptions(deadline=Deadline(60))
    assert len(verify_within(in_process, checks, opts)) == len(checks)
    assert calls == [VERIFY_CHUNK, VERIFY_CHUNK, 3]  # a deadline can stop between chunks
    calls.clear()
    in_process.bounded = True  # e.g. the RQ pool: one fan-out, its own deadlines
    assert len(verify_within(in_process, checks, opts)) == len(checks)
    assert calls == [len(checks)]
    assert seen[-1] is opts.deadline  # ... and it is handed the request's deadline


def test_guard_solving_stops_at_the_active_deadline_and_its_verdict_is_not_remembered():
    """A block whose guard (`st0 == 12345`) no random witness passes needs solved witnesses;
    under an expired request deadline the check answers "unverified" at once, and that answer
    is not memoized: the same check with time left is proven."""
    from tasmopt.vm.equivalence import BlockCheck, check_blocks

    base = ("dup 0", "push 12345", "eq", "assert", "push 1", "add")
    cand = ("dup 0", "push 12345", "eq", "assert", "addi 1")
    check = BlockCheck(base, cand, "release", 16, 4242)
    late = Deadline(0)
    with late.active():
        (cut,) = check_blocks([check])
    assert not cut.equivalent and cut.reason.startswith("unverified: deadline")
    (proven,) = check_blocks([check])
    assert proven.equivalent, proven.reason
    wrong = BlockCheck(base, ("dup 0", "push 12345", "eq", "assert", "addi 2"), "release", 16, 4242)
    (refused,) = check_blocks([wrong])
    assert not refused.equivalent and not refused.reason.startswith("unverified")
