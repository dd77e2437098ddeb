"""Stage 3's proposals (`tasmopt.optimizer.candidates`): every source's candidates are
followed by their peephole-polished versions, attributed to the same source, and nothing the
rules source proposes is duplicated."""

from __future__ import annotations

from tasmopt.optimizer.candidates import build_checks, polish
from tasmopt.report import CompileOptions
from tasmopt.sources import BlockTask
from tasmopt.tasm.parser import parse_instructions
from tasmopt.vm.equivalence import check_block


def code(text: str):
    return parse_instructions("\n".join(text.split(";")))


def test_a_candidate_with_a_redundant_copy_gets_its_polished_version():
    rough = code("dup 0;dup 0;pop 1;add")
    out = polish({"search": [[rough]], "rules": [[code("dup 0;dup 0;pop 1")]]})
    assert out["search"][0][0] == rough  # the source's own candidate first, unchanged
    assert [str(i) for i in out["search"][0][1]] == ["dup 0", "add"]
    assert len(out["rules"][0]) == 1  # the rules' own candidates are left as they are


def test_polish_adds_nothing_when_the_rules_change_nothing():
    clean = code("dup 0;add")
    assert polish({"model": [[clean], []]}) == {"model": [[clean], []]}


def test_polished_candidates_are_checked_like_any_other():
    base = code("dup 0;dup 0;pop 1;add;push 0;add")
    task = BlockTask("f", 0, "tir[0]", (), tuple(base), 1, 0, "h")
    props = polish({"search": [[code("dup 0;dup 0;pop 1;add")]]})
    checks, owners = build_checks([task], props, CompileOptions())
    assert [o for o in owners] == [(0, ""), (0, "search"), (0, "search")]
    assert all(check_block(c).equivalent for c in checks)
