"""The frontend's two spill policies side by side on every corpus module (issue 11, item 3).

``lru`` is upstream's (the default: the corpus baselines keep upstream's shape); ``next-use``
evicts the variable used furthest in the future and drops dead variables instead of storing
them (`tasmopt.frontend.stack`). Per module, from the same source in one run:

* static instructions of the module's own functions after lowering (the counting rule of
  `benchmarks/expert.py`), and the spill traffic in them (scratch-region round trips, and
  with the stack moves that feed the stores);
* clock cycles of the corpus test programs (``tests/corpus/test_corpus_programs.py``: the
  programs every corpus module is exercised by, with their reference outputs; both policies
  must print the reference output, else this script stops);
* with ``--optimize BUDGET``: each module also through the optimizer (rules + search at
  BUDGET seconds per module), static instructions and witness cycles summed over functions.
  The witnesses come from each baseline (random, then directed by concolic runs of it), so
  the two policies' witness sets can differ: cycles there compare loosely. So each corpus
  test program is also compiled whole (linked, as ``tasmopt compile prog.tri`` does) and
  optimized under each policy, then run on its test inputs: cycles on the same inputs.

Usage::

    python benchmarks/frontend_spill.py                  # per-module table and totals
    python benchmarks/frontend_spill.py --optimize 0.5   # ... and after the optimizer
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from expert import instructions, spill_traffic

from tasmopt.frontend import compile_modules
from tasmopt.lower.triton import lower

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpus"
POLICIES = ("lru", "next-use")


def module_figures(path: Path, spill: str) -> tuple[int, int, int]:
    """(static instructions, spill core, spill with moves) of one module's own functions."""
    ops = compile_modules(path, [CORPUS], spill=spill)[-1].ops
    ins = instructions(lower(ops).lines)
    core, moves = spill_traffic(ins)
    return len(ins), core, moves


def program_cycles() -> dict[str, dict[str, int]]:
    """Cycles of every corpus test program that halts, per policy (outputs checked)."""
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import test_corpus_programs as T

    out: dict[str, dict[str, int]] = {p: {} for p in POLICIES}
    for c in T.CASES:
        for spill in POLICIES:
            r = T.run_case(c, spill)
            if c.expected is None:
                if r.error is None or r.error.kind != c.fails_with:
                    raise SystemExit(f"{c.id} ({spill}): expected {c.fails_with}, got {r.error}")
                continue
            if r.error is not None or list(r.public_output) != list(c.expected):
                raise SystemExit(f"{c.id} ({spill}): wrong output or error {r.error}")
            out[spill][c.id] = r.cycles
    return out


def optimized_programs(budget: float) -> dict[str, dict[str, int]]:
    """Cycles of every corpus test program that halts, compiled whole under each policy and
    optimized (rules + search at ``budget``), on its test inputs (outputs checked)."""
    sys.path.insert(0, str(ROOT / "tests" / "corpus"))
    import test_corpus_programs as T

    from tasmopt.frontend import link
    from tasmopt.optimizer import compile
    from tasmopt.report import CompileOptions
    from tasmopt.tasm.parser import parse

    opts = CompileOptions(sources=("rules", "search"), search_budget_s=budget)
    out: dict[str, dict[str, int]] = {p: {} for p in POLICIES}
    programs: dict[str, list] = {}
    for c in T.CASES:
        if c.expected is not None:
            programs.setdefault(c.program, []).append(c)
    for program, cases in sorted(programs.items()):
        for spill in POLICIES:
            ops = link(compile_modules(T.CORPUS / program, [T.CORPUS], spill=spill))
            prog = parse(compile(ops, options=opts).tasm)
            total = 0
            for c in cases:
                r = T.run_on(prog, c)
                if r.error is not None or list(r.public_output) != list(c.expected):
                    raise SystemExit(f"{c.id} ({spill}, optimized): wrong output or {r.error}")
                total += r.cycles
            out[spill][program] = total
    return out


