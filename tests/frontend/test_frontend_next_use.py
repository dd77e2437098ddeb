"""The builder's ``next-use`` spill policy (issue 11, item 3): liveness positions, Belady
victim choice, dead variables dropped instead of stored, and the cases where a dead
variable must *not* vanish (an open branch or loop body must end with its start layout; a
loop-carried value is live at the back edge). Behaviour is checked by running programs;
the shape checks say which path was taken."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from frontend_util import P, run_ops, show

from tasmopt.frontend import compile_source
from tasmopt.frontend.liveness import Liveness
from tasmopt.frontend.source import Pos
from tasmopt.frontend.stack import SPILL_BASE, Allocator, StackModel, pick
from tasmopt.frontend.symbols import Var
from tasmopt.frontend.types import FIELD
from tasmopt.tir.ops import Op


def _program(body: str) -> str:
    return "program p\nfn main() {\n" + body + "\n}\n"


def _run(src: str, public, spill: str) -> list[int]:
    res = run_ops(compile_source(src, "p.tri", spill=spill), public, step_limit=1_000_000)
    assert res.error is None, res.error
    return list(res.public_output)


def _spill_writes(src: str, spill: str) -> int:
    """``Push(a) WriteMem(1)`` pairs at the spill region in the raw builder TIR."""
    ops = compile_source(src, "p.tri", spill=spill, optimized=False)
    flat = show(ops).split()
    return sum(
        1
        for a, b in zip(flat, flat[1:], strict=False)
        if a.startswith("Push(") and int(a[5:-1]) >= SPILL_BASE and b == "WriteMem(1)"
    )


# -- liveness -------------------------------------------------------------------------------


def _checked_body(src: str):
    """The checked AST body and parameters of ``main`` (the builder's input)."""
    from tasmopt.frontend.checker import check_module
    from tasmopt.frontend.modules import load_project
    from tasmopt.frontend.source import Source

    units = load_project(Source("p.tri", src), None, ())
    env = check_module(units[-1], {})
    decl = next(s for s in env.build if s.name == "main").decl
    return decl.body, decl.param_vars


def test_liveness_positions_and_the_loop_back_edge():
    body, params = _checked_body(
        _program(
            "    let a = pub_read()\n"  # 0
            "    let b = pub_read()\n"  # 1
            "    for i in 0..3 {\n"  # 2
            "        pub_write(a)\n"  # 3
            "        let c = pub_read()\n"  # 4
            "        pub_write(c)\n"  # 5
            "    }\n"  # back edge 6
            "    pub_write(b)"  # 7 (the tail)
        )
    )
    live = Liveness(body, params)
    a, b = body.stmts[0].vars[0], body.stmts[1].vars[0]
    loop = body.stmts[2]
    c = loop.body.stmts[1].vars[0]
    assert [live.at(s) for s in body.stmts] == [0, 1, 2] and live.at(body.tail) == 7
    assert live.uses[a] == [3, 6]  # read in the body, and live around the back edge
    assert live.next_use(a, 4) == 6  # after its read in the body: still live (next iteration)
    assert live.next_use(a, 7) is None  # dead after the loop
    assert live.uses[c] == [5]  # declared inside the body: no back-edge use
    assert live.next_use(c, 6) is None
    assert live.next_use(b, 2) == 7
    assert not live.known(Var("__counter", FIELD, False, Pos(0, 0)))


# -- the stack model's choice -----------------------------------------------------------------


def _model(policy: str, next_use: dict[str, float], droppable: set[str]):
    ops: list[Op] = []
    m = StackModel(ops.append, Allocator(policy=policy))
    vs = {n: Var(n, FIELD, False, Pos(0, 0)) for n in next_use}
    for n in next_use:  # pushed in order: the first is the least recently used
        m.push(vs[n], 1)
    m.next_use = lambda v: next_use[v.name]
    m.droppable = lambda v: v.name in droppable
    return m, vs, ops


def test_next_use_evicts_the_furthest_use_and_lru_the_oldest():
    uses = {"a": 5.0, "b": 9.0, "c": 3.0}
    for policy, victim in (("lru", "a"), ("next-use", "b")):
        m, vs, _ = _model(policy, uses, set())
        assert m.victim(set()) is m.entries[m.index_of(vs[victim])], policy


def test_a_dead_variable_is_dropped_without_a_store_and_a_live_one_is_stored():
    m, vs, ops = _model("next-use", {"a": math.inf, "b": 2.0, "c": 1.0}, {"a"})
    m.evict(m.entries[0])
    # a is picked up to the top (the others keep their order) and popped: no RAM
    assert ops == [*pick(2), Op("Pop", 1)]
    assert vs["a"] in m.dead and vs["a"] not in m.spilled
    assert [e.var for e in m.entries] == [vs["b"], vs["c"]]
    m.drop(vs["a"])  # its scope ends later: nothing to do
    assert len(ops) == 3
    ops.clear()
    m.evict(m.entries[m.index_of(vs["b"])])  # b: live, stored
    assert "WriteMem" in [o.kind for o in ops] and vs["b"] in m.spilled


def test_lru_never_drops():
    m, vs, ops = _model("lru", {"a": math.inf, "b": 2.0}, {"a"})
    m.evict(m.entries[0])
    assert "WriteMem" in [o.kind for o in ops] and vs["a"] in m.spilled


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown spill policy"):
        compile_source(_program("    pub_write(1)"), spill="belady")


# -- programs --------------------------------------------------------------------------------

#: 17 live Field values, the first read once early: under pressure LRU stores it, next-use
#: drops it.
PRESSURE = "\n".join(
    ["    let d = pub_read()", "    pub_write(d)"]
    + [f"    let v{i} = pub_read()" for i in range(16)]
    + ["    pub_write(" + " + ".join(f"v{i}" for i in range(16)) + ")"]
)


def test_a_dead_variable_under_pressure_is_dropped_and_the_program_is_unchanged():
    src = _program(PRESSURE)
    public = list(range(1, 18))
    want = [1, sum(range(2, 18)) % P]
    assert _run(src, public, "lru") == want
    assert _run(src, public, "next-use") == want
    assert _spill_writes(src, "lru") > 0
    assert _spill_writes(src, "next-use") < _spill_writes(src, "lru")


def test_a_dead_outer_variable_is_stored_not_dropped_inside_a_branch():
    """d is dead after its first use, but the branch must end with the layout it started
    with (d included): it is stored there, and both paths keep their behaviour."""
    src = _program(
        "    let d = pub_read()\n"
        "    pub_write(d)\n"
        "    let x = pub_read()\n"
        "    if x == 1 {\n"
        + "\n".join(f"        let w{i} = pub_read()" for i in range(16))
        + "\n        pub_write("
        + " + ".join(f"w{i}" for i in range(16))
        + ")\n    }\n    pub_write(x)"
    )
    for x in (1, 2):
        public = [7, x] + list(range(100, 116))
        want = [7, sum(range(100, 116))] if x == 1 else [7]
        want.append(x)
        assert _run(src, public, "lru") == want
        assert _run(src, public, "next-use") == want
    assert _spill_writes(src, "next-use") > 0


def test_a_loop_carried_variable_is_not_dropped_after_its_last_read_in_the_body():
    """a is read only at the top of the body; later in the body the pressure is high. It is
    live at the back edge (the next iteration reads it), so it must survive."""
    src = _program(
        "    let a = pub_read()\n"
        "    let mut acc = 0\n"
        "    for i in 0..3 {\n"
        "        acc = acc + a\n"
        + "\n".join(f"        let w{i} = pub_read()" for i in range(15))
        + "\n        acc = acc + "
        + " + ".join(f"w{i}" for i in range(15))
        + "\n    }\n    pub_write(acc)"
    )
    public = [5] + list(range(1, 46))
    want = [(3 * 5 + sum(range(1, 46))) % P]
    assert _run(src, public, "lru") == want
    assert _run(src, public, "next-use") == want


def test_asm_drops_dead_variables_instead_of_spilling_them():
    src = _program(
        "    let d = pub_read()\n"
        "    let e = pub_read()\n"
        "    pub_write(d + e)\n"
        "    let f = pub_read()\n"
        "    asm { push 3 write_io 1 }\n"
        "    pub_write(f)"
    )
    assert _run(src, [1, 2, 9], "lru") == [3, 3, 9]
    assert _run(src, [1, 2, 9], "next-use") == [3, 3, 9]
    assert _spill_writes(src, "lru") == 3
    assert _spill_writes(src, "next-use") == 1  # only f, read after the asm block


def test_weighted_cost_counts_loop_bodies_per_assumed_trip():
    from tasmopt.frontend.builder import LOOP_WEIGHT, weighted_cost

    body = (Op("Push", 1), Op("Pop", 1))
    loop = Op("Loop", fields=(("label", "l"), ("body", body)))
    branch = Op("IfElse", fields=(("then_body", body), ("else_body", (Op("Pop", 1),))))
    assert weighted_cost([Op("Push", 1), loop]) == 1 + 2 * LOOP_WEIGHT
    assert weighted_cost([branch]) == 3


def test_each_function_keeps_its_own_spill_addresses_after_the_trial_builds():
    """Every function is built once per eager-drop threshold; the allocator continues from
    the kept build, so two functions' spill homes never share a cell."""
    fn = (
        "fn f{n}(x: Field) -> Field {{\n"
        + "\n".join(f"    let v{i} = x * {i + 2}" for i in range(17))
        + "\n    "
        + " + ".join(f"v{i}" for i in range(17))
        + "\n}}\n"
    )
    src = "module t\n" + fn.format(n=1) + fn.format(n=2)
    from frontend_util import functions

    fns = functions(compile_source(src, "t.tri", spill="next-use", optimized=False))
    homes = []
    for name in ("f1", "f2"):
        flat = show(fns[name]).split()
        homes.append(
            {
                int(a[5:-1])
                for a, b in zip(flat, flat[1:], strict=False)
                if a.startswith("Push(") and int(a[5:-1]) >= SPILL_BASE and b == "WriteMem(1)"
            }
        )
    assert homes[0] and homes[1] and not homes[0] & homes[1]


# -- join layouts after if/else ----------------------------------------------------------------


def _only(monkeypatch, joins: bool) -> None:
    """Build every function once, eagerly dropping dead values, with or without joins."""
    from tasmopt.frontend import builder

    monkeypatch.setattr(builder, "TRIALS", ((0, joins, False),))
    monkeypatch.setattr(builder, "LAZY_TRIALS", ())


#: d and e are dead after the if/else; the branches need 15 and 16 fresh slots
JOIN = _program(
    "    let d = pub_read()\n"
    "    let e = pub_read()\n"
    "    let x = pub_read()\n"
    "    let keep = pub_read()\n"
    "    if x == 1 {\n"
    + "\n".join(f"        let w{i} = pub_read()" for i in range(14))
    + "\n        pub_write(d + "
    + " + ".join(f"w{i}" for i in range(14))
    + ")\n    } else {\n"
    + "\n".join(f"        let u{i} = pub_read()" for i in range(14))
    + "\n        pub_write(e * ("
    + " + ".join(f"u{i}" for i in range(14))
    + "))\n    }\n    pub_write(keep)"
)


def _reloads(src: str) -> int:
    ops = compile_source(src, "p.tri", spill="next-use", optimized=False)
    flat = show(ops).split()
    return sum(
        1
        for a, b in zip(flat, flat[1:], strict=False)
        if a.startswith("Push(") and int(a[5:-1]) >= SPILL_BASE and b == "ReadMem(1)"
    )


@pytest.mark.parametrize("x", [1, 2])
def test_branches_end_without_the_values_dead_after_them(monkeypatch, x):
    public = [3, 5, x, 77] + list(range(10, 24))
    s = sum(range(10, 24))
    want = [(3 + s) % P if x == 1 else 5 * s % P, 77]
    assert _run(JOIN, public, "lru") == want
    _only(monkeypatch, joins=False)
    without = _reloads(JOIN)
    assert _run(JOIN, public, "next-use") == want
    _only(monkeypatch, joins=True)
    assert _run(JOIN, public, "next-use") == want
    assert _reloads(JOIN) < without  # d and e are not brought back at the join


def test_a_value_owed_to_an_enclosing_loop_layout_is_not_dropped_at_a_join(monkeypatch):
    """n is read only by the loop bound, so it is dead inside the loop and after the if,
    but the loop body must end with the layout it started with, n included: the join keeps
    it (found while building this: without the check the build fails to restore the loop
    layout)."""
    src = _program(
        "    let a = pub_read()\n"
        "    pub_write(a)\n"
        "    let n = as_u32(pub_read())\n"
        "    let mut acc = 0\n"
        "    for i in 0..n bounded 8 {\n"
        "        let x = pub_read()\n"
        "        if x == 1 {\n"
        + "\n".join(f"            let w{i} = pub_read()" for i in range(12))
        + "\n            acc = acc + "
        + " + ".join(f"w{i}" for i in range(12))
        + "\n        } else {\n            acc = acc + x\n        }\n    }\n    pub_write(acc)"
    )
    public = [9, 3]
    want_acc = 0
    for it in range(3):
        x = 1 if it != 1 else 4
        public.append(x)
        if x == 1:
            vals = list(range(100 * it, 100 * it + 12))
            public += vals
            want_acc += sum(vals)
        else:
            want_acc += x
    for joins in (False, True):
        _only(monkeypatch, joins)
        assert _run(src, public, "next-use") == [9, want_acc % P]


# -- last reads take the variable itself ------------------------------------------------------


def _raw_main(src: str, spill: str = "next-use") -> str:
    from frontend_util import functions

    return show(functions(compile_source(src, "p.tri", spill=spill, optimized=False))["main"])


@pytest.mark.parametrize("expr", ["a + b", "b + a"])
def test_last_reads_take_the_variables_of_a_commutative_operator(expr):
    """b is on top: read first (operand order is free for ``+``) and taken; a is then right
    under b's value: used in place. Nothing is copied, nothing is left to pop."""
    src = _program(f"    let a = pub_read()\n    let b = pub_read()\n    pub_write({expr})")
    assert _raw_main(src) == "ReadIo(1) ReadIo(1) Add WriteIo(1)"
    assert "Dup" in _raw_main(src, "lru")
    assert _run(src, [4, 5], "next-use") == [9]


def test_a_variable_read_again_in_the_same_statement_is_copied_first():
    src = _program("    let a = pub_read()\n    let b = pub_read()\n    pub_write(a * a + b)")
    # a: copied, then its last read picks it up from under b (``pick 2``: the chain
    # Swap(1) Swap(2), one pick after the optimizer's rules; nothing left to pop);
    # b: used in place under a * a
    assert _raw_main(src) == "ReadIo(1) ReadIo(1) Dup(1) Swap(1) Swap(2) Mul Add WriteIo(1)"
    assert _run(src, [3, 4], "next-use") == [13]
    assert _run(src, [7, 0], "next-use") == [49]  # pick 1 (b) would give 0, pick 0 would give 0


def test_the_last_read_of_a_deep_variable_picks_it_up_in_order():
    """A five-element (Digest) variable below others, read for the last time as a call's
    argument: ``pick d`` per element moves all five, deepest first, and frees the slots; the
    values and their order are unchanged (distinct inputs, so a wrong element or order
    shows)."""
    src = (
        "program p\n"
        "fn dsum(x: Digest) -> Field {\n"
        "    let (d0, d1, d2, d3, d4) = x\n"
        "    d0 + 2 * d1 + 3 * d2 + 4 * d3 + 5 * d4\n"
        "}\n"
        "fn main() {\n"
        "    let d: Digest = (pub_read(), pub_read(), pub_read(), pub_read(), pub_read())\n"
        "    let a = pub_read()\n    let b = pub_read()\n"
        "    pub_write(a * b)\n"
        "    pub_write(dsum(d) + a)\n"
        "}\n"
    )
    assert "WriteIo(1) " + " ".join(
        ["Swap(1) Swap(2) Swap(3) Swap(4) Swap(5)"] * 5
    ) + " Call(dsum)" in _raw_main(src)
    public = [2, 3, 5, 7, 11, 13, 17]
    assert (
        _run(src, public, "next-use")
        == _run(src, public, "lru")
        == [
            13 * 17,
            2 + 6 + 15 + 28 + 55 + 13,
        ]
    )


def test_destructuring_a_variable_at_its_last_read_renames_it_in_place():
    """``let (d0, .., d4) = d`` with d read for the last time: the names take d's slots, no
    code at all; ``lru`` copies. Same outputs."""
    src = _program(
        "    let d: Digest = (pub_read(), pub_read(), pub_read(), pub_read(), pub_read())\n"
        "    let a = pub_read()\n"
        "    let (d0, d1, d2, d3, d4) = d\n"
        "    pub_write(d0 + 2 * d1 + 3 * d2 + 4 * d3 + 5 * d4 + a)"
    )
    raw = _raw_main(src)
    # no code for the destructuring: the first instructions after the reads pick d0 up
    assert raw.startswith("ReadIo(1) " * 6 + "Swap(1) Swap(2) Swap(3) Swap(4) Swap(5) Push(2)")
    public = [2, 3, 5, 7, 11, 13]
    assert _run(src, public, "next-use") == _run(src, public, "lru") == [119]


def test_a_non_commutative_operator_keeps_its_operand_order():
    src = _program(
        "    let a = as_u32(pub_read())\n    let b = as_u32(pub_read())\n"
        "    if a < b {\n        pub_write(1)\n    }\n    if b < a {\n        pub_write(2)\n    }"
    )
    for public, want in (([3, 4], [1]), ([4, 3], [2])):
        assert _run(src, public, "lru") == want
        assert _run(src, public, "next-use") == want


@pytest.mark.parametrize(
    ("body", "public", "want"),
    [
        # a read twice in one statement: the first read must copy
        ("    let a = pub_read()\n    pub_write(a * a)", [7], [49]),
        ("    let a = pub_read()\n    pub_write(a + a * a)", [3], [12]),
        # read again in a later statement
        ("    let a = pub_read()\n    pub_write(a + 1)\n    pub_write(a)", [7], [8, 7]),
        # read in a branch and after it
        (
            "    let a = pub_read()\n    let c = pub_read()\n    if c == 1 {\n"
            "        pub_write(a)\n    }\n    pub_write(a + c)",
            [6, 1],
            [6, 7],
        ),
        # read in a loop body: the next iteration reads it again
        (
            "    let a = pub_read()\n    let mut s = 0\n    for i in 0..3 {\n"
            "        s = s + a\n    }\n    pub_write(s)",
            [5],
            [15],
        ),
        # the loop variable, last read in the body
        (
            "    let mut s = 0\n    for i in 0..4 {\n        s = s + as_field(i)\n    }\n"
            "    pub_write(s)",
            [],
            [6],
        ),
    ],
)
def test_a_read_that_is_not_the_last_copies(body, public, want):
    src = _program(body)
    assert _run(src, public, "lru") == want
    assert _run(src, public, "next-use") == want


def test_a_variable_owed_to_a_branch_layout_is_copied_not_taken():
    """a's last read is inside the branch, but the branch must end with the layout it
    started with (a included): the read copies."""
    src = _program(
        "    let c = pub_read()\n    let a = pub_read()\n    if c == 1 {\n        pub_write(a)\n    }"
    )
    assert "IfOnly[Dup(0) WriteIo(1)]" in _raw_main(src)
    assert _run(src, [1, 8], "next-use") == [8]
    assert _run(src, [0, 8], "next-use") == []


# -- late reads: a call's plain arguments evaluated after its composite ones ------------------

ROOT = Path(__file__).resolve().parents[2]


def _module_ops(rel: str, monkeypatch, late: bool | None):
    """Raw next-use TIR of a corpus module; ``late`` False drops the late-read trials,
    None keeps every trial."""
    from tasmopt.frontend import builder, compile_modules

    if late is False:
        monkeypatch.setattr(builder, "TRIALS", tuple(t for t in builder.TRIALS if not t[2]))
    return compile_modules(ROOT / "corpus" / rel, [ROOT / "corpus"], spill="next-use")[-1].ops


def _function(ops, name: str) -> str:
    text = show(ops)
    start = text.index(f"FnStart({name})")
    return text[start : text.index("FnEnd", start)]


def test_late_reads_remove_the_spills_of_inner_products_loop(monkeypatch):
    """``acc + mul(load(a + off), load(b + off))``: with the accumulator's copy made
    after the product, the loop body stays within 16 elements (no RAM round trip), where the
    in-order builds spill."""
    assert "WriteMem" in _function(
        _module_ops("ext/xpoly.tri", monkeypatch, False), "inner_product"
    )
    monkeypatch.undo()
    assert "WriteMem" not in _function(
        _module_ops("ext/xpoly.tri", monkeypatch, None), "inner_product"
    )


def test_a_late_build_that_saves_no_ram_traffic_is_not_kept(monkeypatch):
    """poseidon.p2sponge hash_ram: the late build is cheaper by the static proxy but moves
    as many words through RAM; its rotations cost program words, and the optimized program
    once doubled its padded height (2048 -> 4096) for 5 cycles. The in-order build is kept."""
    plain = _function(_module_ops("poseidon/p2sponge.tri", monkeypatch, False), "hash_ram")
    monkeypatch.undo()
    assert _function(_module_ops("poseidon/p2sponge.tri", monkeypatch, None), "hash_ram") == plain


def test_a_branch_does_not_keep_a_value_only_the_other_branch_reads():
    """Liveness paths: inside the ``then`` branch the ``else`` branch's reads do not count
    (only one branch runs), so ``a`` is taken at its read in ``then``; but from the
    condition both branches are ahead, so ``c``, read in the condition and in ``else``, is
    not taken there. Both inputs run both branches right."""
    body, params = _checked_body(
        _program(
            "    let a = pub_read()\n    let c = pub_read()\n"
            "    if c == 1 {\n        pub_write(a)\n    } else {\n        pub_write(a + c)\n    }"
        )
    )
    live = Liveness(body, params)
    if_stmt = body.stmts[2]
    a = body.stmts[0].vars[0]
    c = body.stmts[1].vars[0]
    at_if = live.at(if_stmt)
    then_node = if_stmt.then.stmts[0] if if_stmt.then.stmts else if_stmt.then.tail
    then_tail = live.at(then_node)
    assert live.next_after(c, at_if) is not None  # the else branch reads c
    assert live.next_after(a, then_tail) is None  # from then, else's read of a is off-path
    assert live.next_use(a, at_if) == then_tail
    src = _program(
        "    let a = pub_read()\n    let c = pub_read()\n"
        "    if c == 1 {\n        pub_write(a)\n    } else {\n        pub_write(a + c)\n    }"
    )
    assert _run(src, [7, 1], "next-use") == [7]
    assert _run(src, [7, 5], "next-use") == [12]
