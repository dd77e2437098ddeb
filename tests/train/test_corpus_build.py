"""`tasmopt corpus build` on a tiny corpus: rows, splits by module, targets, augmentation,
stats; and the augmentations themselves are verified."""

from __future__ import annotations

import json
from pathlib import Path

from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode
from tasmopt.train.augment import coverage, lower_block, reorder_variants, target_variants
from tasmopt.train.corpus import BuildConfig, build, iter_function_rows
from tasmopt.train.dataset import read_pairs
from tasmopt.vm.equivalence import BlockCheck, check_block

ALGEBRA = """module demo.algebra

pub fn mul_add(a: Field, b: Field, c: Field) -> Field {
    a * b + c
}

pub fn square_sum(a: Field, b: Field) -> Field {
    let s: Field = a + b
    s * s
}

pub fn poly(x: Field) -> Field {
    let x2: Field = x * x
    x2 * x + x2 + x + 7
}
"""

BITS = """module demo.bits

pub fn mix(a: U32, b: U32) -> U32 {
    (a ^ b) & a
}

pub fn low(x: Field) -> U32 {
    as_u32(x)
}
"""


def _corpus(tmp: Path) -> Path:
    root = tmp / "corpus"
    (root / "demo").mkdir(parents=True)
    (root / "demo" / "algebra.tri").write_text(ALGEBRA)
    (root / "demo" / "bits.tri").write_text(BITS)
    (root / "holdout.txt").write_text("# holdout\ndemo.bits\n")
    return root


def test_build_writes_pairs_functions_and_stats(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    out = tmp_path / "ds"
    cfg = BuildConfig(search_budget_s=0.2, min_pairs=12, augment_rounds=2, jobs=1)
    manifest = build(
        out,
        corpus_dir=corpus,
        real_dir=None,
        name="tiny",
        cfg=cfg,
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    _, rows = read_pairs(out)
    functions = list(iter_function_rows(out))
    assert {f.function for f in functions} == {"mul_add", "square_sum", "poly", "mix", "low"}
    # split by module: the holdout module's rows are all holdout, the others never are
    for r in rows + functions:
        assert (r.split == "holdout") == (r.module == "demo.bits"), (r.module, r.split)
        assert r.origin == "corpus"
    for r in rows:
        assert r.target_cycles <= r.baseline_cycles
        # every row, augmented ones included: the target is a verified answer for its baseline
        v = check_block(BlockCheck(tuple(r.baseline), tuple(r.target)))
        assert v.equivalent, (r.id, v.reason)
    assert any(r.target_cycles < r.baseline_cycles for r in rows)
    assert manifest["rows"] == len(rows) and manifest["functions"] == len(functions)
    assert (out / "stats.txt").read_text().startswith("tasmopt corpus build:")
    assert (out / "stats.png").stat().st_size > 1000
    # a rebuild from the cache gives the same rows
    again = build(
        tmp_path / "ds2",
        corpus_dir=corpus,
        real_dir=None,
        name="tiny",
        cfg=cfg,
        cache_dir=tmp_path / "cache",
        progress=False,
    )
    assert again["rows"] == manifest["rows"]


def test_reorder_variants_are_equivalent_tir() -> None:
    ops = decode(
        [{"Dup": 2}, {"Dup": 2}, "Mul", {"Dup": 3}, {"Dup": 3}, "Add", "Mul", {"ReadIo": 1}, "Add"]
    )
    base = lower_block(ops)
    variants = reorder_variants(ops, count=3, seed=5)
    assert variants, "no variant found"
    for new in variants:
        lines = lower_block(new)
        assert lines != base
        assert check_block(BlockCheck(tuple(base), tuple(lines))).equivalent


def test_target_variants_are_verified_and_no_longer() -> None:
    base = ["dup 1", "dup 1", "add", "dup 2", "dup 2", "mul", "swap 2", "pop 1", "swap 2", "pop 1"]
    target = ["dup 1", "dup 1", "add", "pick 2", "pick 2", "mul"]
    assert check_block(BlockCheck(tuple(base), tuple(target))).equivalent
    for alt in target_variants(base, target, count=3, seed=1):
        assert len(alt) <= len(target)
        parse_instructions("\n".join(alt))
        assert check_block(BlockCheck(tuple(base), tuple(alt))).equivalent


def test_coverage_counts_clusters_and_entropy() -> None:
    same = coverage([["dup 1", "add"]] * 4)
    mixed = coverage([["dup 1", "add"], ["push 3", "mul"], ["swap 1", "pop 1"], ["hash"]])
    assert same["clusters"] == 1 and same["cluster_entropy"] == 0.0
    assert mixed["clusters"] == 4 and abs(mixed["cluster_entropy"] - 2.0) < 1e-9
    assert mixed["ngram_entropy"] > same["ngram_entropy"]
    json.dumps(mixed)


def test_rows_describe_the_optimizers_blocks_loop_counters_included() -> None:
    # a loop's counter decrement `push -1; add` joins its body's first block in the
    # optimizer; a row must carry it in its TIR and entry depth, not only in its baseline
    # (rows that mixed the two broke the grammar: the baseline read below the entry depth)
    import json as _json

    from tasmopt.report import CompileOptions
    from tasmopt.tir.codec import decode
    from tasmopt.train.corpus import module_rows
    from tasmopt.train.dataset import encode_row, grammar_violations

    root = Path(__file__).resolve().parents[2]
    data = _json.loads((root / "examples" / "loop.json").read_text())
    rows, _ = module_rows(
        decode(data["tir"]), "loop", "real", "train", options=CompileOptions(sources=("rules",))
    )
    merged = [r for r in rows if r.baseline[:2] == ["push -1", "add"]]
    assert merged, "the example has a loop body"
    for r in merged:
        assert r.tir[:2] == [{"Push": 2**64 - 2**32}, "Add"], r.tir[:2]  # Push(p - 1)
        assert r.entry_depth >= 1
    examples = [encode_row(r, max_len=256) for r in rows]
    assert grammar_violations(examples) == []
