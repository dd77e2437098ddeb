"""Differential fuzzer of the whole compile (issue 33 item 2): random Trident programs
(`tasmopt.fuzz`, one family after another) through our frontend and the optimizer with every
pass on, each run against the unoptimized lowering of the same TIR on random and rare-path
inputs. Any difference outside the compiler's scratch region is a finding: it is minimized
and written to ``--out`` (JSON: the program's source and the inputs), to become a test.

Prints one line per program (with ``--verbose``) and a summary: programs, inputs compared,
runs where the reference failed (asserts on magic values), findings, findings per hour, and
how many rewrites each function-level pass kept (every pass must fire; a pass that keeps
nothing here is listed as unreached). Exit status 1 if there is a finding.

Usage::

    python benchmarks/fuzz.py --minutes 30            # the issue's run (2 cores: ~250 programs)
    python benchmarks/fuzz.py --programs 40 --seed 7  # a fixed number of programs
    python benchmarks/fuzz.py --families dot xdot absorb --programs 12
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from tasmopt.fuzz import FAMILIES, check, generate, minimize

#: The function-level passes of `tasmopt.optimizer.compile` (its stage names).
PASSES = (
    "conditions",
    "inline",
    "unroll",
    "early_exit",
    "branches",
    "loops",
    "pointers",
    "shortcuts",
    "hot",
    "reverse",
    "layouts",
    "absorb",
    "dots",
    "checks",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=0.0, help="stop after this long (0: no)")
    ap.add_argument("--programs", type=int, default=0, help="stop after this many (0: no)")
    ap.add_argument("--seed", type=int, default=0, help="first program seed")
    ap.add_argument("--runs", type=int, default=8, help="input sets per program")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--out", type=Path, default=Path("fuzz-findings.json"))
    ap.add_argument("--verbose", action="store_true", help="one line per program")
    args = ap.parse_args(argv)
    if not args.minutes and not args.programs:
        args.programs = 2 * len(args.families)
    logging.basicConfig(level=logging.ERROR)
    start = time.perf_counter()
    stop_at = start + 60 * args.minutes if args.minutes else float("inf")
    totals: Counter[str] = Counter()
    rewrites: Counter[str] = Counter()
    by_family: Counter[str] = Counter()
    findings = []
    bar = tqdm(total=args.programs or None, unit="program", disable=not sys.stderr.isatty())
    k = 0
    while time.perf_counter() < stop_at and (not args.programs or k < args.programs):
        family = args.families[k % len(args.families)]
        prog = generate(args.seed + k, family)
        k += 1
        out = check(prog, runs=args.runs, seed=args.seed)
        bar.update(1)
        totals["programs"] += 1
        if not out.compiled:
            totals["not compiled"] += 1
            print(f"generator bug, seed {prog.seed} ({family}): {out.error}", file=sys.stderr)
            continue
        by_family[family] += 1
        totals["inputs"] += out.runs
        totals["reference failed"] += out.failing
        totals["baseline cycles"] += out.baseline_cycles
        totals["cycles"] += out.cycles
        rewrites.update(out.rewrites)
        if args.verbose:
            tqdm.write(
                f"{prog.seed:6d} {family:8s} {out.seconds:6.1f}s runs={out.runs} "
                f"failing={out.failing} findings={len(out.findings)} {dict(out.rewrites)}"
            )
        if out.findings:
            f = out.findings[0]
            small = minimize(f)
            findings.append(
                {
                    "seed": prog.seed,
                    "family": family,
                    "public": f.public,
                    "secret": f.secret,
                    "reference": repr(f.reference),
                    "optimized": repr(f.optimized),
                    "source": small.source,
                }
            )
            tqdm.write(f"FINDING seed {prog.seed} ({family}):\n{small.source}")
    bar.close()
    hours = (time.perf_counter() - start) / 3600
    print(
        f"{totals['programs']} programs ({totals['not compiled']} not compiled) in "
        f"{hours * 60:.1f} min, {totals['inputs']} input sets compared "
        f"({totals['reference failed']} where the reference fails), {len(findings)} "
        f"findings ({len(findings) / hours if hours else 0:.1f} per hour)"
    )
    print("programs per family: " + ", ".join(f"{f} {by_family[f]}" for f in args.families))
    print(f"cycles of the measured functions: {totals['baseline cycles']} -> {totals['cycles']}")
    print("rewrites kept per pass: " + ", ".join(f"{p} {rewrites[p]}" for p in PASSES))
    unreached = [p for p in PASSES if not rewrites[p]]
    print("unreached passes: " + (", ".join(unreached) if unreached else "none"))
    if findings:
        args.out.write_text(json.dumps(findings, indent=2))
        print(f"findings written to {args.out}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
