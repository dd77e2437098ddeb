"""The function-level ``absorb`` pass (`tasmopt.optimizer.absorb`): ten RAM words absorbed per
iteration with ``read_mem`` and ``sponge_absorb`` become one ``sponge_absorb_mem``.
Behaviour (the sponge state, read back by squeezing, and the whole op stack, every element
distinct so a clobbered one shows) is kept at trip counts 0, 1 and many and at several read
offsets; adversarial: words absorbed in another order, a pointer step other than 10, a RAM
write, an output, another element changed, a failure guard, a loop another function calls
or reached by fall-through, a label before the call, and a wrong rewrite is caught by the
function check."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tasmopt.frontend import compile_modules
from tasmopt.isa import P
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.absorb import absorb, enter, find_absorptions, leave, new_body
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.state import VmInput

ROOT = Path(__file__).resolve().parents[1]

#: absorb(base, chunks) as the loops and pointers passes leave corpus hash.sponge's
#: absorb_ram: st5 is the pointer, st6 the end, BODY brings RAM[st5 .. st5+9] up in the
#: order sponge_absorb takes them (st0 = RAM[st5])
ABSORB = """\
__absorb:
    dup 0
    push 10
    mul
    dup 2
    add
    place 6
    dup 1
    swap 6
    swap 1
    skiz
    call __loop__1
    swap 5
    pick 6
    pop 3
    return

__loop__1:
    BODY
    recurse_or_return
