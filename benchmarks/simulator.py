"""Throughput of the Triton VM simulator (tasmopt.vm.simulator) in instructions per second.

Three workloads: (a) a long straight-line program of mixed stack and arithmetic
instructions, (b) a counted loop driven by ``recurse``, (c) a hash-heavy loop. Each is run
once to warm the per-program caches, then timed over several runs. A fourth line shows the
verifier's pattern: many fresh short programs, each run on 16 inputs (cold caches).
"""

from __future__ import annotations

import argparse
import random
import time

from tasmopt.tasm import parse
from tasmopt.vm import VmInput, run


def straight_line(n: int, seed: int = 1) -> str:
    """A program of about ``n`` stack/arith instructions that never fails, then ``halt``."""
    rng = random.Random(seed)
    ops = []
    for _ in range(n // 4):
        ops += rng.choice(
            [
                [f"push {rng.randrange(1, 1 << 40)}", "add", f"dup {rng.randrange(16)}", "mul"],
                [f"swap {rng.randrange(1, 16)}", f"addi {rng.randrange(1 << 32)}", "dup 3", "eq"],
                [f"pick {rng.randrange(1, 16)}", f"place {rng.randrange(1, 16)}", "dup 0", "pop 1"],
                ["dup 5", "dup 9", "add", "swap 2"],
            ]
        )
    return "\n".join(ops + ["halt"])


def counted_loop(iterations: int) -> str:
    """``iterations`` passes through a 7-instruction loop body ending in ``recurse``."""
    return f"""
        push {iterations}
        call loop
        halt
    loop:
        dup 0 push 0 eq skiz return
        addi -1
        dup 0 dup 0 mul pop 1
        recurse
    """


def hash_loop(iterations: int) -> str:
    """``iterations`` passes through a loop of ``hash``, ``sponge_absorb`` and ``sponge_squeeze``."""
    return f"""
        sponge_init
        push {iterations}
        call loop
        halt
    loop:
        dup 0 push 0 eq skiz return
        addi -1
        dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10
        hash pop 5
        dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10 dup 10
        sponge_absorb
        sponge_squeeze pop 5 pop 5
        recurse
    """


def measure(name: str, text: str, repeat: int, measure_heights: bool) -> None:
    program = parse(text)
    vm_input = VmInput(initial_stack=[0] * 16)
    t0 = time.perf_counter()
    first = run(program, vm_input, step_limit=10**9, measure=measure_heights)
    first_s = time.perf_counter() - t0
    assert first.ok, first.error
    t0 = time.perf_counter()
    for _ in range(repeat):
        result = run(program, vm_input, step_limit=10**9, measure=measure_heights)
    elapsed = (time.perf_counter() - t0) / repeat
    print(
        f"{name:<14} {result.cycles:>9,} cycles  {elapsed * 1e3:9.2f} ms/run  "
        f"{result.cycles / elapsed / 1e6:7.2f} M instr/s   "
        f"(first run incl. compile: {first_s * 1e3:.2f} ms)"
    )


def fresh_blocks(count: int, length: int, witnesses: int, measure_heights: bool) -> None:
    """``count`` distinct ``length``-instruction programs, each parsed, decoded, attested and
    run on ``witnesses`` inputs: the cost per candidate the verifier sees."""
    texts = [straight_line(length, seed=s) for s in range(count)]
    rng = random.Random(0)
    inputs = [
        VmInput(initial_stack=[rng.randrange(1 << 64) for _ in range(16)]) for _ in range(witnesses)
    ]
    t0 = time.perf_counter()
    cycles = 0
    for text in texts:
        program = parse(text)
        for vm_input in inputs:
            cycles += run(program, vm_input, measure=measure_heights).cycles
    elapsed = time.perf_counter() - t0
    print(
        f"fresh blocks   {count} programs x {witnesses} inputs, {length} instr: "
        f"{elapsed / count * 1e6:8.0f} us/program incl. parse  "
        f"({cycles / elapsed / 1e6:.2f} M instr/s overall)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--straight",
        type=int,
        default=100_000,
        help="instructions in the straight-line program (default 100000)",
    )
    parser.add_argument(
        "--loop", type=int, default=200_000, help="iterations of the counted loop (default 200000)"
    )
    parser.add_argument(
        "--hash", type=int, default=500, help="iterations of the hash loop (default 500)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per workload")
    parser.add_argument(
        "--blocks",
        type=int,
        default=200,
        help="fresh short programs in the verifier workload (default 200)",
    )
    parser.add_argument(
        "--no-measure", action="store_true", help="run with measure=False (no table heights)"
    )
    args = parser.parse_args()
    m = not args.no_measure
    print(f"measure={m}")
    measure("straight-line", straight_line(args.straight), args.repeat, m)
    measure("counted loop", counted_loop(args.loop), args.repeat, m)
    measure("hash loop", hash_loop(args.hash), args.repeat, m)
    fresh_blocks(args.blocks, 32, 16, m)


if __name__ == "__main__":
    main()
