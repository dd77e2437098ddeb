"""Mutation coverage of the function-level proofs (issue 33 item 3): every check of every
pass's proof obligations (`tasmopt.mutants.OBLIGATIONS`) is dropped in turn, and the pass's
killer tests (`tasmopt.mutants.KILLERS`: its adversarial and proof-level tests, not the
end-to-end compiles that the witness check backs) run against the mutant in a fresh pytest
process (``TASMOPT_MUTANT``, applied by ``tests/conftest.py``). A mutant is *killed* when a
test fails (or the run errors or times out), and *survives* when every test passes: that
check is one nobody attacks, unless `tasmopt.mutants.EQUIVALENT` says why no input can tell it
from the original (another check refuses every input it does, or the input cannot occur in
TASM that parses): then it is *equivalent*. Each pass's killers first run unmutated and must
pass.

Prints one line per survivor and a table per pass (mutants, killed, survived); with
``--out`` writes every mutant's outcome as JSON. Exit status 1 if a mutant survives.

Usage::

    python benchmarks/proof_mutants.py                    # all passes, 2 processes (~30 min)
    python benchmarks/proof_mutants.py --passes dots absorb --jobs 1
    python benchmarks/proof_mutants.py --list             # the mutants, without running them
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from tasmopt.mutants import EQUIVALENT, KILLERS, OBLIGATIONS, Mutant, mutants

REPO = Path(__file__).resolve().parents[1]


def run_killers(pass_name: str, mutant: str | None, timeout: float) -> tuple[str, str]:
    """``(outcome, detail)`` of the killer tests of ``pass_name`` with ``mutant`` applied
    (None: unmutated): ``killed`` (a test failed: its name is the detail), ``survived``,
    ``error`` (pytest could not run: usage or collection error) or ``timeout``."""
    files, kexpr = KILLERS[pass_name]
    cmd = [sys.executable, "-m", "pytest", *files, "-x", "-q", "-p", "no:cacheprovider"]
    cmd += ["-o", "addopts=", "-n", "0", "-m", "not slow", "--timeout", str(int(timeout))]
    cmd += ["-k", kexpr] if kexpr else []
    env = {k: v for k, v in os.environ.items() if k != "TASMOPT_MUTANT"}
    if mutant is not None:
        env["TASMOPT_MUTANT"] = mutant
    try:
        done = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout * 3
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"over {timeout * 3:.0f} s"
    out = done.stdout + done.stderr
    if done.returncode == 0:
        return "survived", ""
    if done.returncode == 1:
        failed = [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("FAILED ")]
        return "killed", (failed[0] if failed else "a test failed")[:200]
    return "error", out.strip().splitlines()[-1][:200] if out.strip() else f"rc {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--passes", nargs="+", choices=sorted(OBLIGATIONS), help="default: all")
    ap.add_argument("--jobs", type=int, default=2, help="pytest processes at a time (2)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test (120)")
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--out", type=Path, help="write every outcome here (JSON)")
    args = ap.parse_args(argv)

    passes = tuple(args.passes) if args.passes else None
    todo = mutants(passes)
    if args.list:
        for m in todo:
            print(f"{m.id:60s} line {m.line:4d}  {m.what}")
        print(f"{len(todo)} mutants")
        return 0

    t0 = time.perf_counter()
    names = sorted({m.pass_name for m in todo})
    with ThreadPoolExecutor(args.jobs) as pool:
        base = dict(zip(names, pool.map(lambda n: run_killers(n, None, args.timeout), names)))
    broken = {n: r for n, r in base.items() if r[0] != "survived"}
    if broken:
        for n, (outcome, detail) in broken.items():
            print(f"{n}: the killers fail without a mutant ({outcome}: {detail})")
        return 2

    def one(m: Mutant) -> tuple[Mutant, str, str]:
        outcome, detail = run_killers(m.pass_name, m.id, args.timeout)
        if m.id in EQUIVALENT:  # no input tells it from the original: says why
            if outcome == "survived":
                return m, "equivalent", EQUIVALENT[m.id][1]
            detail = f"listed as equivalent but {outcome}: {detail}"
        return m, outcome, detail

    results = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for m, outcome, detail in tqdm(
            pool.map(one, todo), total=len(todo), desc="mutants", unit="mutant"
        ):
            results.append((m, outcome, detail))
            if outcome == "survived":
                tqdm.write(f"SURVIVED {m.id} (line {m.line}): {m.what}")
            elif detail.startswith("listed as equivalent"):
                tqdm.write(f"NOT EQUIVALENT {m.id}: {detail}")

    by_pass: dict[str, Counter[str]] = {}
    for m, outcome, _ in results:
        by_pass.setdefault(m.pass_name, Counter())[outcome] += 1
    cols = ("killed", "error", "timeout", "equivalent", "survived")
    print(f"\n{'pass':12s} {'mutants':>8s}" + "".join(f" {c:>10s}" for c in cols))
    for n in names:
        c = by_pass.get(n, Counter())
        print(f"{n:12s} {sum(c.values()):8d}" + "".join(f" {c[k]:10d}" for k in cols))
    total = Counter(o for _, o, _ in results)
    print(
        f"{'all':12s} {len(results):8d}"
        + "".join(f" {total[k]:10d}" for k in cols)
        + f"   ({time.perf_counter() - t0:.0f} s)"
    )
    if args.out:
        args.out.write_text(
            json.dumps(
                [
                    {
                        "id": m.id,
                        "pass": m.pass_name,
                        "line": m.line,
                        "check": m.what,
                        "outcome": o,
                        "detail": d,
                    }
                    for m, o, d in results
                ],
                indent=1,
            )
        )
    return 1 if total["survived"] else 0


if __name__ == "__main__":
    sys.exit(main())
