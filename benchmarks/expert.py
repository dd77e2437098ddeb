"""How far tasmopt's output is from hand-written TASM, per function (issue 11's bar).

Two tables:

1. **Real data**: every module of ``../shared/data/trident-std`` compiled with its upstream
   ``compiler_tasm`` as the client's baseline; per function, static instructions of the
   compiler's text, of ours and of the expert's hand-written TASM
   (``../shared/data/trident-expert/counts.json``, 165 functions), and clock cycles of the
   compiler's and of ours (measured by the verifier's witnesses; the expert's cycles are not
   published).
2. **Our frontend**: every corpus function with a hand-optimized version
   (``corpus/hand``), its module compiled by our frontend and lowering (the baseline, with
   upstream's LRU spilling) and by our pipeline (the frontend with ``--spill`` — default
   ``next-use`` — then the optimizer); static instructions and cycles of each, the hand
   version's from ``corpus/hand/results.json``.

Static instructions follow the counting rule of counts.json: comments, blank lines and label
lines are not instructions, every other line is one; a function counts the lines of its own
sections (its label and its helper labels: branches, loop bodies). Spill traffic: the
instructions of RAM round trips through the compiler's scratch regions (spill region from
2^30, temp region from 2^29, spec/tir.md §5.5–5.6): the ``push <scratch address>``, the
``read_mem``/``write_mem`` that takes it and the ``pop 1`` that drops the pointer after;
``+moves`` also counts the ``swap``/``dup`` run right before a scratch write.

Usage::

    python benchmarks/expert.py                   # both tables, summaries, the 10 furthest
    python benchmarks/expert.py --per-function    # every function's row too
    python benchmarks/expert.py --budget 2 --only real
    python benchmarks/expert.py --only lib        # library-sized modules (corpus/lib) only
    python benchmarks/expert.py --only lib --library CHECKOUT/lib   # and held-out upstream
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasmopt.isa import names_where
from tasmopt.optimizer import compile
from tasmopt.report import CompileOptions

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SCRATCH_LO, SCRATCH_HI = 2**29, 2**32
_PUSH = re.compile(r"^push\s+(-?\d+)$")
RAM_WORDS = names_where(lambda i: i.accesses_ram and i.arg_kind == "n_1_5")
MOVES = names_where(lambda i: i.is_stack_shuffle) - {"pop"}
WRITES = names_where(lambda i: i.writes_ram)


def instructions(lines: Iterable[str]) -> list[str]:
    """The instruction lines under the counting rule (comments, blanks, labels dropped)."""
    out = []
    for ln in lines:
        text = ln.split("//", 1)[0].strip()
        if text and not text.endswith(":"):
            out.append(text)
    return out


def spill_traffic(instrs: Sequence[str]) -> tuple[int, int]:
    """(core, with feeding moves): instructions of scratch-region RAM round trips."""
    core = moves = 0
    used = [False] * len(instrs)
    for i, ins in enumerate(instrs):
        m = _PUSH.match(ins)
        if not m or not (SCRATCH_LO <= int(m.group(1)) < SCRATCH_HI):
            continue
        if i + 1 >= len(instrs) or instrs[i + 1].split()[0] not in RAM_WORDS:
            continue
        # a round trip may move several chunks in a row (``write_mem 5; write_mem 5; ..``)
        j = i + 1
        while j < len(instrs) and instrs[j].split()[0] == instrs[i + 1].split()[0]:
            j += 1
        span = list(range(i, j)) + ([j] if j < len(instrs) and instrs[j] == "pop 1" else [])
        for k in span:
            if not used[k]:
                used[k] = True
                core += 1
        if instrs[i + 1].split()[0] in WRITES:
            k = i - 1
            while k >= 0 and not used[k] and instrs[k].split()[0] in MOVES:
                used[k] = True
                moves += 1
                k -= 1
    return core, core + moves


@dataclass
class Row:
    table: str
    module: str
    function: str
    compiler: int  # static instructions of the baseline
    ours: int
    hand: int | None
    compiler_cycles: int
    ours_cycles: int
    hand_cycles: int | None
    spill: int
    spill_moves: int
    base_spill: int = 0
    base_spill_moves: int = 0
    padded: int = 0  # padded height of ours (next power of two of the tallest table)
    base_padded: int = 0


def real_rows(budget: float) -> list[Row]:
    counts = json.loads((DATA / "trident-expert" / "counts.json").read_text())["modules"]
    rows: list[Row] = []
    opts = CompileOptions(sources=("rules", "search"), search_budget_s=budget)
    for path in sorted((DATA / "trident-std").glob("*.json")):
        data = json.loads(path.read_text())
        expert = counts.get(data["module"], {}).get("functions", {})
        r = compile(data["tir"], data["compiler_tasm"], options=opts)
        from tasmopt.module import ModuleText

        labels = {f.name: f"__{f.name}" for f in r.functions}
        client = ModuleText.from_text(data["compiler_tasm"], labels)
        for f in r.functions:
            ours = instructions(f.tasm)
            base = instructions(client.section_lines(f.name)) if f.name in client.functions else []
            core, with_moves = spill_traffic(ours)
            e = expert.get(f.name)
            rows.append(
                Row(
                    "real",
                    data["module"],
                    f.name,
                    len(base),
                    len(ours),
                    e["hand"] if e else None,
                    f.baseline_cycles,
                    f.cycles,
                    None,
                    core,
                    with_moves,
                    padded=f.padded_height,
                    base_padded=f.baseline_padded_height,
                )
            )
    return rows


def _ours_and_baseline(path: Path, budget: float, spill: str) -> tuple[Any, Any]:
    """(ours, baseline) compile reports of one corpus module: ours optimizes the frontend's
    output under the ``spill`` policy; the baseline figures are always those of the
    ``lru`` frontend (upstream's shape, what the corpus baselines and hand versions use)."""
    from tasmopt.frontend import compile_modules

    opts = CompileOptions(sources=("rules", "search"), search_budget_s=budget)
    ours = compile(compile_modules(path, [ROOT / "corpus"], spill=spill)[-1].ops, options=opts)
    if spill == "lru":
        return ours, ours
    lru_ops = compile_modules(path, [ROOT / "corpus"], spill="lru")[-1].ops
    return ours, compile(lru_ops, options=CompileOptions(sources=()))


def corpus_rows(budget: float, spill: str = "lru", prefix: str = "") -> list[Row]:
    from tasmopt.train.hand import discover, module_path, module_text

    results = json.loads((ROOT / "corpus" / "hand" / "results.json").read_text())
    rows: list[Row] = []
    by_module: dict[str, list] = {}
    for hv in discover():
        if hv.module.startswith(prefix):
            by_module.setdefault(hv.module, []).append(hv)
    for module, hvs in sorted(by_module.items()):
        r, rb = _ours_and_baseline(module_path(module), budget, spill)
        reports = {f.name: f for f in r.functions}
        base_reports = {f.name: f for f in rb.functions}
        base_text = module_text(module)
        for hv in hvs:
            f, fb = reports[hv.function], base_reports[hv.function]
            ours = instructions(f.tasm)
            core, with_moves = spill_traffic(ours)
            res = results.get(hv.key, {})
            rows.append(
                Row(
                    "corpus",
                    module,
                    hv.function,
                    len(instructions(base_text.section_lines(hv.function))),
                    len(ours),
                    len(instructions(hv.lines)),
                    fb.baseline_cycles,
                    f.cycles,
                    res.get("cycles"),
                    core,
                    with_moves,
                    padded=f.padded_height,
                    base_padded=fb.baseline_padded_height,
                )
            )
    return rows


def all_corpus_rows(budget: float, spill: str = "lru") -> list[Row]:
    """Every function of every corpus module (``corpus/<domain>/<name>.tri``), compiled by
    our frontend and lowering (the baseline: ``lru``) and by the optimizer (from the
    frontend's output under ``spill``); no hand bar."""
    from tasmopt.module import ModuleText

    rows: list[Row] = []
    for path in sorted((ROOT / "corpus").glob("*/*.tri")):
        module = f"{path.parent.name}.{path.stem}"
        r, rb = _ours_and_baseline(path, budget, spill)
        base_reports = {f.name: f for f in rb.functions}
        labels = {f.name: f"__{f.name}" for f in rb.functions}
        base = ModuleText.from_text(rb.baseline_tasm, labels)
        for f in r.functions:
            fb = base_reports[f.name]
            ours = instructions(f.tasm)
            before = instructions(base.section_lines(f.name)) if f.name in base.functions else []
            core, with_moves = spill_traffic(ours)
            b_core, b_moves = spill_traffic(before)
            rows.append(
                Row(
                    "all-corpus",
                    module,
                    f.name,
                    len(before),
                    len(ours),
                    None,
                    fb.baseline_cycles,
                    f.cycles,
                    None,
                    core,
                    with_moves,
                    b_core,
                    b_moves,
                    padded=f.padded_height,
                    base_padded=fb.baseline_padded_height,
                )
            )
    return rows


def library_rows(
    root: Path, extra: Sequence[Path], budget: float, spill: str = "next-use"
) -> list[Row]:
    """Held out: the upstream library's own sources (a checkout's ``lib`` folder, ``root``;
    not in this repository) of every module with hand counts (counts.json), compiled by our
    frontend (``spill``) and the optimizer; static instructions against the expert's hand
    counts and the upstream compiler's (both from counts.json: the upstream compiler's
    counts are of the TIR that treats struct values as one element wide, so they can be
    below the hand version's). Modules whose file is missing are skipped."""
    from tasmopt.frontend import compile_modules

    counts = json.loads((DATA / "trident-expert" / "counts.json").read_text())["modules"]
    opts = CompileOptions(sources=("rules", "search"), search_budget_s=budget)
    rows: list[Row] = []
    for module, entry in sorted(counts.items()):
        path = root / (module.replace(".", "/") + ".tri")
        if not path.is_file():
            continue
        try:
            ops = compile_modules(path, [root, *extra], spill=spill)[-1].ops
        except Exception as exc:  # noqa: BLE001 - reported, the others still run
            print(f"{module}: our frontend cannot compile it: {str(exc).splitlines()[0]}")
            continue
        r = compile(ops, options=opts)
        expert = entry.get("functions", {})
        for f in r.functions:
            if f.name not in expert:
                continue
            ours = instructions(f.tasm)
            core, with_moves = spill_traffic(ours)
            rows.append(
                Row(
                    "library",
                    module,
                    f.name,
                    expert[f.name]["compiler"],
                    len(ours),
                    expert[f.name]["hand"],
                    f.baseline_cycles,
                    f.cycles,
                    None,
                    core,
                    with_moves,
                )
            )
    return rows


def padded_summary(rows: list[Row]) -> str:
    """Padded heights (proof time follows the tallest table): how many functions ours lowered
    and raised (the optimizer never accepts a raise)."""
    measured = [r for r in rows if r.padded and r.base_padded]
    lower = sum(r.padded < r.base_padded for r in measured)
    higher = sum(r.padded > r.base_padded for r in measured)
    return (
        f"padded height ({len(measured)} functions measured): lower in {lower}, "
        f"higher in {higher}; sum {sum(r.base_padded for r in measured)} -> "
        f"{sum(r.padded for r in measured)}"
    )


def spill_summary(title: str, rows: list[Row]) -> None:
    c, o = sum(r.compiler for r in rows), sum(r.ours for r in rows)
    bs, bm = sum(r.base_spill for r in rows), sum(r.base_spill_moves for r in rows)
    sp, spm = sum(r.spill for r in rows), sum(r.spill_moves for r in rows)
    print(f"\n## {title}\n")
    print(
        f"functions: {len(rows)}; static {c} -> {o}; cycles "
        f"{sum(r.compiler_cycles for r in rows)} -> {sum(r.ours_cycles for r in rows)}"
    )
    print(
        f"spill traffic: baseline {bs} ({100 * bs / max(c, 1):.1f}%), with moves {bm} "
        f"({100 * bm / max(c, 1):.1f}%); ours {sp} ({100 * sp / max(o, 1):.1f}%), with moves "
        f"{spm} ({100 * spm / max(o, 1):.1f}%)"
    )
    print(padded_summary(rows))


def summarize(title: str, rows: list[Row], bar: str, furthest: int) -> None:
    with_hand = [r for r in rows if r.hand]
    print(f"\n## {title}\n")
    print(f"functions: {len(rows)}; with a hand version: {len(with_hand)}")
    if with_hand:
        c, o, h = (sum(getattr(r, k) for r in with_hand) for k in ("compiler", "ours", "hand"))
        print(
            f"static instructions (functions with a hand version): compiler {c}, ours {o}, "
            f"{bar} {h}; totals compiler/{bar} {c / h:.2f}, ours/{bar} {o / h:.2f}"
        )
        print(
            f"median per function: compiler/{bar} "
            f"{statistics.median(r.compiler / r.hand for r in with_hand):.2f}, ours/{bar} "
            f"{statistics.median(r.ours / r.hand for r in with_hand):.2f}"
        )
        hc = [r for r in with_hand if r.hand_cycles]
        if hc:
            cc, oc, hh = (
                sum(getattr(r, k) for r in hc)
                for k in ("compiler_cycles", "ours_cycles", "hand_cycles")
            )
            print(
                f"cycles ({len(hc)} functions): compiler {cc}, ours {oc}, {bar} {hh}; "
                f"ours/{bar} {oc / hh:.2f}"
            )
    oc_all = sum(r.ours for r in rows)
    print(
        f"all functions: static compiler {sum(r.compiler for r in rows)} -> ours {oc_all}; "
        f"cycles per call, summed over functions (a callee's saving also counts in its "
        f"callers) {sum(r.compiler_cycles for r in rows)} -> {sum(r.ours_cycles for r in rows)}"
    )
    print(padded_summary(rows))
    sp, spm = sum(r.spill for r in rows), sum(r.spill_moves for r in rows)
    print(
        f"spill traffic in ours: {sp} instructions ({100 * sp / max(oc_all, 1):.1f}%), "
        f"{spm} with the moves that feed it ({100 * spm / max(oc_all, 1):.1f}%)"
    )
    if with_hand:
        print(f"\nfurthest from {bar} (ours - {bar}, static):\n")
        print(f"| module | function | compiler | ours | {bar} | ours/{bar} |")
        print("|---|---|---|---|---|---|")
        ranked = sorted(with_hand, key=lambda r: r.hand - r.ours)
        for r in ranked[:furthest]:
            print(
                f"| {r.module} | {r.function} | {r.compiler} | {r.ours} | {r.hand} | "
                f"{r.ours / r.hand:.2f} |"
            )
        print(concentration(ranked, bar))


def library_summary(rows: list[Row]) -> None:
    """Library-sized code (``corpus/lib``, issue 36), per module: static instructions of the
    compiler (our frontend, ``lru``), ours (frontend + optimizer) and the hand versions, the
    ratios, and the spill share of ours with the moves that feed it."""
    lib = [r for r in rows if r.module.startswith("lib.") and r.hand]
    if not lib:
        return
    print("\n## Library-sized code (corpus/lib, functions with a hand version)\n")
    print(
        "| module | functions | compiler | ours | hand | ours/hand total | median | max "
        "| above 3x | spill share (with moves) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups: dict[str, list[Row]] = {}
    for r in lib:
        groups.setdefault(r.module, []).append(r)
    for module, rs in [*sorted(groups.items()), ("all", lib)]:
        c, o, h = (sum(getattr(r, k) for r in rs) for k in ("compiler", "ours", "hand"))
        ratios = [r.ours / r.hand for r in rs]
        spm = sum(r.spill_moves for r in rs)
        print(
            f"| {module} | {len(rs)} | {c} | {o} | {h} | {o / h:.2f} | "
            f"{statistics.median(ratios):.2f} | {max(ratios):.2f} | "
            f"{sum(x > 3 for x in ratios)} | {100 * spm / max(o, 1):.1f}% |"
        )


def concentration(ranked: list[Row], bar: str) -> str:
    """Where the excess over the bar lives: the share of (ours - bar) held by the functions
    furthest from it, and the totals without them (``ranked``: furthest first)."""
    excess = sum(r.ours - r.hand for r in ranked)
    out = [f"\nexcess over {bar} (ours - {bar}, static, all functions with one): {excess}"]
    for n in (1, 3, 6, 10):
        if n >= len(ranked):
            break
        top, rest = ranked[:n], ranked[n:]
        held = sum(r.ours - r.hand for r in top)
        o, h = sum(r.ours for r in rest), sum(r.hand for r in rest)
        out.append(
            f"  the {n} furthest hold {held} ({100 * held / max(excess, 1):.0f}%); "
            f"totals without them: ours/{bar} {o / h:.2f} ({len(rest)} functions)"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budget", type=float, default=0.5, help="search budget per module, s")
    ap.add_argument(
        "--only",
        choices=("real", "corpus", "lib", "all-corpus"),
        default=None,
        help="one table (lib: the corpus table for the library-sized modules only)",
    )
    ap.add_argument("--per-function", action="store_true", help="print every function's row")
    ap.add_argument("--furthest", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None, help="write every row here")
    ap.add_argument(
        "--spill",
        choices=("lru", "next-use"),
        default="next-use",
        help="corpus tables: the frontend's spill policy for ours (the baseline stays lru)",
    )
    ap.add_argument(
        "--library",
        type=Path,
        default=None,
        help="held out: the upstream Trident library's lib folder (a checkout, not in this "
        "repository); its modules with hand counts go through our frontend",
    )
    ap.add_argument(
        "--library-path",
        type=Path,
        action="append",
        default=[],
        help="more module search paths for --library (e.g. a vm library)",
    )
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    rows: list[Row] = []
    if args.only in (None, "real"):
        real = real_rows(args.budget)
        rows += real
        summarize("Real data (compiler_tasm as the client's baseline)", real, "hand", args.furthest)
    if args.only in (None, "corpus", "lib"):
        corpus = corpus_rows(args.budget, args.spill, "lib." if args.only == "lib" else "")
        rows += corpus
        summarize(
            "Our frontend (corpus functions with a hand version)", corpus, "hand", args.furthest
        )
        library_summary(corpus)
    if args.only in (None, "all-corpus"):
        every = all_corpus_rows(args.budget, args.spill)
        rows += every
        spill_summary("Our frontend, every corpus function", every)
    if args.library is not None:
        held = library_rows(args.library, args.library_path, args.budget, args.spill)
        rows += held
        summarize(
            f"Held out: upstream library sources through our frontend ({args.library})",
            held,
            "hand",
            args.furthest,
        )
    if args.per_function:
        print("\n| table | module | function | compiler | ours | hand | cycles | ours cycles |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r.table} | {r.module} | {r.function} | {r.compiler} | {r.ours} | "
                f"{r.hand if r.hand is not None else ''} | {r.compiler_cycles} | {r.ours_cycles} |"
            )
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    print(f"\n{time.perf_counter() - t0:.0f} s, search budget {args.budget} s per module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
