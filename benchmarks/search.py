"""Block search versus the compiler, per function: cycles, time, and a summary.

For every function of the chosen inputs: baseline (compiler) cycles, hand-optimized cycles
where ``corpus/hand/`` has a version, cycles with the search alone, and the time the search
took. Summary: share of functions improved, median and mean cycle reduction, share of
hand-optimized functions the search matches or beats. Usage::

    python benchmarks/search.py                       # examples/ and the corpus holdout
    python benchmarks/search.py --inputs examples --budget 4
    python benchmarks/search.py --inputs holdout --json var/search.json
    python benchmarks/search.py --inputs hand          # every hand-optimized function
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tasmopt.optimizer import compile
from tasmopt.report import CompileOptions

ROOT = Path(__file__).resolve().parents[1]


def _requests(which: str) -> list[tuple[str, object, str | None]]:
    out: list[tuple[str, object, str | None]] = []
    if which in ("examples", "all"):
        for path in sorted((ROOT / "examples").glob("*.json")):
            req = json.loads(path.read_text())
            out.append((path.stem, req["tir"], req.get("baseline_tasm")))
    if which == "hand":
        from tasmopt.frontend import compile_modules

        for module in sorted({k.split(":")[0] for k in _hand_cycles()}):
            path = ROOT / "corpus" / (module.replace(".", "/") + ".tri")
            if path.exists():
                mod = compile_modules(path, [ROOT / "corpus"])[-1]
                out.append((mod.name, mod.ops, None))
    if which in ("holdout", "all"):
        holdout = ROOT / "corpus" / "holdout.txt"
        if holdout.exists():
            from tasmopt.frontend import compile_modules

            for line in holdout.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                path = ROOT / "corpus" / line
                if path.suffix != ".tri":
                    path = ROOT / "corpus" / (line.replace(".", "/") + ".tri")
                if path.exists():  # the module's own functions (its imports are external)
                    mod = compile_modules(path, [ROOT / "corpus"])[-1]
                    out.append((mod.name, mod.ops, None))
        else:
            print("(no corpus/holdout.txt: holdout skipped)", file=sys.stderr)
    return out


def _hand_cycles() -> dict[str, int]:
    """``corpus/hand/results.json`` (written by the corpus tooling): function -> cycles."""
    path = ROOT / "corpus" / "hand" / "results.json"
    if not path.exists():
        return {}
    return {k: int(v["cycles"]) for k, v in json.loads(path.read_text()).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--inputs",
        choices=("examples", "holdout", "hand", "all"),
        default="all",
        help="examples/, the corpus holdout modules, or every module with a "
        "hand-optimized function (default: examples and holdout)",
    )
    ap.add_argument("--budget", type=float, default=2.0, help="search budget per request, s")
    ap.add_argument("--json", type=Path, help="also write the rows to this file")
    args = ap.parse_args(argv)
    hand = _hand_cycles()
    rows = []
    print(
        f"{'input':24s} {'function':28s} {'baseline':>8s} {'hand':>6s} {'search':>7s} "
        f"{'saved':>6s} {'time s':>7s}"
    )
    for name, tir, baseline in _requests(args.inputs):
        opts = CompileOptions(sources=("search",), search_budget_s=args.budget)
        t = time.perf_counter()
        result = compile(tir, baseline, options=opts)
        spent = time.perf_counter() - t
        for f in result.functions:
            if f.mismatch is not None or f.unlowerable or f.baseline_cycles == 0:
                continue
            key = f"{name}:{f.name}"
            h = hand.get(key)
            rows.append(
                {
                    "input": name,
                    "function": f.name,
                    "baseline": f.baseline_cycles,
                    "hand": h,
                    "search": f.cycles,
                    "time_s": spent / len(result.functions),
                }
            )
            red = (f.baseline_cycles - f.cycles) / f.baseline_cycles
            print(
                f"{name[:24]:24s} {f.name[:28]:28s} {f.baseline_cycles:8d} "
                f"{h if h is not None else '-':>6} {f.cycles:7d} {100 * red:5.1f}% "
                f"{spent / len(result.functions):7.2f}"
            )
    if not rows:
        print("no functions")
        return 1
    reds = [(r["baseline"] - r["search"]) / r["baseline"] for r in rows]
    improved = sum(1 for r in rows if r["search"] < r["baseline"])
    with_hand = [r for r in rows if r["hand"] is not None]
    print()
    print(f"functions: {len(rows)}; improved: {improved} ({100 * improved / len(rows):.1f}%)")
    print(
        f"cycle reduction: median {100 * statistics.median(reds):.1f}%, "
        f"mean {100 * statistics.mean(reds):.1f}%"
    )
    if with_hand:
        ok = sum(1 for r in with_hand if r["search"] <= r["hand"])
        print(f"hand-optimized functions matched or beaten: {ok}/{len(with_hand)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
