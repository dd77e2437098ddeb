"""Compile latency per example request: P50/P90 of the whole compile and of each stage.

Runs `tasmopt.optimizer.compile` in-process (the embedded default: no worker pool) on every
request file of ``examples/`` (or the files given), ``--repeat`` times each, and prints one
row per example plus the cycles saved. Usage::

    python benchmarks/compile.py                 # all examples, 5 runs each
    python benchmarks/compile.py examples/loop.json --repeat 20
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

STAGES = ("decode", "lower", "candidates", "verify", "rank", "splice")
ROOT = Path(__file__).resolve().parents[1]


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q * 100) - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("files", nargs="*", type=Path, help="request files (default: examples/*.json)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per example (default 5)")
    ap.add_argument(
        "--sources",
        default="rules,search,model",
        help="candidate sources, comma-separated (default: all registered)",
    )
    args = ap.parse_args(argv)
    files = args.files or sorted((ROOT / "examples").glob("*.json"))
    options = CompileOptions(sources=tuple(s for s in args.sources.split(",") if s))
    head = (
        f"{'example':28s} {'fns':>3s} {'cycles':>13s} {'P50 ms':>8s} {'P90 ms':>8s}  "
        + "  ".join(f"{s:>10s}" for s in STAGES)
    )
    print(head)
    print("-" * len(head))
    all_totals: list[float] = []
    for path in files:
        req = json.loads(path.read_text())
        totals: list[float] = []
        stages: dict[str, list[float]] = {s: [] for s in STAGES}
        result = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            result = compile(req["tir"], req.get("baseline_tasm"), options=options)
            totals.append(time.perf_counter() - t)
            for s in STAGES:
                stages[s].append(result.timings.get(s, 0.0))
        assert result is not None
        all_totals.extend(totals)
        cyc = f"{result.baseline_cycles}->{result.cycles}"
        row = (
            f"{path.stem[:28]:28s} {len(result.functions):3d} {cyc:>13s} "
            f"{1000 * quantile(totals, 0.5):8.1f} {1000 * quantile(totals, 0.9):8.1f}  "
            + "  ".join(f"{1000 * quantile(stages[s], 0.5):10.1f}" for s in STAGES)
        )
        print(row)
    print("-" * len(head))
    print(
        f"{'all requests':28s} {'':3s} {'':13s} {1000 * quantile(all_totals, 0.5):8.1f} "
        f"{1000 * quantile(all_totals, 0.9):8.1f}   (stage columns: P50 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
