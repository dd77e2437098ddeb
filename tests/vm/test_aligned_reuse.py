"""`check_aligned(..., proven=...)`: a run that differs from the baseline's only by blocks the
block stage already proved is accepted by those proofs instead of a check of its own — and
only where each proof's left-out op-stack slots and scratch cells are dead at that block's
end in the baseline. Each test gives it a *wrong* "proven" check, so that a reuse where it
must not happen would accept a program that behaves differently."""

from __future__ import annotations

import pytest

from tasmopt.tasm.parser import parse
from tasmopt.vm import equivalence
from tasmopt.vm.equivalence import BlockCheck, check_aligned


def _program(body: str):
    return parse("    call main\n    halt\nmain:\n" + body + "    return\n")


@pytest.fixture
def real_checks(monkeypatch):
    """Counts the block checks `check_aligned` runs itself."""
    calls: list[BlockCheck] = []
    inner = equivalence._check_block_cached

    def counting(check):
        calls.append(check)
        return inner(check)

    monkeypatch.setattr(equivalence, "_check_block_cached", counting)
    return calls


def _lie(baseline: tuple[str, ...], candidate: tuple[str, ...], **kw) -> BlockCheck:
    """A check of the kind the block stage accepts, claiming ``candidate`` may replace
    ``baseline`` (here it may not: only the slots and cells it leaves out make it "true")."""
    return BlockCheck(baseline, candidate, "release", 8, 0, **kw)


POPPED = "    push 1\n    push 2\n    push 3\n    pop 1\n    write_io 1\n"
PRINTED = "    push 1\n    push 2\n    push 3\n    write_io 1\n    pop 1\n"


def test_a_block_whose_left_out_slot_is_dead_is_accepted_without_a_check(real_checks) -> None:
    base = _program(POPPED)
    cand = _program(POPPED.replace("push 3", "push 4"))
    proof = _lie(("push 3",), ("push 4",), dead_slots=(0,))
    v = check_aligned(base, cand, witnesses=8, proven=[proof])
    assert v.equivalent and real_checks == []  # st0 is popped right after: truly dead


def test_a_proof_whose_left_out_slot_is_live_is_not_trusted(real_checks) -> None:
    base = _program(PRINTED)
    cand = _program(PRINTED.replace("push 3", "push 4"))  # prints 4 instead of 3
    proof = _lie(("push 3",), ("push 4",), dead_slots=(0,))
    v = check_aligned(base, cand, witnesses=8, proven=[proof])
    assert not v.equivalent and len(real_checks) == 1


def test_a_change_outside_the_proven_blocks_is_checked(real_checks) -> None:
    base = _program(POPPED)
    cand = _program(POPPED.replace("push 3", "push 4").replace("push 2", "push 7"))
    proof = _lie(("push 3",), ("push 4",), dead_slots=(0,))
    v = check_aligned(base, cand, witnesses=8, proven=[proof])
    assert not v.equivalent and len(real_checks) == 1  # prints 7 instead of 2


def test_two_proven_blocks_in_one_run_and_an_ambiguous_match() -> None:
    body = "    push 3\n    pop 1\n    push 3\n    pop 1\n    push 9\n    write_io 1\n"
    base = _program(body)
    cand = _program(body.replace("push 3", "push 4"))
    proof = _lie(("push 3",), ("push 4",), dead_slots=(0,))
    assert check_aligned(base, cand, witnesses=8, proven=[proof]).equivalent
    # a block "push 3; pop 1" -> "" next to the instruction-by-instruction path
    gone = _program(body.replace("    push 3\n    pop 1\n", "", 1))
    erase = _lie(("push 3", "pop 1"), ())
    assert check_aligned(base, gone, witnesses=8, proven=[erase]).equivalent


CELL = 2**29 + 2  # in the scratch region of the contract (`tasmopt.vm.scratch`)
STORED = f"    push 7\n    push {CELL}\n    write_mem 1\n    pop 1\n{{after}}    push 0\n    write_io 1\n"
READ_BACK = f"    push {CELL}\n    read_mem 1\n    pop 1\n    write_io 1\n"


