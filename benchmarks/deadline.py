"""How closely an in-process compile keeps its deadline, on the real modules.

Compiles every module of ``../shared/data/trident-std`` (TIR, the upstream compiler's TASM as
the client's baseline) once with a `Deadline` of ``--deadline-ms`` and no result cache, in
this process, and prints the wall time per module and its overshoot past the deadline, then
P50/P90/max. What a deadline cuts keeps its baseline; this measures only time. Usage::

    python benchmarks/deadline.py                    # 200 ms, the service's default
    python benchmarks/deadline.py --deadline-ms 500 --budget 0.5
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

from tasmopt.deadline import Deadline
from tasmopt.optimizer import compile as compile_tir
from tasmopt.report import CompileOptions

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "trident-std")
    ap.add_argument("--deadline-ms", type=float, default=200.0)
    ap.add_argument("--budget", type=float, default=0.5, help="search budget per request, s")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    files = sorted(args.data.glob("*.json"))
    if not files:
        print(f"no module files in {args.data}", file=sys.stderr)
        return 1
    print("| module | functions | wall ms | past the deadline ms |")
    print("|---|---|---|---|")
    walls: list[float] = []
    for path in files:
        d = json.loads(path.read_text())
        opts = CompileOptions(
            sources=("rules", "search"),
            search_budget_s=args.budget,
            deadline=Deadline(args.deadline_ms / 1000),
        )
        t = time.perf_counter()
        r = compile_tir(d["tir"], d["compiler_tasm"], options=opts)
        ms = 1000 * (time.perf_counter() - t)
        walls.append(ms)
        over = max(0.0, ms - args.deadline_ms)
        print(f"| {path.stem} | {len(r.functions)} | {ms:.0f} | {over:.0f} |")
    q = statistics.quantiles(walls, n=10)
    print(
        f"\ndeadline {args.deadline_ms:.0f} ms: P50 {statistics.median(walls):.0f} ms, "
        f"P90 {q[8]:.0f} ms, max {max(walls):.0f} ms over {len(walls)} modules"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
