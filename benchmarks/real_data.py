"""Cycle reductions per module of the real Trident toolchain data, both baselines.

Compiles every module of ``../shared/data/trident-std`` twice — with our lowering as the
baseline and with the upstream ``compiler_tasm`` as the client's baseline — and prints one
Markdown row per module: functions improved, cycles before -> after (sums of per-function
cycles measured on the verifier's witnesses; each function's own saving, its callees at
their baseline code; for a function the inline pass rewrote, its saving before inlining plus
what inlining gained over calling its callees as returned), and baseline mismatches. Then,
per baseline, the cycles as returned of the root functions (those no other function of the
module calls): every saving counted once per call that really happens. Usage::

    python benchmarks/real_data.py
    python benchmarks/real_data.py --budget 2 --data ../shared/data/trident-std
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from tasmopt.optimizer import compile
from tasmopt.report import CompileOptions

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "trident-std")
    ap.add_argument("--budget", type=float, default=0.5, help="search budget per request, s")
    ap.add_argument(
        "--rewrite-mismatched",
        action="store_true",
        help="client baseline: optimize mismatched functions on their own text (opt-in stage)",
    )
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    files = sorted(args.data.glob("*.json"))
    if not files:
        print(f"no module files in {args.data}", file=sys.stderr)
        return 1
    opts = CompileOptions(
        sources=("rules", "search"),
        search_budget_s=args.budget,
        rewrite_mismatched=args.rewrite_mismatched,
    )
    print(
        "| module | fns | ours: improved | ours: cycles | client: improved | "
        "client: mismatches | client: cycles |"
    )
    print("|---|---|---|---|---|---|---|")
    tot = [[0] * 5, [0] * 5]
    roots = [[0, 0], [0, 0]]  # cycles as returned of the functions no other one calls
    halted = [0, 0]
    lat: list[list[float]] = [[], []]
    t0 = time.perf_counter()
    for path in files:
        data = json.loads(path.read_text())
        cells = []
        for k, baseline in enumerate((None, data["compiler_tasm"])):
            r = compile(data["tir"], baseline, options=opts)
            called = _called(data["tir"])
            for f in r.functions:
                if f.name not in called and f.halted:
                    roots[k][0] += f.baseline_cycles
                    roots[k][1] += f.cycles
            n = len(r.functions)
            imp = sum(f.cycles < f.baseline_cycles for f in r.functions)
            mm = sum(f.mismatch is not None for f in r.functions)
            halted[k] += sum(getattr(f, "halted", 0) > 0 for f in r.functions)
            lat[k].extend(f.latency_s for f in r.functions)
            b = r.baseline_cycles
            # own savings only (callees at their baseline): comparable across versions, and
            # no double counting of a callee's saving in its callers
            c = b - sum(
                f.baseline_cycles - (getattr(f, "own_cycles", None) or f.cycles)
                for f in r.functions
            )
            for j, v in enumerate((n, imp, mm, b, c)):
                tot[k][j] += v
            cells.append((n, imp, mm, b, c))
        (n, i, _, b, c), (_, i2, m2, b2, c2) = cells
        print(
            f"| {data['module']} | {n} | {i} | {b}→{c} ({100 * (b - c) / max(b, 1):.1f}%) | "
            f"{i2} | {m2} | {b2}→{c2} ({100 * (b2 - c2) / max(b2, 1):.1f}%) |"
        )
    (n, i, _, b, c), (n2, i2, m2, b2, c2) = tot
    print(
        f"| **total** | {n} | {i} ({100 * i / n:.1f}%) | {b}→{c} ({100 * (b - c) / b:.1f}%) | "
        f"{i2} ({100 * i2 / n2:.1f}%) | {m2} | {b2}→{c2} ({100 * (b2 - c2) / b2:.1f}%) |"
    )
    for k, name in enumerate(("ours", "client")):
        b, c = roots[k]
        print(
            f"\n{name}: root functions (called by no other function of their module), cycles "
            f"as returned (callees' savings counted once per call): {b}→{c} "
            f"({100 * (b - c) / max(b, 1):.1f}%)"
        )
    for k, name in enumerate(("ours", "client")):
        xs = sorted(lat[k])
        q = lambda f, xs=xs: xs[min(len(xs) - 1, int(f * len(xs)))] * 1000  # noqa: E731
        print(
            f"\n{name}: function check time P50 {q(0.5):.1f} ms, P90 {q(0.9):.1f} ms; "
            f"{halted[k]} of {tot[k][0]} functions ran to their return on some witness"
        )
    print(f"\n{time.perf_counter() - t0:.0f} s, search budget {args.budget} s per request")
    return 0


def _called(tir: list) -> set[str]:
    """Names of the functions some function of the module calls."""
    from tasmopt.lower.triton import lower
    from tasmopt.module import ModuleText
    from tasmopt.optimizer.prepare import decode_tir

    text = ModuleText.from_lowering(lower(decode_tir(tir)))
    return {c for f in text.functions.values() for c in f.callees}


if __name__ == "__main__":
    sys.exit(main())
