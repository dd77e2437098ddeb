"""Stage 3's proposals (`tasmopt.optimizer.candidates`): the peephole-polished versions of
every other source's candidates join the rules source's (their text is the rules'), nothing
is proposed twice, and without the rules source nothing is polished."""

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
    own = code("dup 0;dup 0;pop 1")
    out = polish({"search": [[rough]], "rules": [[own]]})
    assert out["search"] == [[rough]]  # the source's own candidates, unchanged
    assert out["rules"][0][0] == own
    assert [[str(i) for i in c] for c in out["rules"][0][1:]] == [["dup 0", "add"]]


def test_polish_adds_nothing_when_the_rules_change_nothing_or_are_not_asked():
    clean = code("dup 0;add")
    assert polish({"model": [[clean], []], "rules": [[], []]}) == {
        "model": [[clean], []],
        "rules": [[], []],
    }
    rough = code("dup 0;dup 0;pop 1;add")
    assert polish({"model": [[rough]]}) == {"model": [[rough]]}


def test_polished_candidates_are_checked_like_any_other():
    base = code("dup 0;dup 0;pop 1;add;push 0;add")
    task = BlockTask("f", 0, "tir[0]", (), tuple(base), 1, 0, "h")
    props = polish({"search": [[code("dup 0;dup 0;pop 1;add")]], "rules": [[]]})
    checks, owners = build_checks([task], props, CompileOptions())
    assert owners == [(0, ""), (0, "search"), (0, "rules")]
    assert all(check_block(c).equivalent for c in checks)