def test_a_proof_whose_left_out_cell_is_read_later_is_not_trusted(real_checks) -> None:
    block = ("push 7", f"push {CELL}", "write_mem 1", "pop 1")
    wrong = ("push 8", f"push {CELL}", "write_mem 1", "pop 1")
    proof = _lie(block, wrong, dead_cells=(CELL,))
    base = _program(STORED.format(after=READ_BACK))
    cand = _program(STORED.format(after=READ_BACK).replace("push 7\n", "push 8\n"))
    v = check_aligned(base, cand, witnesses=8, private_cells=frozenset({CELL}), proven=[proof])
    assert not v.equivalent and len(real_checks) == 1  # it prints the stored value
    real_checks.clear()
    base = _program(STORED.format(after=""))
    cand = _program(STORED.format(after="").replace("push 7\n", "push 8\n"))
    v = check_aligned(base, cand, witnesses=8, private_cells=frozenset({CELL}), proven=[proof])
    assert v.equivalent and real_checks == []  # a private cell never read again: dead
    v = check_aligned(base, cand, witnesses=8, proven=[proof])  # not private: observable
    assert not v.equivalent


def test_the_splice_passes_only_accepted_checks() -> None:
    from tasmopt.optimizer.splice import _chosen_checks
    from tasmopt.optimizer.state import FunctionState
    from tasmopt.report import CompileOptions, FunctionReport
    from tasmopt.sources import BlockTask
    from tasmopt.tasm.parser import parse_instructions
    from tasmopt.vm.equivalence import Verdict

    f = FunctionState(
        "main", FunctionReport(name="main", source="compiler", cycles=0, baseline_cycles=0)
    )
    base = tuple(parse_instructions("push 3\npop 1"))
    f.tasks = [BlockTask("main", 0, "p", (), base, 0, 0, "h", (), (0,))] * 2
    f.chosen = {
        0: ("rules", [], Verdict(True, "symbolic")),
        1: ("rules", ["push 1", "pop 1"], Verdict(False, "rejected", "differs")),
    }
    checks = _chosen_checks(f, CompileOptions(seed=3))
    assert [c.candidate for c in checks] == [()]
    assert checks[0].baseline == ("push 3", "pop 1") and checks[0].seed == 3
    assert checks[0].dead_slots == (0,)


def test_a_proven_block_never_spans_an_entry_point(real_checks) -> None:
    """A label inside the baseline's block (a mid-block entry: control may arrive between
    ``push 3`` and ``pop 1``) splits it into two runs; the proof of the whole block does not
    cover either half, and the first half alone changes the stack length."""
    base = parse(
        "    call main\n    halt\nmain:\n    push 3\nl:\n    pop 1\n    push 9\n    write_io 1\n"
        "    return\n"
    )
    cand = parse("    call main\n    halt\nmain:\nl:\n    push 9\n    write_io 1\n    return\n")
    erase = _lie(("push 3", "pop 1"), ())
    v = check_aligned(base, cand, witnesses=8, proven=[erase])
    assert not v.equivalent and real_checks  # checked run by run, and rejected


def test_a_client_baseline_that_differs_from_the_proven_text_is_checked(real_checks) -> None:
    """The reference is the client's program: where its run is not the proven block's text
    (ours), the proof does not apply and the run gets a check of its own."""
    client = _program(POPPED.replace("push 3", "push 5"))  # the client's differs here
    cand = _program(POPPED.replace("push 3", "push 4"))
    proof = _lie(("push 3",), ("push 4",), dead_slots=(0,))
    v = check_aligned(client, cand, witnesses=8, proven=[proof])
    assert len(real_checks) == 1  # not taken from the proof
    assert v.equivalent  # push 5; pop 1 and push 4; pop 1 do agree: the check decided it
