"""Hand-optimized corpus functions (``corpus/hand/``, `tasmopt.train.hand`).

Every hand version must be equivalent to the compiler's output on the witnesses of every
seed, take strictly fewer cycles, build no taller table, and match its entry in
``corpus/hand/results.json`` (which benchmarks/search.py reads); and the corpus test
programs, with every hand version spliced into their linked code, must still produce the
reference outputs. About 15 s in all.
"""

from __future__ import annotations

import json

import pytest

from tasmopt.train import hand
from tasmopt.vm.equivalence import no_taller

VERSIONS = hand.discover()
RESULTS_PATH = hand.HAND_DIR / "results.json"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RESULTS_PATH.read_text())


@pytest.mark.parametrize("hv", VERSIONS, ids=[hv.key for hv in VERSIONS])
def test_hand_version_verifies(hv: hand.HandVersion, recorded: dict) -> None:
    r = hand.verify(hv)
    assert r.ok, r.problems
    assert r.witnesses >= 32 and r.halted > 0
    for seed in r.per_seed:
        assert seed["witnesses"] >= hand.WITNESSES
        if seed["halted"]:
            assert seed["cycles"] < seed["baseline_cycles"], seed
    assert r.cycles < r.baseline_cycles
    assert no_taller(r.heights, r.baseline_heights)
    entry = recorded.get(hv.key)
    assert entry is not None, (
        f"{hv.key} missing from results.json: run python -m tasmopt.train.hand"
    )
    assert (entry["cycles"], entry["baseline_cycles"]) == (r.cycles, r.baseline_cycles), (
        "results.json is stale: run python -m tasmopt.train.hand"
    )


def test_results_json_lists_exactly_the_hand_versions(recorded: dict) -> None:
    assert sorted(recorded) == sorted(hv.key for hv in VERSIONS)
    for key, entry in recorded.items():
        assert entry["cycles"] < entry["baseline_cycles"], key
        assert entry["reduction"] == round(1 - entry["cycles"] / entry["baseline_cycles"], 4)


def test_coverage() -> None:
    modules = {hv.module for hv in VERSIONS}
    domains = {m.split(".")[0] for m in modules}
    assert len(VERSIONS) >= 40
    assert len(modules) >= 8
    assert {"field", "uint", "bigint", "poseidon", "hash", "array", "ext", "kernel"} <= domains
    holdout = {hv for hv in VERSIONS if hv.module in hand.holdout_modules()}
    assert 0 < len(holdout) <= len(VERSIONS) // 4
    text = {hv.key: "\n".join(hv.lines) for hv in VERSIONS}
    loops = [k for k, t in text.items() if "recurse" in t]
    branches = [k for k, t in text.items() if "skiz" in t and "recurse" not in t]
    assert len(loops) >= 10 and len(branches) >= 5


def _version(key: str, lines: list[str]) -> hand.HandVersion:
    module, function = key.split(":")
    return hand.HandVersion(
        module, function, hand.HAND_DIR / module / f"{function}.tasm", tuple(lines)
    )


def test_a_wrong_version_is_rejected() -> None:
    # a*b - c instead of a*b + c
    r = hand.verify(
        _version(
            "field.basic:mul_add",
            [
                "__mul_add:",
                "    push -1",
                "    mul",
                "    swap 2",
                "    mul",
                "    add",
                "    return",
            ],
        ),
        seeds=(2,),
    )
    assert not r.ok and "not equivalent" in r.problems[0]


def test_only_the_functions_own_spill_cells_are_unobservable() -> None:
    """lib.mstep two_steps parks s2 in its own spill cells (private to it: the optimizer's
    contract). The same code parking it at an ordinary address (observable: the final RAM
    differs) or in its callee parent's cells (parent's own spill code overwrites them
    during the call) is refused, as is a version that reads the words back one cell off."""
    hv = next(v for v in VERSIONS if v.key == "lib.mstep:two_steps")
    assert hand.verify(hv, seeds=(2,)).ok
    own, theirs = "1073741865", "1073741824"  # two_steps' first cell; parent's first cell
    for lines in (
        [ln.replace(own, theirs).replace("1073741869", "1073741828") for ln in hv.lines],
        [ln.replace(own, "1000").replace("1073741869", "1004") for ln in hv.lines],
        [ln.replace("1073741869", "1073741870") for ln in hv.lines],
    ):
        assert lines != list(hv.lines)
        r = hand.verify(_version(hv.key, lines), seeds=(2,))
        assert not r.ok and "not equivalent" in r.problems[0], r.problems


def test_a_version_that_is_not_faster_is_rejected() -> None:
    base = hand.module_text("field.basic").section_lines("mul_add")
    r = hand.verify(_version("field.basic:mul_add", base), seeds=(2,))
    assert not r.ok and "not fewer" in r.problems[0]


def test_a_mistyped_label_is_rejected() -> None:
    # a call to an undefined label would run as an opaque external call: refuse it
    hv = next(v for v in VERSIONS if v.key == "field.pow:sq_n")
    lines = [ln.replace("call __sq_n__loop", "call __sq_n__lop") for ln in hv.lines]
    r = hand.verify(_version(hv.key, lines), seeds=(2,))
    assert not r.ok and "undefined label" in r.problems[0]


# -- in context: the corpus test programs with every hand version spliced in ---------------


def _cases():
    from test_corpus_programs import CASES  # the table of programs and reference outputs

    return CASES


@pytest.mark.parametrize("c", _cases(), ids=[c.id for c in _cases()])
def test_corpus_program_with_hand_versions(c) -> None:
    """The hand versions linked into the real programs (real cross-module calls, not the
    harness's opaque ones) still give the reference output, or fail where it must."""
    from test_corpus_programs import STEP_LIMIT, run_case

    from tasmopt.tasm.parser import parse
    from tasmopt.vm.simulator import VmInput, run

    text, used = hand.spliced_program(hand.CORPUS / c.program)
    if not used:
        pytest.skip("no hand version in this program")
    r = run(
        parse(text),
        VmInput(public_input=c.public, secret_input=c.secret, secret_digests=c.digests, ram=c.ram),
        step_limit=STEP_LIMIT,
        measure=False,
    )
    if c.expected is None:
        assert r.error is not None and r.error.kind == c.fails_with, r.error
        return
    assert r.error is None, r.error
    assert list(r.public_output) == list(c.expected)
    assert r.cycles <= run_case(c).cycles  # < where the program calls a hand version
