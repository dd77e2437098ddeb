"""The observable-behaviour contract for scratch RAM (design §2, `tasmopt.vm.scratch`): which
cells the analysis proves private and dead, and that the verifier leaves out exactly those
and nothing else. Adversarial: every way a store could still be read must keep it
observable."""

from __future__ import annotations

from tasmopt.vm.equivalence import BlockCheck, check_aligned, check_block, check_function, harness
from tasmopt.vm.scratch import (
    SCRATCH_BASE,
    constant_accesses,
    dead_after,
    items_of_lines,
    private_cells,
)

A = 2**30  # the spill region's first cell (spec/tir.md §5.5)
B = A + 1


def lines(text: str) -> list[str]:
    return [ln for ln in text.strip().split("\n")]


F_SPILL = lines(f"""
__f:
    read_io 1
    push {A}
    write_mem 1
    pop 1
    read_io 1
    push {A}
    read_mem 1
    pop 1
    mul
    write_io 1
    return
""")


# -- privacy ---------------------------------------------------------------------------------


def test_a_cell_only_its_function_touches_is_private():
    a = private_cells({"f": F_SPILL})
    assert a.reason is None
    assert dict(a.owner) == {A: "f"}


def test_a_cell_another_function_reads_is_not_private():
    g = lines(f"""
__g:
    push {A}
    read_mem 1
    pop 1
    write_io 1
    return
""")
    assert private_cells({"f": F_SPILL, "g": g}).owner == {}


def test_an_escaped_scratch_address_makes_no_cell_private():
    # the temp region's runtime-indexed arrays: base pushed as a value, then arithmetic
    g = lines(f"""
__g:
    push {SCRATCH_BASE}
    read_io 1
    add
    read_mem 1
    pop 1
    write_io 1
    return
""")
    a = private_cells({"f": F_SPILL, "g": g})
    assert a.owner == {} and "outside a memory access" in (a.reason or "")
    # an addi by a scratch-range immediate is an escape too
    h = lines(f"__h:\n    push 0\n    addi {A}\n    pop 1\n    return")
    assert private_cells({"f": F_SPILL, "h": h}).owner == {}
    # and so is a scratch constant outside every function (the entry stub)
    assert private_cells({"f": F_SPILL}, [f"    push {A}", "    pop 1"]).owner == {}


def test_a_function_with_a_computed_address_owns_nothing():
    f = F_SPILL[:-1] + ["    read_io 1", "    read_mem 1", "    pop 2", "    return"]
    assert private_cells({"f": f}).owner == {}


def test_a_push_that_skiz_may_skip_is_not_a_constant_address():
    items = items_of_lines(["skiz", f"push {A}", "read_mem 1"])
    acc, esc, dyn = constant_accesses(items)
    assert acc == [] and dyn == [2]  # the read may run with any pointer
    assert esc == [1]


def test_cells_of_wide_accesses():
    acc, _, _ = constant_accesses(
        items_of_lines([f"push {A}", "write_mem 3", f"push {B}", "read_mem 2"])
    )
    assert [a.cells for a in acc] == [(A, A + 1, A + 2), (A, A + 1)]


# -- liveness --------------------------------------------------------------------------------


def test_dead_after_the_run_that_writes_then_reads_it():
    items = items_of_lines(F_SPILL)
    assert dead_after(items, 1, len(items) - 1, frozenset({A})) == {A}
    # a run that ends between the store and the reload: the reload is outside
    assert dead_after(items, 1, 5, frozenset({A})) == frozenset()
    # not private: never dead
    assert dead_after(items, 1, len(items) - 1, frozenset()) == frozenset()


def test_a_run_that_reads_before_it_writes_keeps_the_cell():
    # a loop body's accumulator in RAM: the next iteration reads what this one wrote
    body = items_of_lines(
        [f"push {A}", "read_mem 1", "pop 1", "addi 1", f"push {A}", "write_mem 1", "pop 1"]
    )
    assert dead_after(body, 0, len(body), frozenset({A})) == frozenset()


# -- the verifier ----------------------------------------------------------------------------

STORE_RELOAD = (
    "read_io 1",
    f"push {A}",
    "write_mem 1",
    "pop 1",
    "read_io 1",
    f"push {A}",
    "read_mem 1",
    "pop 1",
    "mul",
)
KEPT_ON_STACK = ("read_io 1", "read_io 1", "mul")


def test_dropping_a_dead_store_is_accepted_only_with_the_contract():
    ok = check_block(BlockCheck(STORE_RELOAD, KEPT_ON_STACK, dead_cells=(A,)))
    assert ok.equivalent, ok.reason
    # all RAM observable (the default): the missing store is a difference
    assert not check_block(BlockCheck(STORE_RELOAD, KEPT_ON_STACK)).equivalent
    # another cell dead does not excuse this one
    assert not check_block(BlockCheck(STORE_RELOAD, KEPT_ON_STACK, dead_cells=(B,))).equivalent


def test_dead_cells_do_not_excuse_reading_garbage():
    # the candidate reads the dead cell before anything wrote it: its initial value leaks
    cand = ("read_io 1", "pop 1", "read_io 1", f"push {A}", "read_mem 1", "pop 1", "mul")
    assert not check_block(BlockCheck(STORE_RELOAD, cand, dead_cells=(A,))).equivalent


def test_dead_cells_do_not_excuse_other_differences():
    wrong = ("read_io 1", "read_io 1", "add")
    assert not check_block(BlockCheck(STORE_RELOAD, wrong, dead_cells=(A,))).equivalent
    # a store to a live cell the baseline does not make
    extra = KEPT_ON_STACK + ("push 7", f"push {B}", "write_mem 1", "pop 2")
    assert not check_block(BlockCheck(STORE_RELOAD, extra, dead_cells=(A,))).equivalent


