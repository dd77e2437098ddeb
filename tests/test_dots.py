"""The function-level ``dots`` pass (`tasmopt.optimizer.dots`): an inner-product loop over two
arrays becomes one ``xx_dot_step`` (extension-field elements) or ``xb_dot_step`` (base-field
scalars times extension-field elements) per iteration. Behaviour (the returned accumulator
and the whole op stack, every element distinct) is kept at trip counts 0, 1, 2 and many,
with the arrays apart, equal or overlapping; adversarial: another pointer step, a product
multiplied into the accumulator instead of added, one array read twice, a subtraction, a
RAM write, an output, a failure guard, another element changed, a loop another function
calls or reached by fall-through, and a wrong rewrite is caught by the function check."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules, link
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.dots import dot, find_dot_loops
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: corpus ext.xpoly inner_product(a, b, n) as the earlier passes leave it: st5 walks b by
#: 3, a's element is read at st4 + st5 - st3 (st3 = b, st4 = a), the accumulator at st0..2
SITE = """\
__ip:
    dup 0
    push 3
    mul
    dup 2
    add
    pick 2
    pick 3
    dup 1
    push 0
    push 0
    push 0
    pick 7
    skiz
    call __loop__2
    pick 3
    pick 4
    pick 5
    pick 6
    pop 4
    return

__loop__2:
    BODY
    recurse_or_return
