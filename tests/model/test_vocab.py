"""Vocabulary: derived from the ISA, canonical, round-trips every block's TASM."""

from __future__ import annotations

import pytest
from modelkit import SHARED, lowered_blocks

from tasmopt.isa import P, instruction_set, slot_flow
from tasmopt.model.graph import immediates
from tasmopt.model.vocab import EOS, MAX_POINTERS, POINTER_KINDS, VocabError, vocab
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.vm.symbolic import CONTROL_FLOW


def test_every_straight_line_instruction_has_tokens() -> None:
    v = vocab()
    names = {t.name for t in v.tokens if t.name}
    for ins in instruction_set():
        if ins.name in CONTROL_FLOW or ins.arg_kind == "label":
            assert ins.name not in names
        else:
            assert ins.name in names, ins.name
    texts = {t.text for t in v.tokens}
    assert {
        "dup 0",
        "dup 15",
        "swap 1",
        "swap 15",
        "pick 15",
        "place 15",
        "pop 5",
        "read_mem 5",
        "push -1",
        "push 0",
        "addi -1",
        "push 1073741824",
    } <= texts
    assert len(texts) == len(v)  # no two tokens print the same
    assert sum(t.pointer is not None for t in v.tokens) == len(POINTER_KINDS) * MAX_POINTERS


def test_round_trip_with_pointers() -> None:
    v = vocab()
    imms = [123456789, P - 7, 5]
    ins = parse_instructions(
        "push 123456789\npush -123456789\naddi 123456789\n"
        "addi -123456789\npush -1\npush 5\ndup 3\nxx_dot_step"
    )
    ids = v.encode(ins, imms)
    assert ids[-1] == EOS
    assert v.tokens[ids[0]].pointer == (0, 0)
    assert v.tokens[ids[5]].pointer is None  # 5 is a small constant: no second spelling
    assert v.decode(ids, imms) == ins


def test_unknown_constant_raises_and_is_reported() -> None:
    v = vocab()
    with pytest.raises(VocabError):
        v.encode([Instr("push", 987654321)], [])
    ids, bad = v.encode_lines(["push 987654321", "add"], [], strict=False)
    assert bad == ["push 987654321"] and len(ids) == 2


def test_pointer_validity_makes_spelling_unique() -> None:
    v = vocab()
    valid = v.pointer_valid([77777, 3, 77777])
    plain = valid[:MAX_POINTERS]
    assert plain[:3] == [True, False, False]  # 3 is small, the second 77777 a repeat
    assert not any(plain[3:])


def test_slot_flow_of_stack_instructions() -> None:
    assert slot_flow("swap", 2).src == (2, 1, 0)
    assert slot_flow("pick", 2).src == (2, 0, 1)
    assert slot_flow("place", 2).src == (1, 2, 0)
    assert slot_flow("dup", 3).reads == (3,)
    assert slot_flow("hash").delta == -5
    assert slot_flow("merkle_step_mem").src[6] == 6  # st6 kept, st5 and st7 rewritten


def test_every_real_baseline_block_round_trips() -> None:
    v = vocab()
    total = bad = 0
    for path in sorted(SHARED.glob("*.json")):
        for ops, _, _, base in lowered_blocks(path):
            total += 1
            imms = immediates(ops)
            try:
                assert v.decode(v.encode(base, imms), imms) == base
            except VocabError:
                bad += 1
    assert total > 900 and bad == 0
