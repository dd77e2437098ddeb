"""The opt-in ``client`` stage (`tasmopt.optimizer.client_text`,
``CompileOptions.rewrite_mismatched``): a function whose client baseline disagrees with our
lowering is optimized on the client's text, and what comes back behaves as the client's
program (never as ours); off by default, where design §1 returns it unchanged. The mismatch
is still reported, and the result cache keys the two modes apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasmopt.isa import P
from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.keys import function_keys
from tasmopt.report import CompileOptions
from tasmopt.tasm import parse
from tasmopt.tir import codec
from tasmopt.vm import VmInput, run
from tasmopt.vm.equivalence import check_function

ROOT = Path(__file__).resolve().parents[1]
CALL = json.loads((ROOT / "examples" / "call.json").read_text())["tir"]
DATA = ROOT.parent / "shared" / "data" / "trident-std"
OPTS = CompileOptions(sources=("rules", "search"))
ON = CompileOptions(sources=("rules", "search"), rewrite_mismatched=True)


def buggy_client() -> str:
    """Our lowering with ``square`` squaring by ``add`` (2x instead of x*x): its callers
    disagree with our lowering too."""
    text = lower(codec.decode(CALL)).text()
    return text.replace("    mul\n", "    add\n", 1)


def output(tasm: str, inputs: list[int]) -> tuple[bool, list[int]]:
    r = run(parse("call __main\nhalt\n" + tasm), VmInput(public_input=inputs))
    return r.error is None, list(r.public_output)


def test_a_mismatched_function_is_rewritten_on_the_client_text_when_asked():
    client = buggy_client()
    result = compile_tir(CALL, client, options=ON)
    square = next(f for f in result.functions if f.name == "square")
    assert square.mismatch is not None  # still reported (and logged, counted)
    assert square.source != "client" and square.cycles < square.baseline_cycles
    assert result.tasm != client
    for xs in ([3, 4], [0, 0], [P - 1, 5], [2**40, 7], [1, P - 2]):
        got = output(result.tasm, xs)
        assert got == output(client, xs), xs  # the client's program: 2x + 2y
        assert got[1] == [(2 * xs[0] + 2 * xs[1]) % P]


def test_by_default_a_mismatched_function_comes_back_unchanged():
    client = buggy_client()
    result = compile_tir(CALL, client, options=OPTS)
    for f in result.functions:
        if f.mismatch is not None:
            assert f.source == "client" and f.cycles == f.baseline_cycles
    assert output(result.tasm, [3, 4]) == output(client, [3, 4])


def test_the_result_cache_keys_the_two_modes_apart():
    client = buggy_client()
    ops = codec.decode(CALL)
    low = lower(ops)
    ours = ModuleText.from_lowering(low)
    labels = {n: f.label for n, f in ours.functions.items()}
    theirs = ModuleText.from_text(client, labels)
    off = function_keys(ops, low, ours, theirs, OPTS, {})
    on = function_keys(ops, low, ours, theirs, ON, {})
    assert off and set(off) == set(on)
    assert all(off[n] != on[n] for n in off)


@pytest.mark.slow
def test_upstream_loop_fall_through_code_is_rewritten_and_still_behaves_as_sent():
    # std.fhe.lwe: the compiler's loops run again after their call (spec/tir.md §3.4); our
    # lowering disagrees, the client's text is the program to keep
    data = json.loads((DATA / "std_fhe_lwe.json").read_text())
    result = compile_tir(data["tir"], data["compiler_tasm"], options=ON)
    rewritten = [f for f in result.functions if f.mismatch is not None and f.source != "client"]
    assert rewritten
    labels = {f.name: "__" + f.name for f in result.functions}
    theirs = ModuleText.from_text(data["compiler_tasm"], labels)
    mine = ModuleText.from_text(result.tasm, labels)
    for f in rewritten:
        assert f.cycles < f.baseline_cycles
        v = check_function(
            theirs.harness(f.name, "release"),
            mine.harness(f.name, "release"),
            witnesses=64,
            seed=99,
        )  # other witnesses than the compile's
        assert v.equivalent, (f.name, v.reason)


def _with_and_without_a_deadline(client, given, share, seconds):
    """Compile ``CALL`` against ``client`` without a deadline (the patched check must have
    been handed none: ``given`` holds the seconds each call was handed) and then under a
    request deadline of ``seconds`` (each call handed at most ``share`` of it, and the
    request itself not run out); the second result."""
    from tasmopt.deadline import Deadline

    compile_tir(CALL, client, options=CompileOptions(sources=("rules", "search"), use_cache=False))
    assert given and all(g is None for g in given)
    given.clear()
    request = Deadline(seconds)
    opts = CompileOptions(sources=("rules", "search"), deadline=request, use_cache=False)
    result = compile_tir(CALL, client, options=opts)
    assert given and all(g is not None and g <= share * seconds for g in given)
    assert not request.expired
    return result


def test_under_a_deadline_a_mismatch_is_still_found_within_its_share_of_the_time():
    """`DIAGNOSIS_SHARE`: the check that tells a mismatch from a difference we cannot prove
    runs under a share of the time left; 10% of a 5 s deadline still finds the bug (random
    witnesses tell 2x from x*x at once), and the function comes back unchanged."""
    from tasmopt.deadline import Deadline

    client = buggy_client()
    opts = CompileOptions(sources=("rules", "search"), deadline=Deadline(5.0), use_cache=False)
    result = compile_tir(CALL, client, options=opts)
    square = next(f for f in result.functions if f.name == "square")
    assert square.mismatch is not None and square.source == "client"
    assert square.cycles == square.baseline_cycles
    assert output(result.tasm, [3, 4]) == output(client, [3, 4])


def test_under_a_deadline_the_mismatch_check_gets_its_share_and_a_cut_one_says_so(monkeypatch):
    """The mismatch check is handed a deadline of at most `DIAGNOSIS_SHARE` of the time left
    (none without a request deadline); when it runs out undecided the function is returned
    as the client sent it, not measured as a mismatch, cut (``improving``: deepening decides
    it later), and the reason says why."""
    import tasmopt.optimizer.prepare as prep
    from tasmopt.vm.equivalence import FunctionVerdict

    given: list[float | None] = []

    def undecided(baseline, candidate, **kw):
        dl = kw.get("deadline")
        given.append(None if dl is None else dl.remaining())
        while dl is not None and not dl.expired:
            pass  # a check that needs more time than its share
        return FunctionVerdict(False, reason="unverified: deadline")

    monkeypatch.setattr(prep, "check_function", undecided)
    client = buggy_client()
    result = _with_and_without_a_deadline(client, given, prep.DIAGNOSIS_SHARE, 5.0)
    cut = [f for f in result.functions if f.reason and "its share of the request" in f.reason]
    assert cut and all(f.source == "client" and f.mismatch is None for f in cut)
    assert all(f.status == "improving" for f in cut)
    assert output(result.tasm, [3, 4]) == output(client, [3, 4])


def test_a_function_whose_mismatch_check_was_cut_is_measured_as_the_client_sent_it(
    monkeypatch,
):
    """Returned as the client sent it, a function is measured as the client sent it: here
    the client's ``square`` jumps to its body through a call of its own (2 cycles more, a
    control skeleton the alignment proof does not cover) and its mismatch check runs out of
    its share: the reported cycles are the client's (ours + 2 for ``square``, + 4 for its
    caller, which calls it twice), not those of our lowering."""
    import tasmopt.optimizer.prepare as prep
    from tasmopt.deadline import Deadline
    from tasmopt.vm.equivalence import FunctionVerdict

    def undecided(baseline, candidate, **kw):
        dl = kw["deadline"]
        while not dl.expired:
            pass
        return FunctionVerdict(False, reason="unverified: deadline")

    ours = lower(codec.decode(CALL)).text()
    client = ours.replace("__square:\n", "__square:\n    call __body\n    return\n__body:\n", 1)
    plain = compile_tir(CALL, ours, options=CompileOptions(sources=(), use_cache=False))
    base = {f.name: f.cycles for f in plain.functions}
    monkeypatch.setattr(prep, "check_function", undecided)
    opts = CompileOptions(sources=(), deadline=Deadline(3.0), use_cache=False)
    result = compile_tir(CALL, client, options=opts)
    cut = {f.name: f for f in result.functions if f.reason and "its share" in f.reason}
    assert set(cut) == {"square", "sum_of_squares", "main"}
    extra = {"square": 2, "sum_of_squares": 4, "main": 4}
    for name, f in cut.items():
        assert f.source == "client" and f.measured and f.halted, name
        assert f.cycles == f.baseline_cycles == base[name] + extra[name], name


def test_under_a_deadline_measuring_a_function_returned_unchanged_gets_its_share(monkeypatch):
    """`splice.MEASURE_SHARE`: a function returned as the client sent it (here a mismatch) is
    measured under at most that share of the time left; without a request deadline, under
    none. A measurement that runs out reports the function not measured (null figures),
    cut (``improving``), with the reason, and the answer is still the client's program."""
    import tasmopt.optimizer.splice as splice
    from tasmopt.vm.equivalence import FunctionVerdict

    given: list[float | None] = []
    real = splice.check_function

    def slow_measure(baseline, candidate, **kw):
        if candidate is not None:
            return real(baseline, candidate, **kw)
        dl = kw.get("deadline")
        given.append(None if dl is None else dl.remaining())
        if dl is None:
            return real(baseline, candidate, **kw)
        while not dl.expired:
            pass  # a measurement that needs more than its share
        return FunctionVerdict(False, reason="unverified: deadline (deadline) before the check")

    monkeypatch.setattr(splice, "check_function", slow_measure)
    client = buggy_client()
    result = _with_and_without_a_deadline(client, given, splice.MEASURE_SHARE, 4.0)
    cut = [f for f in result.functions if f.mismatch is not None]
    assert cut and all(not f.measured and f.status == "improving" for f in cut)
    assert all("its share of the request deadline" in (f.reason or "") for f in cut)
    assert output(result.tasm, [3, 4]) == output(client, [3, 4])
