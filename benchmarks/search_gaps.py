"""Where the block search is weak (issue 12, item 7): the blocks a learned proposer should
target.

Every block of the real toolchain data (our lowering of ``../shared/data/trident-std``, as
`tasmopt eval` builds them; optionally a seeded sample) is searched twice, at a short budget
(the search states a block gets in a request at the default search budget) and at a budget
ten times longer; each best candidate is verified (`check_block`). Blocks are bucketed by
length (baseline instructions) and by live values at entry (entry op-stack depth), and each
bucket reports: blocks, blocks the search cannot model (``UnsupportedBlock``) or never tries
(longer than ``MAX_SEARCH_INSTRS``), blocks improved at the short budget, blocks improved only
at the long one (the search's budget is the limit there), and clock cycles saved per block at
each budget. Seconds are process CPU seconds of the search. Usage::

    python benchmarks/search_gaps.py                     # 300 sampled blocks, seed 0
    python benchmarks/search_gaps.py --sample 0          # every block
    python benchmarks/search_gaps.py --short 2000 --long 20000 --json var/gaps.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from tasmopt.search.dataflow import UnsupportedBlock, extract
from tasmopt.search.optimize import SearchConfig, optimize_block
from tasmopt.search.source import MAX_SEARCH_INSTRS
from tasmopt.tasm.parser import parse_instructions
from tasmopt.train.corpus import real_rows
from tasmopt.vm.equivalence import BlockCheck, check_block

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "trident-std"

LENGTHS = ((1, 5), (6, 10), (11, 20), (21, 40), (41, 10**9))
DEPTHS = ((0, 4), (5, 10), (11, 16), (17, 10**9))


@dataclass
class Gap:
    """One block: its shape, why the search does not apply (or ""), and the verified cycle
    savings at each budget (0 when nothing cheaper was proven)."""

    id: str
    length: int
    depth: int
    baseline_cycles: int
    skipped: str
    saved_short: int
    saved_long: int
    seconds_short: float
    seconds_long: float


def _saved(baseline: list[str], candidates: list, base_cycles: int) -> int:
    """Cycles saved by the cheapest candidate the verifier proves (0 if none)."""
    best = 0
    for cand in candidates:
        v = check_block(BlockCheck(tuple(baseline), tuple(str(i) for i in cand)))
        if v.equivalent:
            best = max(best, base_cycles - v.cycles)
    return best


def measure(row, short: int, long: int, seed: int) -> Gap:
    instrs = parse_instructions("\n".join(row.baseline))
    gap = Gap(row.id, len(instrs), row.entry_depth, row.baseline_cycles, "", 0, 0, 0.0, 0.0)
    if len(instrs) > MAX_SEARCH_INSTRS:
        gap.skipped = "too long"
        return gap
    try:
        extract(instrs, "release", frozenset())
    except UnsupportedBlock:
        gap.skipped = "unsupported"
        return gap
    for states, field in ((short, "short"), (long, "long")):
        t0 = time.process_time()
        cands = optimize_block(instrs, SearchConfig(states=states, seed=seed))
        setattr(gap, f"seconds_{field}", time.process_time() - t0)
        setattr(gap, f"saved_{field}", _saved(row.baseline, cands, row.baseline_cycles))
    return gap


def _bucket(value: int, edges: tuple[tuple[int, int], ...]) -> str:
    for lo, hi in edges:
        if lo <= value <= hi:
            return f"{lo}-{hi}" if hi < 10**9 else f">={lo}"
    return "?"


def table(gaps: list[Gap], key: str, edges: tuple[tuple[int, int], ...]) -> str:
    groups: dict[str, list[Gap]] = defaultdict(list)
    for g in gaps:
        groups[_bucket(getattr(g, key), edges)].append(g)
    head = (
        f"| {key} | blocks | not searched | improved (short) | improved only (long) | "
        "cycles saved/block short | long | search s/block short | long |"
    )
    lines = [head, "|" + "---|" * 9]
    for lo, _hi in edges:
        name = _bucket(lo, edges)
        gs = groups.get(name, [])
        if not gs:
            continue
        searched = [g for g in gs if not g.skipped]
        n = len(searched) or 1
        lines.append(
            f"| {name} | {len(gs)} | {len(gs) - len(searched)} | "
            f"{sum(g.saved_short > 0 for g in searched)} | "
            f"{sum(g.saved_long > 0 and g.saved_short == 0 for g in searched)} | "
            f"{sum(g.saved_short for g in searched) / n:.2f} | "
            f"{sum(g.saved_long for g in searched) / n:.2f} | "
            f"{sum(g.seconds_short for g in searched) / n:.3f} | "
            f"{sum(g.seconds_long for g in searched) / n:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sample", type=int, default=300, help="blocks sampled (0: all)")
    ap.add_argument("--short", type=int, default=2_000, help="search states, short budget")
    ap.add_argument("--long", type=int, default=20_000, help="search states, long budget")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write every block's record here")
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"real data not found at {SHARED}", file=sys.stderr)
        return 2
    rows = [r for r in real_rows(SHARED, cache=ROOT / "var" / "eval") if r.baseline]
    if args.sample and args.sample < len(rows):
        rows = random.Random(args.seed).sample(rows, args.sample)
    gaps = []
    for k, row in enumerate(rows, 1):
        gaps.append(measure(row, args.short, args.long, args.seed))
        if k % 50 == 0:
            print(f"  {k}/{len(rows)} blocks", file=sys.stderr)
    print(
        f"{len(gaps)} real blocks (seed {args.seed}); search states short {args.short}, "
        f"long {args.long}\n"
    )
    print(table(gaps, "length", LENGTHS) + "\n")
    print(table(gaps, "depth", DEPTHS))
    skipped = defaultdict(int)
    for g in gaps:
        skipped[g.skipped or "searched"] += 1
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items())))
    if args.json:
        args.json.write_text(json.dumps([asdict(g) for g in gaps]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