def optimized(path: Path, spill: str, budget: float) -> tuple[int, int, int]:
    """(static, witness cycles summed over functions, spill core) after the optimizer."""
    from tasmopt.optimizer import compile
    from tasmopt.report import CompileOptions

    ops = compile_modules(path, [CORPUS], spill=spill)[-1].ops
    r = compile(ops, options=CompileOptions(sources=("rules", "search"), search_budget_s=budget))
    static = cycles = core = 0
    for f in r.functions:
        ins = instructions(f.tasm)
        static += len(ins)
        cycles += f.cycles
        core += spill_traffic(ins)[0]
    return static, cycles, core


def ratio_line(name: str, a: list[int], b: list[int]) -> str:
    ratios = [y / x for x, y in zip(a, b, strict=True) if x]
    return (
        f"{name}: lru {sum(a)} -> next-use {sum(b)} ({100 * (sum(b) / sum(a) - 1):+.1f}%); "
        f"median next-use/lru {statistics.median(ratios):.3f}; lower in "
        f"{sum(y < x for x, y in zip(a, b, strict=True))}, higher in "
        f"{sum(y > x for x, y in zip(a, b, strict=True))} of {len(a)}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--optimize", type=float, metavar="BUDGET", help="also run the optimizer")
    ap.add_argument("--quiet", action="store_true", help="totals only, no per-module table")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    paths = sorted(CORPUS.glob("*/*.tri"))
    rows = []
    for path in paths:
        lru, nu = (module_figures(path, p) for p in POLICIES)
        rows.append((f"{path.parent.name}.{path.stem}", lru, nu))
    if not args.quiet:
        print("| module | static lru | static next-use | spill lru | spill next-use |")
        print("|---|---|---|---|---|")
        for name, lru, nu in rows:
            print(f"| {name} | {lru[0]} | {nu[0]} | {lru[1]} | {nu[1]} |")
    print(f"\n## Raw frontend output, {len(rows)} corpus modules\n")
    print(ratio_line("static instructions", [r[1][0] for r in rows], [r[2][0] for r in rows]))
    for label, k in (("spill traffic", 1), ("spill traffic with moves", 2)):
        a, b = sum(r[1][k] for r in rows), sum(r[2][k] for r in rows)
        sa, sb = sum(r[1][0] for r in rows), sum(r[2][0] for r in rows)
        print(f"{label}: lru {a} ({100 * a / sa:.1f}%) -> next-use {b} ({100 * b / sb:.1f}%)")
    cyc = program_cycles()
    ids = sorted(cyc["lru"])
    print(f"\n## Corpus test programs ({len(ids)} that halt; same outputs under both)\n")
    print(
        ratio_line("clock cycles", [cyc["lru"][i] for i in ids], [cyc["next-use"][i] for i in ids])
    )
    if args.optimize is not None:
        print(f"\n## After the optimizer (rules + search, {args.optimize} s per module)\n")
        opt = {p: [optimized(path, p, args.optimize) for path in paths] for p in POLICIES}
        if not args.quiet:
            print("| module | static lru | next-use | witness cycles lru | next-use |")
            print("|---|---|---|---|---|")
            for (name, _, _), a, b in zip(rows, opt["lru"], opt["next-use"], strict=True):
                print(f"| {name} | {a[0]} | {b[0]} | {a[1]} | {b[1]} |")
        for label, k in (("static", 0), ("witness cycles", 1), ("spill traffic", 2)):
            print(ratio_line(label, [o[k] for o in opt["lru"]], [o[k] for o in opt["next-use"]]))
        whole = optimized_programs(args.optimize)
        names = sorted(whole["lru"])
        print(
            f"\n## Corpus test programs compiled whole and optimized ({len(names)} programs, "
            "their test inputs)\n"
        )
        if not args.quiet:
            print("| program | cycles lru | next-use |")
            print("|---|---|---|")
            for n in names:
                print(f"| {n} | {whole['lru'][n]} | {whole['next-use'][n]} |")
        print(
            ratio_line(
                "clock cycles",
                [whole["lru"][n] for n in names],
                [whole["next-use"][n] for n in names],
            )
        )
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
