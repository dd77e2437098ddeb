"""Lane-parallel witness evaluation (`tasmopt.vm.lanes`) against the simulator, side by side.

The verifier runs each straight-line block on ``N`` witnesses. This prints, per workload
and lane count, the time of ``N`` simulator runs, the time of one `run_lanes` call on the
same ``N`` inputs (inputs converted once, as `check_block` does), and their ratio. Each
repetition parses the program afresh, as every candidate reaches the verifier: the
simulator decodes it once and runs it ``N`` times (its compiled hot blocks never kick in
for a fresh program), the lane evaluator runs it once. Then the same for `check_block` on the blocks of the real data (``../shared/data/trident-std``)
with the lane evaluator on (as shipped) and off. Every workload is also checked lane by
lane against the simulator (exit status 1 on any disagreement).

Usage::

    python benchmarks/lanes.py                 # workloads at 16 and 64 lanes, real blocks
    python benchmarks/lanes.py --lanes 16 32 --repeat 20 --blocks 300
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tasmopt.tasm import parse
from tasmopt.tasm.program import Program
from tasmopt.vm import VmInput, VmResult, run
from tasmopt.vm.equivalence import observe
from tasmopt.vm.lanes import LaneInputs, run_lanes
from tasmopt.vm.witness import witness


def arith(n: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    ops: list[str] = []
    for _ in range(n // 4):
        ops += rng.choice(
            [
                [f"push {rng.randrange(1, 1 << 40)}", "add", f"dup {rng.randrange(12)}", "mul"],
                [f"swap {rng.randrange(1, 12)}", f"addi {rng.randrange(1 << 32)}", "dup 3", "eq"],
                [f"pick {rng.randrange(1, 12)}", f"place {rng.randrange(1, 12)}", "dup 0", "pop 1"],
                ["dup 5", "dup 9", "add", "swap 2"],
            ]
        )
    return "\n".join(ops + ["halt"])


def hashes(k: int) -> str:
    body = ["dup 9"] * 10 + ["hash", "pop 5"]
    return "\n".join(body * k + ["sponge_absorb", "sponge_squeeze", "pop 5", "pop 5", "halt"])


def u32_mix(n: int) -> str:
    ops = ["split", "lt", "dup 0", "push 7", "and", "pop 1"] * (n // 6)
    return "\n".join(["push 12345678901", *ops, "halt"])


WORKLOADS: dict[str, Callable[[], str]] = {
    "arith 8": lambda: arith(8),
    "arith 32": lambda: arith(32),
    "arith 256": lambda: arith(256),
    "u32 60": lambda: u32_mix(60),
    "1 hash": lambda: hashes(1),
    "4 hashes": lambda: hashes(4),
}


def sim_runs(program: Program, inputs: list[VmInput]) -> list[VmResult]:
    return [run(program, inp) for inp in inputs]


def timed(fn: Callable[[], object], repeat: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def workloads(lane_counts: list[int], repeat: int) -> int:
    bad = 0
    print(f"{'workload':<11} {'lanes':>5} {'simulator':>11} {'lanes':>11} {'ratio':>7}")
    for name, make in WORKLOADS.items():
        text = make()
        program = parse(text)
        for n in lane_counts:
            inputs = [witness(i, 7, depth=32, inputs=8).vm_input() for i in range(n)]
            lanes = LaneInputs(inputs)
            ref = [run(program, inp) for inp in inputs]
            got = run_lanes(program, lanes)
            if got is None:
                print(f"{name:<11} not covered by the lane evaluator")
                bad += 1
                break
            bad += sum(
                observe(a) != observe(b) or (b.ok and a.heights != b.heights)
                for a, b in zip(got, ref, strict=True)
            )
            # fresh programs, as the verifier sees every candidate: no compiled hot blocks
            t_sim = timed(lambda: sim_runs(parse(text), inputs), repeat)  # noqa: B023
            t_lanes = timed(lambda: run_lanes(parse(text), lanes), repeat)  # noqa: B023
            print(
                f"{name:<11} {n:>5} {t_sim * 1e3:>8.2f} ms {t_lanes * 1e3:>8.2f} ms "
                f"{t_sim / t_lanes:>6.2f}x"
            )
    return bad


def real_blocks(limit: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from soundness import real_blocks as blocks_of  # noqa: PLC0415 - benchmark helper

    from tasmopt.vm import equivalence  # noqa: PLC0415
    from tasmopt.vm.equivalence import BlockCheck, check_block  # noqa: PLC0415

    data = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "trident-std"
    blocks = list(blocks_of(data))[:limit]
    checks = [
        BlockCheck(baseline=[str(i) for i in b], candidate=[str(i) for i in b], seed=1)
        for _, b in blocks
    ]
    shipped = equivalence._lane_runs
    times = {}
    for label, lane_runs in (("simulator only", lambda *a: None), ("with lanes", shipped)):
        equivalence._lane_runs = lane_runs  # type: ignore[assignment]
        try:
            t0 = time.perf_counter()
            verdicts = [check_block(c).equivalent for c in checks]
            times[label] = time.perf_counter() - t0
        finally:
            equivalence._lane_runs = shipped
        print(
            f"check_block on {len(checks)} real blocks, {label:<14}: "
            f"{times[label]:.2f} s ({sum(verdicts)} accepted)"
        )
    print(
        f"ratio simulator-only / with lanes: {times['simulator only'] / times['with lanes']:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lanes", type=int, nargs="+", default=[16, 64], help="lane counts")
    ap.add_argument("--repeat", type=int, default=10, help="timed repetitions per figure")
    ap.add_argument("--blocks", type=int, default=400, help="real blocks for check_block (0: skip)")
    args = ap.parse_args(argv)
    bad = workloads(args.lanes, args.repeat)
    if args.blocks:
        real_blocks(args.blocks)
    if bad:
        print(f"{bad} lanes disagree with the simulator")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