"""

XX = """dup 3
    push -1
    mul
    dup 6
    add
    dup 5
    add
    addi 2
    read_mem 3
    pop 1
    pick 8
    addi 2
    read_mem 3
    addi 4
    place 11
    xx_mul
    pick 5
    pick 5
    pick 5
    pick 3
    pick 4
    pick 5
    xx_add"""

#: sum_i RAM[a + i] * X(RAM[b + 3i ..]): the scalar address a + (st5 - b) / 3
XB = f"""dup 3
    push -1
    mul
    dup 6
    add
    push {pow(3, P - 2, P)}
    mul
    dup 5
    add
    read_mem 1
    pop 1
    dup 6
    addi 2
    read_mem 3
    pop 1
    pick 3
    xb_mul
    xx_add
    pick 5
    addi 3
    place 5"""


def _text(body: str = XX) -> str:
    return SITE.replace("BODY", body)


def _outcome(text: str, a: int, b: int, n: int, seed: int = 0):
    """(ok, outputs, the op stack at halt, cycles) of ``ip(a, b, n)`` on random RAM."""
    rng = random.Random(seed)
    ram = {k: rng.randrange(P) for k in range(min(a, b), max(a, b) + 3 * n + 6)}
    main = "main:\n    read_io 3\n    call __ip\n    write_io 3\n    halt\n"
    below = [2000 + k for k in range(16)]
    r = run(parse(main + text), VmInput(public_input=(a, b, n), ram=ram, initial_stack=below))
    ok = r.error is None
    return ok, list(r.public_output), list(r.stack) if ok else None, r.cycles


def _dotted(text: str, step: str) -> str:
    lines = text.splitlines()
    found = find_dot_loops(lines)
    assert len(found) == 1, "expected the loop to qualify"
    assert found[0].step == step
    return "\n".join(dot(lines, found[0])[0]) + "\n"


CASES = [(100, 400, 0), (100, 400, 1), (100, 400, 2), (100, 400, 7), (50, 50, 3), (50, 52, 4)]


@pytest.mark.parametrize("a, b, n", CASES)
@pytest.mark.parametrize("body, step", [(XX, "xx_dot_step"), (XB, "xb_dot_step")])
def test_dot_loops_keep_behaviour_at_trip_counts_zero_one_and_many(a, b, n, body, step):
    old = _text(body)
    new = _dotted(old, step)
    assert step in new
    x, y = _outcome(old, a, b, n, seed=n), _outcome(new, a, b, n, seed=n)
    assert x[0] and y[0]
    assert x[1:3] == y[1:3]
    if n > 1:
        assert y[3] < x[3]


def test_the_old_loop_is_an_inner_product():
    """The reference text computes what its name says (so the comparisons above compare
    something): one trip of the base-field version is RAM[a] times the element at b."""
    ok, out, _, _ = _outcome(_text(XB), 10, 20, 1, seed=5)
    rng = random.Random(5)
    ram = {k: rng.randrange(P) for k in range(10, 20 + 3 + 6)}
    assert ok and out == [ram[10] * ram[20 + j] % P for j in range(3)]


@pytest.mark.parametrize(
    "body, why",
    [
        (XX.replace("addi 4", "addi 5"), "the pointer steps by 4, the dot step by 3"),
        (XX.replace("xx_add", "xx_mul"), "the product multiplied into the accumulator"),
        (XX.replace("pick 8\n    addi 2", "dup 7\n    addi 2\n    pick 9\n    pop 1"), "a"),
        (XX.replace("xx_add", "push -1\n    xb_mul\n    xx_add"), "a subtraction"),
        (XX + "\n    push 9\n    push 77\n    write_mem 1\n    pop 1", "a RAM write"),
        (XX + "\n    push 1\n    write_io 1", "an output"),
        (XX + "\n    dup 0\n    push 0\n    eq\n    push 0\n    eq\n    assert", "a guard"),
        (XX + "\n    pick 4\n    addi 1\n    place 4", "another element changes"),
        (XB.replace("pick 5\n    addi 3", "pick 5\n    addi 6"), "b steps by 6"),
    ],
    ids=[
        "step-4",
        "multiplied",
        "one-array",
        "subtracted",
        "ram-write",
        "output",
        "guard",
        "other-element",
        "xb-step-6",
    ],
)
def test_bodies_the_proof_does_not_cover_are_left_alone(body, why):
    assert find_dot_loops(_text(body).splitlines()) == [], why


def test_a_loop_another_function_calls_or_reached_by_fall_through_is_left_alone():
    assert find_dot_loops(_text().splitlines(), others_call=frozenset({"__loop__2"})) == []
    fall = _text().replace("    pop 4\n    return\n\n__loop__2:", "    pop 4\n\n__loop__2:")
    assert find_dot_loops(fall.splitlines()) == []


#: inner_product and the callees the inline pass must merge into it first
_CLOSURE = ("ext_xarith__x3", "ext_xarith__zero", "ext_xarith__add", "ext_xarith__mul")


def _compile_xpoly(name: str):
    mods = compile_modules(
        ROOT / "corpus" / "ext" / "xpoly.tri", [ROOT / "corpus"], spill="next-use"
    )
    full = f"ext_xpoly__{name}"
    only = frozenset({full, "ext_xpoly__load", *_CLOSURE})
    r = compile_tir(link(mods), options=CompileOptions(sources=("rules", "search"), only=only))
    return next(f for f in r.functions if f.name == full)


def test_the_optimizer_uses_xx_dot_step_for_inner_product_and_keeps_behaviour():
    """corpus ext.xpoly inner_product: fewer cycles, no execution table taller, the padded
    height no larger, the same result and op stack at 0, 1 and many trips."""
    f = _compile_xpoly("inner_product")
    assert any(n.startswith("dots") and "->" in n for n in f.notes), f.notes
    assert f.cycles < f.baseline_cycles
    assert f.padded_height <= f.baseline_padded_height
    for table in ("processor", "op_stack", "ram", "jump_stack"):
        assert f.heights.get(table, 0) <= f.baseline_heights.get(table, 0), table
    text = "\n".join(f.tasm).replace("__ext_xpoly__inner_product:", "__ip:") + "\n"
    assert "xx_dot_step" in text
    for a, b, n in CASES:
        assert _outcome(text, a, b, n, seed=n)[1:3] == _outcome(_text(), a, b, n, seed=n)[1:3]


def test_a_wrong_rewrite_is_caught_by_the_function_check(monkeypatch):
    """If the proof were skipped, the first plan tried puts the accumulator's words at
    st2..st4 in the wrong order (the right one is the reverse); the function check must
    refuse the rewrite."""
    import tasmopt.optimizer.dots as mod

    monkeypatch.setattr(mod, "_proven", lambda *a: True)
    lines = _text().splitlines()
    (d,) = find_dot_loops(lines)
    new = "\n".join(dot(lines, d)[0]) + "\n"
    assert _outcome(new, 100, 400, 3)[1] != _outcome(_text(), 100, 400, 3)[1]  # really wrong
    f = _compile_xpoly("inner_product")
    assert not any(n.startswith("dots") and "->" in n for n in f.notes), f.notes
    assert any(n.startswith("dots") for n in f.notes), f.notes


# -- more ways to make the rewrite accept a different program --------------------------------


@pytest.mark.parametrize(
    "body, why",
    [
        (XX + "\n    sponge_init", "a sponge effect"),
        (
            XX.replace("xx_add", "dup 2\n    dup 2\n    dup 2\n    xx_mul\n    xx_add"),
            "a high-degree term: one operand squared before the addition",
        ),
        (
            XX + "\n    dup 2\n    push 12345\n    eq\n    push 0\n    eq\n    assert",
            "a rare guard: fails only when an accumulator word is 12345",
        ),
    ],
    ids=["sponge", "high-degree", "rare-guard"],
)
def test_more_bodies_the_proof_does_not_cover_are_left_alone(body, why):
    assert find_dot_loops(_text(body).splitlines()) == [], why


def test_a_label_inside_the_body_is_left_alone():
    mid = _text().replace("    xx_mul\n", "    xx_mul\n\n__mid:\n", 1)
    assert find_dot_loops(mid.splitlines()) == []


def test_a_client_baseline_that_differs_from_our_lowering_is_returned_as_sent():
    """The client's inner_product starts its index at 1: it disagrees with our lowering, so
    its function comes back as sent, with no dots rewrite."""
    from tasmopt.lower.triton import lower

    mods = compile_modules(
        ROOT / "corpus" / "ext" / "xpoly.tri", [ROOT / "corpus"], spill="next-use"
    )
    ops = link(mods)
    ours = "\n".join(lower(ops).lines)
    head = "__ext_xpoly__inner_product:\n    call __ext_xarith__zero\n    push 0\n"
    assert head in ours
    client = ours.replace(head, head.replace("push 0", "push 1"), 1)
    only = frozenset({"ext_xpoly__inner_product", "ext_xpoly__load", *_CLOSURE})
    r = compile_tir(
        ops, baseline_tasm=client, options=CompileOptions(sources=("rules", "search"), only=only)
    )
    f = next(f for f in r.functions if f.name == "ext_xpoly__inner_product")
    assert f.mismatch is not None
    assert not any(n.startswith("dots") for n in f.notes), f.notes
    for a, b, n in ((100, 400, 1), (100, 400, 4)):
        got, want, other = (
            _outcome(t.replace("__ext_xpoly__inner_product", "__ip"), a, b, n, seed=n)[1]
            for t in (r.tasm, client, ours)
        )
        assert got == want != other