"""

#: the body the passes leave (reads at st5 + 0 .. 9)
BODY = """dup 5
    addi 9
    read_mem 5
    read_mem 4
    pop 1
    pick 14
    read_mem 1
    addi 11
    place 15
    sponge_absorb"""


#: the same words at st5 + OFF .. st5 + OFF + 9, read one by one (st5 stepped by 10)
def _body_at(off: int, order: list[int] | None = None, step: int = 10) -> str:
    order = list(range(9, -1, -1)) if order is None else order
    code = []
    for k, j in enumerate(order):  # word j of the chunk, pushed k-th
        code += [f"dup {5 + k}", f"addi {off + j}", "read_mem 1", "pop 1"]
    code += ["pick 15", f"addi {step}", "place 15", "sponge_absorb"]
    return "\n    ".join(code)


def _text(body: str = BODY) -> str:
    return ABSORB.replace("BODY", body)


def _outcome(text: str, base: int, chunks: int, seed: int = 0):
    """(ok, the squeezed rate, the op stack at halt, cycles) of ``absorb(base, chunks)``
    between ``sponge_init`` and ``sponge_squeeze``, distinct values below the arguments."""
    rng = random.Random(seed)
    ram = {base + i: rng.randrange(P) for i in range(10 * chunks + 12)}
    main = (
        "main:\n    sponge_init\n    read_io 2\n    call __absorb\n"
        "    sponge_squeeze\n    write_io 5\n    write_io 5\n    halt\n"
    )
    below = [1000 + k for k in range(16)]
    r = run(parse(main + text), VmInput(public_input=(base, chunks), ram=ram, initial_stack=below))
    ok = r.error is None
    return ok, list(r.public_output), list(r.stack) if ok else None, r.cycles


def _absorbed(text: str, offset: int = 0) -> str:
    lines = text.splitlines()
    found = find_absorptions(lines)
    assert len(found) == 1, "expected the loop to qualify"
    assert found[0].offset == offset
    return "\n".join(absorb(lines, found[0])[0]) + "\n"


@pytest.mark.parametrize("chunks", [0, 1, 2, 5])
@pytest.mark.parametrize("base", [40, 2**31 + 7])
def test_absorbed_loops_keep_behaviour_at_trip_counts_zero_one_and_many(base, chunks):
    old = _text()
    new = _absorbed(old)
    assert "sponge_absorb_mem" in new
    a, b = _outcome(old, base, chunks), _outcome(new, base, chunks)
    assert a[0] and b[0]
    assert a[1:3] == b[1:3]
    if chunks > 1:
        assert b[3] < a[3]  # fewer cycles once the loop runs


@pytest.mark.parametrize("off", [0, 1, -3, 7])
def test_words_read_at_an_offset_from_the_pointer_keep_behaviour(off):
    old = _text(_body_at(off))
    new = _absorbed(old, off)
    for chunks in (0, 1, 3):
        a, b = _outcome(old, 100, chunks, seed=chunks), _outcome(new, 100, chunks, seed=chunks)
        assert a[0] and a[1:3] == b[1:3]


@pytest.mark.parametrize(
    "body, why",
    [
        (_body_at(0, order=list(range(10))), "the words absorbed in the other order"),
        (_body_at(0, order=[9, 8, 7, 6, 5, 4, 3, 2, 0, 1]), "two words exchanged"),
        (_body_at(0, step=9), "a pointer step of 9: the chunks overlap"),
        (_body_at(0, step=-10), "a pointer walking down"),
        (BODY + "\n    push 0\n    push 7\n    write_mem 1\n    pop 1", "a RAM write"),
        (BODY + "\n    push 3\n    write_io 1", "an output"),
        (BODY + "\n    pick 1\n    addi 1\n    place 1", "another element changes"),
        (BODY + "\n    dup 0\n    assert", "a failure guard"),
        (BODY.replace("sponge_absorb", "pop 5\n    pop 5"), "no absorption"),
        (BODY.replace("dup 5\n    addi 9", "dup 6\n    addi 9"), "words read from the end"),
    ],
    ids=lambda x: x if len(x) < 50 else None,
)
def test_bodies_the_proof_does_not_cover_are_left_alone(body, why):
    assert find_absorptions(_text(body).splitlines()) == [], why


def test_a_loop_another_function_calls_or_reached_by_fall_through_is_left_alone():
    assert find_absorptions(_text().splitlines(), others_call=frozenset({"__loop__1"})) == []
    fall = _text().replace("    pop 3\n    return\n\n__loop__1:", "    pop 3\n\n__loop__1:")
    assert find_absorptions(fall.splitlines()) == []


def test_a_label_right_before_the_call_or_its_skiz_is_left_alone():
    for old, new in (
        ("    skiz\n    call __loop__1", "__in:\n    skiz\n    call __loop__1"),
        ("    skiz\n    call __loop__1", "    skiz\n__in:\n    call __loop__1"),
    ):
        assert find_absorptions(_text().replace(old, new).splitlines()) == []


def test_the_layout_code_is_what_the_proof_assumes():
    """``T; T^-1`` is the identity (a skipped call) and the scratch words sit at st1..st4."""
    for under in (0, 1):
        code = enter(3, under) + (["pop 1"] if under else []) + leave()
        text = "main:\n    " + "\n    ".join(["read_io 1"] * under + code) + "\n    halt\n"
        stack = [7000 + k for k in range(16)]
        r = run(parse(text), VmInput(public_input=(0,) * under, initial_stack=stack))
        assert r.error is None and list(r.stack) == stack
    assert new_body()[0] == "sponge_absorb_mem"


def _compile_sponge(name: str):
    mods = compile_modules(ROOT / "corpus" / "hash" / "sponge.tri", [ROOT / "corpus"])
    opts = CompileOptions(sources=("rules", "search"), only=frozenset({name}))
    r = compile_tir(mods[-1].ops, options=opts)
    return next(f for f in r.functions if f.name == name)


def test_the_optimizer_absorbs_from_memory_and_keeps_behaviour():
    """corpus hash.sponge absorb_ram: fewer cycles, no execution table taller, the padded
    height no larger, the same sponge state and op stack for 0, 1 and many chunks."""
    f = _compile_sponge("absorb_ram")
    assert any(n.startswith("absorb") and "->" in n for n in f.notes), f.notes
    assert f.cycles < f.baseline_cycles
    assert f.padded_height <= f.baseline_padded_height
    for table in ("processor", "op_stack", "ram", "jump_stack", "hash"):
        assert f.heights.get(table, 0) <= f.baseline_heights.get(table, 0), table
    text = "\n".join(f.tasm).replace("__absorb_ram:", "__absorb:") + "\n"
    assert "sponge_absorb_mem" in text
    ref = _text()
    for chunks in (0, 1, 4):
        assert _outcome(text, 64, chunks)[1:3] == _outcome(ref, 64, chunks)[1:3]


def test_a_wrong_rewrite_is_caught_by_the_function_check(monkeypatch):
    """If the new body stepped the pointer copy by 11 (the loop would read past its chunks
    and stop elsewhere) and the symbolic facts were skipped, the function check must
    refuse it."""
    import tasmopt.optimizer.absorb as mod

    monkeypatch.setattr(
        mod, "new_body", lambda: ["sponge_absorb_mem", "pick 5", "addi 11", "place 5"]
    )
    monkeypatch.setattr(mod, "_body_ok", lambda *a: True)
    monkeypatch.setattr(mod, "_new_body_ok", lambda *a: True)
    f = _compile_sponge("absorb_ram")
    assert not any(n.startswith("absorb") and "->" in n for n in f.notes), f.notes
    assert any(n.startswith("absorb") for n in f.notes), f.notes


# -- more ways to make the rewrite accept a different program --------------------------------


def test_a_rare_guard_in_the_body_is_left_alone():
    """The body fails only when RAM[p] is 12345: random witnesses would never see it fail,
    and the new body has no such check."""
    rare = BODY + "\n    dup 0\n    push 12345\n    eq\n    push 0\n    eq\n    assert"
    assert find_absorptions(_text(rare).splitlines()) == []


def test_a_label_inside_the_body_is_left_alone():
    """A jump target in the middle of the body (mid-block entry): neither half is a loop
    entered only by its call."""
    mid = _text().replace("    read_mem 4\n", "    read_mem 4\n\n__mid:\n", 1)
    assert find_absorptions(mid.splitlines()) == []


def test_a_client_baseline_that_differs_from_our_lowering_is_returned_as_sent():
    """The client's absorb_ram reads word 8 where ours reads word 9: it disagrees with our
    lowering, so its function comes back as sent, with no absorb rewrite."""
    from tasmopt.lower.triton import lower

    ops = compile_modules(ROOT / "corpus" / "hash" / "sponge.tri", [ROOT / "corpus"])[-1].ops
    ours = "\n".join(lower(ops).lines)
    assert "    push 9\n    add\n    read_mem 1\n" in ours
    client = ours.replace(
        "    push 9\n    add\n    read_mem 1\n", "    push 8\n    add\n    read_mem 1\n", 1
    )
    r = compile_tir(ops, baseline_tasm=client, options=CompileOptions(sources=("rules", "search")))
    f = next(f for f in r.functions if f.name == "absorb_ram")
    assert f.mismatch is not None
    assert not any(n.startswith("absorb") for n in f.notes), f.notes
    for chunks in (1, 3):
        got, want, other = (
            _outcome(t.replace("__absorb_ram", "__absorb"), 64, chunks)[1]
            for t in (r.tasm, client, ours)
        )
        assert got == want != other
