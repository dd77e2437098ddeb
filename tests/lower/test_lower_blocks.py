"""Per-function split (spec/tir.md §7.2) and straight-line blocks (design §2)."""

from __future__ import annotations

from lowerkit import EXAMPLE_B

from tasmopt.lower.blocks import blocks, split_functions
from tasmopt.lower.effects import sequence_effect
from tasmopt.tir.codec import decode, tir_hash
from tasmopt.tir.ops import STRUCTURE_KINDS, Op


def test_split_real_data(trident_std):
    total = 0
    for name, module in trident_std.items():
        ops = decode(module["tir"])
        chunks = split_functions(ops)
        fns = [c for c in chunks if not c.name.startswith("__")]
        assert [c.name for c in fns] == module["functions"], name
        total += len(fns)
        # no nested FnStart in the library: the chunks tile the op list exactly
        assert sum((c.ops for c in chunks), ()) == ops, name
        for c in chunks:
            assert ops[c.start : c.start + len(c.ops)] == c.ops
            if c.name.startswith("__"):
                assert c.name == "__entry" and all(o.kind in ("Comment", "Entry") for o in c.ops)
            else:
                assert c.ops[0] == Op("FnStart", c.name) and c.ops[-1] == Op("FnEnd")
    assert total == 242


def names(ops_json) -> list[tuple[str, list, int]]:
    from tasmopt.tir.codec import encode

    return [(c.name, encode(c.ops), c.start) for c in split_functions(decode(ops_json))]


def test_split_entry_and_trailing():
    assert names(
        [
            {"Comment": "c"},
            {"Entry": "main"},
            {"FnStart": "main"},
            "Return",
            "FnEnd",
            {"Push": 1},
            "Add",
        ]
    ) == [
        ("__entry", [{"Comment": "c"}, {"Entry": "main"}], 0),
        ("main", [{"FnStart": "main"}, "Return", "FnEnd"], 2),
        ("__trailing", [{"Push": 1}, "Add"], 5),
    ]
    # an unclosed function is emitted under its own name
    assert names([{"FnStart": "f"}, "Add"]) == [("f", [{"FnStart": "f"}, "Add"], 0)]
    assert names([]) == []


def test_split_nested_fnstart_discards_like_upstream():
    # the builder's match pattern: f's head is discarded, its tail comes out under the nested
    # name without a FnStart (upstream behaviour, reproduced)
    assert names(
        [
            {"FnStart": "f"},
            {"Call": "m"},
            {"Pop": 1},
            {"FnStart": "m"},
            {"Push": 7},
            "Return",
            "FnEnd",
            {"Pop": 2},
            "Return",
            "FnEnd",
        ]
    ) == [
        ("m", [{"FnStart": "m"}, {"Push": 7}, "Return", "FnEnd"], 3),
        ("m", [{"Pop": 2}, "Return", "FnEnd"], 7),
    ]
    # a stray FnEnd before any function: upstream's initial (empty) name
    assert names(["Add", "FnEnd"]) == [("", ["Add", "FnEnd"], 0)]


def test_blocks_of_example_b():
    ops = decode(EXAMPLE_B)
    got = [
        (b.index, b.path, [repr(o) for o in b.ops], b.entry_depth, b.net_effect)
        for b in blocks(ops)
    ]
    assert got == [
        (0, "tir[1]", ["Dup(0)", "Push(0)", "Eq"], 1, 1),
        (1, "tir[4].IfElse.then_body[0]", ["Push(10)", "WriteIo(1)"], 0, 0),
        (2, "tir[4].IfElse.else_body[0]", ["Dup(0)"], 1, 1),
        (3, "tir[4].IfElse.else_body[1].IfOnly.then_body[0]", ["Push(99)", "WriteIo(1)"], 0, 0),
        (4, "tir[5]", ["Dup(0)"], 1, 1),
        (5, "tir[7]", ["Pop(1)"], 1, -1),
        (6, "tir[8].Loop.body[0]", ["Hint(1)", "WriteIo(1)"], 0, 0),
        (7, "tir[9]", ["Pop(1)"], 1, -1),
    ]
    b = blocks(ops)[6]
    assert b.op_paths == ("tir[8].Loop.body[0]", "tir[8].Loop.body[1]")
    assert b.tir_hash == tir_hash(b.ops)
    # request-global paths for a chunk that starts later in the request
    assert blocks(ops, start=40)[0].path == "tir[41]"


def test_comments_are_dropped_without_splitting_a_block():
    ops = decode(
        [
            {"FnStart": "f"},
            {"Push": 1},
            {"Comment": "x"},
            {"Push": 2},
            "Add",
            {"Comment": "y"},
            "Return",
            "FnEnd",
        ]
    )
    (only,) = blocks(ops)
    assert [o.kind for o in only.ops] == ["Push", "Push", "Add"]
    assert only.op_paths == ("tir[1]", "tir[3]", "tir[4]")


def test_foreign_functions_are_skipped():
    ops = decode(
        [
            {"FnStart": "f"},
            {"Push": 1},
            {"FnStart": "m"},
            {"Push": 7},
            "Return",
            "FnEnd",
            {"Pop": 1},
            "Return",
            "FnEnd",
            {"Push": 3},
        ]
    )
    assert [b.path for b in blocks(ops[:9])] == ["tir[1]", "tir[6]"]
    assert [b.path for b in blocks(ops[2:6], start=2)] == ["tir[3]"]
    assert [b.path for b in blocks(ops, top_level=True)] == ["tir[9]"]


def test_blocks_real_data(trident_std):
    count, depths = 0, []
    for module in trident_std.values():
        ops = decode(module["tir"])
        for chunk in split_functions(ops):
            found = blocks(chunk.ops, start=chunk.start)
            assert [b.index for b in found] == list(range(len(found)))
            for b in found:
                count += 1
                assert b.ops and not any(
                    o.kind in STRUCTURE_KINDS or o.kind == "Comment" for o in b.ops
                )
                eff = sequence_effect(b.ops)
                assert (b.entry_depth, b.net_effect, b.pops) == (eff.depth, eff.net, eff.pops)
                assert b.entry_depth >= b.pops >= 0 and b.pops + b.net_effect >= 0
                if b.ops[0].kind in ("Dup", "Swap"):  # the first op reads its own depth
                    assert b.entry_depth >= b.ops[0].value + 1
                depths.append(b.entry_depth)
    assert count > 900
    # the deepest block is keccak256's epilogue (pops 35 elements below the result)
    assert max(depths) == 36