def _fn_harness(body: list[str]):
    return harness("\n".join(body), "__f")


def test_whole_function_proof_uses_liveness_per_run():
    # the store and the reload are separated by a call: the store's run does not read it
    base = lines(f"""
__f:
    read_io 1
    push {A}
    write_mem 1
    pop 1
    call __g
    push {A}
    read_mem 1
    pop 1
    write_io 1
    return
__g:
    return
""")
    cand = lines(f"""
__f:
    read_io 1
    pop 1
    call __g
    push {A}
    read_mem 1
    pop 1
    write_io 1
    return
__g:
    return
""")
    b, c = _fn_harness(base), _fn_harness(cand)
    private = frozenset({A})
    proof = check_aligned(b, c, private_cells=private)
    assert not proof.equivalent  # the cell is read after the store's run: live there
    v = check_function(b, c, private_cells=private)
    assert not v.equivalent  # and a witness shows it: the output is the initial RAM value


def test_whole_function_proof_accepts_the_dead_store_and_excludes_it_at_return():
    base = _fn_harness(F_SPILL)
    cand = _fn_harness(
        lines("""
__f:
    read_io 1
    read_io 1
    mul
    write_io 1
    return
""")
    )
    private = frozenset({A})
    assert check_aligned(base, cand, private_cells=private).equivalent
    v = check_function(base, cand, private_cells=private)
    assert v.equivalent and v.cycles < v.baseline_cycles
    # without the contract the final RAM differs
    assert not check_function(base, cand).equivalent
    assert not check_aligned(base, cand).equivalent


def test_a_cell_each_run_writes_before_reading_is_dead_after_every_run():
    # a spill slot reused by two runs separated by a call: no value crosses a run boundary
    text = lines(f"""
__f:
    read_io 1
    push {A}
    write_mem 1
    pop 1
    push {A}
    read_mem 1
    pop 1
    call __g
    read_io 1
    push {A}
    write_mem 1
    pop 1
    push {A}
    read_mem 1
    pop 1
    mul
    return
""")
    items = items_of_lines(text)
    first = (1, 8)  # the first run, up to the call
    assert items[first[1]][0] == "call"
    assert dead_after(items, *first, frozenset({A})) == {A}
    assert dead_after(items, 9, len(items) - 1, frozenset({A})) == {A}
    # ... but not when the second run reads the first run's value before writing its own
    carried = text[:9] + [f"    push {A}", "    read_mem 1", "    pop 1"] + text[9:]
    items = items_of_lines(carried)
    assert dead_after(items, *first, frozenset({A})) == frozenset()


def test_a_run_that_only_overwrites_makes_the_earlier_store_dead():
    base = lines(f"""
__f:
    read_io 1
    push {A}
    write_mem 1
    pop 1
    call __g
    read_io 1
    push {A}
    write_mem 1
    pop 1
    push {A}
    read_mem 1
    pop 1
    write_io 1
    return
__g:
    return
""")
    # the first store `push A; write_mem 1; pop 1` becomes `pop 1`: its value is overwritten
    # after the call before anything reads the cell
    k = base.index("    write_mem 1")
    cand = base[: k - 1] + ["    pop 1"] + base[k + 2 :]
    b, c = _fn_harness(base), _fn_harness(cand)
    assert check_aligned(b, c, private_cells=frozenset({A})).equivalent
    assert check_function(b, c, private_cells=frozenset({A})).equivalent
    assert not check_aligned(b, c).equivalent


def test_dead_cells_do_not_hide_a_store_through_an_aliasing_pointer():
    # the candidate stores the value at an address read from input: it may be the dead cell
    # or any live one, so nothing proves the rest of RAM unchanged
    cand = ("read_io 1", "read_io 1", "write_mem 1", "pop 1", "read_io 1", "read_io 1", "mul")
    assert not check_block(BlockCheck(STORE_RELOAD, cand, dead_cells=(A,))).equivalent


def test_dead_cells_do_not_excuse_dropping_a_rare_guard():
    # the baseline fails unless its second input is 12345; the candidate drops that check
    # along with the dead store
    base = (
        STORE_RELOAD[:4] + ("read_io 1", "dup 0", "push 12345", "eq", "assert") + STORE_RELOAD[5:]
    )
    cand = ("read_io 1", "read_io 1", "mul")
    assert check_block(BlockCheck(base, base, dead_cells=(A,))).equivalent  # guard solvable
    assert not check_block(BlockCheck(base, cand, dead_cells=(A,))).equivalent


def test_a_label_between_store_and_reload_keeps_the_cell_live():
    # control may enter at the label (a mid-block entry) and reload what an earlier pass stored
    text = lines(f"""
__f:
    read_io 1
    push {A}
    write_mem 1
    pop 1
__f_again:
    push {A}
    read_mem 1
    pop 1
    write_io 1
    return
""")
    items = items_of_lines(text)
    assert dead_after(items, 1, 5, frozenset({A})) == frozenset()


def test_privacy_needs_both_texts():
    # our lowering keeps the cell to f, but the client's text reads it in g: not private
    from tasmopt.module import ModuleText
    from tasmopt.optimizer.contract import private_by_function

    g_ours = ["__g:", "    push 1", "    write_io 1", "    return"]
    g_client = [
        "__g:",
        f"    push {A}",
        "    read_mem 1",
        "    pop 1",
        "    write_io 1",
        "    return",
    ]
    labels = {"f": "__f", "g": "__g"}
    ours = ModuleText.from_text("\n".join(F_SPILL + g_ours), labels)
    client = ModuleText.from_text("\n".join(F_SPILL + g_client), labels)
    assert private_by_function(ours, None, "release") == {"f": frozenset({A})}
    assert private_by_function(ours, client, "release") == {}
