"""Compile latency per request: P50/P90 of the whole compile and of each stage.

Runs `tasmopt.optimizer.compile` in-process (the embedded default: no worker pool) on every
request file of ``examples/`` (or the files given), ``--repeat`` times each, and prints one
row per example plus the cycles saved.

``--real`` compiles the 30 modules of ``../shared/data/trident-std`` instead, at full effort
(no deadline, the default search budget, the upstream compiler's TASM as the client's
baseline), each once and cold (a fresh search source, no result cache), and prints the wall
time per module, the slowest stages, and how many modules meet ``--target`` seconds (issue
34: every real module in <= 10 s on 2 cores). Usage::

    python benchmarks/compile.py                 # all examples, 5 runs each
    python benchmarks/compile.py examples/loop.json --repeat 20
    python benchmarks/compile.py --real          # full effort per real module
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from tasmopt.optimizer import compile
from tasmopt.report import CompileOptions
from tasmopt.rules import RulesSource
from tasmopt.search.source import SearchSource
from tasmopt.sources import SourceSet

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
    ap.add_argument(
        "--real",
        action="store_true",
        help="the real modules of ../shared/data/trident-std at full effort, once each, cold",
    )
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "trident-std")
    ap.add_argument("--target", type=float, default=10.0, help="--real: seconds per module")
    args = ap.parse_args(argv)
    options = CompileOptions(sources=tuple(s for s in args.sources.split(",") if s))
    if args.real:
        return _real(args.data, options, args.target)
    files = args.files or sorted((ROOT / "examples").glob("*.json"))
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


def _real(data: Path, options: CompileOptions, target: float) -> int:
    """Full-effort compile time of every module in ``data``, each cold."""
    files = sorted(data.glob("*.json"))
    if not files:
        print(f"no module files in {data}", file=sys.stderr)
        return 1
    logging.disable(logging.WARNING)
    options = replace(options, use_cache=False)
    head = f"{'module':28s} {'fns':>3s} {'cycles':>15s} {'wall s':>7s}  slowest stages (s)"
    print(head)
    print("-" * len(head))
    walls: list[float] = []
    for path in files:
        mod = json.loads(path.read_text())
        sources = SourceSet([RulesSource(), SearchSource()])  # cold: no search results kept
        t = time.perf_counter()
        result = compile(mod["tir"], mod["compiler_tasm"], options=options, sources=sources)
        wall = time.perf_counter() - t
        walls.append(wall)
        top = sorted(result.timings.items(), key=lambda kv: -kv[1])[:3]
        cyc = f"{result.baseline_cycles}->{result.cycles}"
        print(
            f"{path.stem[:28]:28s} {len(result.functions):3d} {cyc:>15s} {wall:7.1f}  "
            + ", ".join(f"{k} {v:.1f}" for k, v in top)
        )
    print("-" * len(head))
    over = sum(w > target for w in walls)
    print(
        f"{len(walls)} modules: total {sum(walls):.0f} s, P50 {quantile(walls, 0.5):.1f} s, "
        f"P90 {quantile(walls, 0.9):.1f} s, max {max(walls):.1f} s; "
        f"{len(walls) - over} of {len(walls)} within {target:g} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
