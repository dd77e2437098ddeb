"""Verifier mutation benchmark: does the verifier ever accept a program that differs?

Takes every straight-line block (and, with ``--functions``, every function) of the real
toolchain data (``../shared/data/trident-std``, our lowering) and of the corpus (``corpus/``,
through our frontend), applies semantic mutations, and asks the verifier:

* blocks: `check_block` (the acceptance of every block candidate);
* functions: `check_function` and `check_aligned` together (the optimizer's acceptance of
  a whole function).

Whether a mutant *really* differs is decided independently of the verifier's acceptance
path: both programs run in the simulator on many witnesses with another seed, random ones
plus guard-directed ones (the baseline's guards solved, `tasmopt.vm.guards` for blocks,
concolic runs for functions), and any observable difference counts. Mutations: change a
constant, swap the operands of a non-commutative op, drop or duplicate an instruction,
replace an op by a near one, shift a RAM address by one, reorder two memory or I/O ops,
change a ``split``/``lt`` operand, and add a flag ``(v + c)^(p-1) - 1`` (zero except at one
root, through a chain of ``pow``) into a RAM address or a value. Ground truth also runs
witnesses solved onto the singular points of both runs (`tasmopt.vm.guards.singular_points`).
Prints one summary line per unit and a total; exit status 1
if any accepted mutant differs.

``--contract`` mutates the functions of corpus modules that own private scratch cells
(`tasmopt.vm.scratch`, the observable-behaviour contract of design §2) where the contract could
be fooled: a scratch store dropped, a scratch reload replaced by a constant, a scratch address
moved to the neighbouring cell, plus the usual mutations; acceptance is the optimizer's
(`check_function` and `check_aligned` with the function's private cells), the ground truth
`check_function` on 32 other witnesses that leaves out only the private cells' final values.
Usage::

    python benchmarks/soundness.py                       # blocks of trident-std + corpus
    python benchmarks/soundness.py --functions --max-units 200 --seed 2
    python benchmarks/soundness.py --contract --max-units 0
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from tasmopt.isa import P
from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr, Label, Program
from tasmopt.tir import codec
from tasmopt.vm.equivalence import (
    BlockCheck,
    _block_program,
    _run,
    check_aligned,
    check_block,
    check_function,
    observe,
)
from tasmopt.vm.expr import ExprContext
from tasmopt.vm.guards import passing_witness, singular_points
from tasmopt.vm.symbolic import run_symbolic
from tasmopt.vm.witness import witness

ROOT = Path(__file__).resolve().parents[1]
MEMORY_IO = {
    "read_mem",
    "write_mem",
    "read_io",
    "write_io",
    "divine",
    "sponge_absorb",
    "sponge_absorb_mem",
    "sponge_squeeze",
    "xx_dot_step",
    "xb_dot_step",
    "merkle_step_mem",
}
NEAR = {
    "add": "mul",
    "mul": "add",
    "eq": "lt",
    "lt": "eq",
    "and": "xor",
    "xor": "and",
    "split": "pop_count",
    "invert": "pop_count",
    "xx_add": "xx_mul",
    "xx_mul": "xx_add",
    "read_io": "divine",
    "divine": "read_io",
}
NON_COMMUTATIVE = {"lt", "div_mod", "pow", "xb_mul"}


def mutants(
    instrs: list[Instr], rng: random.Random, per_kind: int
) -> Iterator[tuple[str, list[Instr]]]:
    """Semantic mutations of a straight-line run (at most ``per_kind`` of each kind)."""
    n = len(instrs)

    def sample(kind: str, idxs: list[int]) -> list[int]:
        rng.shuffle(idxs)
        return idxs[:per_kind]

    for i in sample("const", [i for i, x in enumerate(instrs) if x.name in ("push", "addi")]):
        yield (
            "constant",
            instrs[:i] + [Instr(instrs[i].name, (int(instrs[i].arg) + 1) % P)] + instrs[i + 1 :],
        )
    for i in sample("swap", [i for i, x in enumerate(instrs) if x.name in NON_COMMUTATIVE]):
        yield "operands", instrs[:i] + [Instr("swap", 1)] + instrs[i:]
    for i in sample("drop", list(range(n))):
        yield "drop", instrs[:i] + instrs[i + 1 :]
    for i in sample("dup", list(range(n))):
        yield "duplicate", instrs[: i + 1] + [instrs[i]] + instrs[i + 1 :]
    for i in sample(
        "near",
        [
            i
            for i, x in enumerate(instrs)
            if x.name in NEAR or x.name in ("dup", "swap", "pick", "place")
        ],
    ):
        x = instrs[i]
        if x.name in NEAR:
            y = Instr(NEAR[x.name], x.arg if NEAR[x.name] in ("read_io", "divine") else None)
        else:
            lo = 1 if x.name == "swap" else 0
            y = Instr(x.name, max(lo, min(15, int(x.arg) + rng.choice((-1, 1)))))
        if y != x:
            yield "near op", instrs[:i] + [y] + instrs[i + 1 :]
    for i in sample(
        "addr", [i for i, x in enumerate(instrs) if x.name in ("read_mem", "write_mem")]
    ):
        yield "RAM address", instrs[:i] + [Instr("addi", 1)] + instrs[i:]
    for i in sample(
        "rare addr", [i for i, x in enumerate(instrs) if x.name in ("read_mem", "write_mem")]
    ):  # address + (address + c)^(p-1) - 1: the address itself except at address = -c
        yield "rare RAM address", instrs[:i] + rare_flag(rng) + [Instr("add")] + instrs[i:]
    for i in sample("rare value", [i for i, x in enumerate(instrs) if x.name in ARITH]):
        # the result + (result + c)^(p-1) - 1: the result itself except at result = -c
        yield "rare value", instrs[: i + 1] + rare_flag(rng) + [Instr("add")] + instrs[i + 1 :]
    mem = [i for i, x in enumerate(instrs) if x.name in MEMORY_IO]
    pairs = [(a, b) for a, b in zip(mem, mem[1:])]
    rng.shuffle(pairs)
    for a, b in pairs[:per_kind]:
        out = list(instrs)
        out[a], out[b] = out[b], out[a]
        yield "reorder memory/IO", out
    for i in sample("u32", [i for i, x in enumerate(instrs) if x.name in ("split", "lt")]):
        yield "split/lt operand", instrs[:i] + [Instr("addi", 1)] + instrs[i:]


#: Instructions whose result a "rare value" mutant perturbs.
ARITH = {"add", "addi", "mul", "invert", "xb_mul"}


def rare_flag(rng: random.Random) -> list[Instr]:
    """``_ v -> _ v ((v + c)^(p-1) - 1)``: a value that is 0 except at ``v = -c``, computed by a
    chain of ``pow`` whose exponents multiply to p-1 (the class of the two accepted mutants
    of the independent mutation test, issue 33)."""
    c = rng.choice((1, 7, 12345, P - 2))
    return [
        Instr("dup", 0),
        Instr("addi", c),
        Instr("push", 2**32 - 1),
        Instr("swap", 1),
        Instr("pow"),
        *[Instr("push", 65536), Instr("swap", 1), Instr("pow")] * 2,
        Instr("addi", P - 1),
    ]


def block_differs(base: list[Instr], mut: list[Instr], seed: int, tries: int = 48) -> bool:
    """Ground truth for blocks: some witness (random or guard-directed, seed ``seed``) shows
    an observable difference."""
    ctx = ExprContext()
    sym = run_symbolic(base, ctx)
    sym_m = run_symbolic(mut, ctx)
    depth = 16 + max(sym.base, sym_m.base, -sym.low_water, -sym_m.low_water) + 2
    inputs = (
        max(
            sym.consumed["public"],
            sym.consumed["secret"],
            sym_m.consumed["public"],
            sym_m.consumed["secret"],
        )
        + 2
    )
    digests = max(sym.consumed["digests"], sym_m.consumed["digests"]) + 1
    pb, pm = _block_program(base, "release"), _block_program(mut, "release")
    rng = random.Random(seed)
    for i in range(tries):
        w = witness(i, seed, depth=depth, inputs=inputs, digests=digests)
        if i % 2:  # every other witness guard-directed
            w = passing_witness(ctx, sym.guards, w, rng, time_budget_s=0.1) or w
        rb = _run(pb, w, len(base) + 2)
        rm = _run(pm, w, len(mut) + 2)
        if observe(rb) != observe(rm):
            return True
    # singular points: the roots of power bases, inverse and comparison operands, and equal
    # read addresses of everything either run leaves observable, solved with the guards
    values = sym.top_down(len(sym.stack) + 16) + sym_m.top_down(len(sym_m.stack) + 16)
    values += sym.outputs + sym_m.outputs + [v for _, v in sym.ram] + [v for _, v in sym_m.ram]
    values += [a for a, _ in sym.ram] + [a for a, _ in sym_m.ram]
    for k, q in enumerate(singular_points(ctx, values, limit=12)):
        guards = set(sym.guards) | {("zero", ctx.canonical_sign(q).id)}
        w = witness(tries + k, seed, depth=depth, inputs=inputs, digests=digests)
        w = passing_witness(ctx, guards, w, rng, time_budget_s=0.2) or w
        if observe(_run(pb, w, len(base) + 2)) != observe(_run(pm, w, len(mut) + 2)):
            return True
    return False


def _blocks_of(low, prefix: str) -> Iterator[tuple[str, list[Instr]]]:
    """The straight-line blocks of a lowering, as instruction lists."""
    for fn in low.functions:
        if fn.unlowerable or not fn.name:
            continue
        for b in fn.blocks:
            text = "\n".join(
                ln
                for ln in low.lines[b.start : b.end]
                if ln.strip() and not ln.strip().startswith("//")
            )
            try:
                instrs = list(parse_instructions(text))
            except Exception:
                continue
            if instrs:
                yield f"{prefix}.{fn.name}#{b.index}", instrs


def real_blocks(data: Path) -> Iterator[tuple[str, list[Instr]]]:
    for path in sorted(data.glob("*.json")):
        mod = json.loads(path.read_text())
        yield from _blocks_of(lower(codec.decode(mod["tir"])), mod["module"])


def corpus_blocks(root: Path, limit: int) -> Iterator[tuple[str, list[Instr]]]:
    from tasmopt.frontend import compile_modules

    files = sorted(p for p in root.rglob("*.tri") if "hand" not in p.parts)[:limit]
    for f in files:
        try:
            modules = compile_modules(f, [root])
        except Exception:
            continue
        for m in modules[-1:]:
            yield from _blocks_of(lower(m.ops), f"corpus:{f.stem}")


def real_functions(data: Path) -> Iterator[tuple[str, Program]]:
    for path in sorted(data.glob("*.json")):
        mod = json.loads(path.read_text())
        low = lower(codec.decode(mod["tir"]))
        text = ModuleText.from_lowering(low)
        for fn in low.functions:
            if fn.unlowerable or not fn.name:
                continue
            try:
                yield f"{mod['module']}.{fn.name}", text.harness(fn.name, "release")
            except Exception:
                continue


def function_mutants(
    prog: Program, rng: random.Random, count: int
) -> Iterator[tuple[str, Program]]:
    """Mutate one straight-line instruction of the function (not the harness's first two)."""
    items = list(prog.items)
    spots = [
        k
        for k, it in enumerate(items[2:], 2)
        if isinstance(it, Instr)
        and it.name not in ("call", "return", "recurse", "recurse_or_return", "skiz", "halt")
    ]
    rng.shuffle(spots)
    for k in spots[:count]:
        kind, mutated = next(iter(mutants([items[k]], rng, 1)), (None, None))
        if kind is None:
            continue
        new = items[:k] + mutated + items[k + 1 :]
        if any(isinstance(x, Label) for x in mutated):
            continue
        yield kind, Program.from_items(new, prog.isa)


def contract_functions(root: Path) -> Iterator[tuple[str, Program, frozenset[int]]]:
    """Functions of corpus modules (our frontend) whose call closure owns private cells."""
    from tasmopt.frontend import compile_modules
    from tasmopt.optimizer.contract import private_by_function

    for f in sorted(root.glob("*/*.tri")):
        try:
            ops = compile_modules(f, [root])[-1].ops
        except Exception:
            continue
        text = ModuleText.from_lowering(lower(ops))
        for name, cells in private_by_function(text, None, "release").items():
            try:
                yield (
                    f"corpus:{f.parent.name}.{f.stem}.{name}",
                    text.harness(name, "release"),
                    cells,
                )
            except Exception:
                continue


def scratch_mutants(
    prog: Program, cells: frozenset[int], rng: random.Random, count: int
) -> Iterator[tuple[str, Program]]:
    """Mutations at the private scratch accesses: drop a store (its values popped instead),
    replace a reload by ``push 0``, move an access to the neighbouring cell."""
    items = list(prog.items)
    spots = [
        k
        for k in range(len(items) - 1)
        if isinstance(items[k], Instr)
        and items[k].name == "push"
        and items[k].arg in cells
        and isinstance(items[k + 1], Instr)
        and items[k + 1].name in ("read_mem", "write_mem")
    ]
    rng.shuffle(spots)
    for k in spots[:count]:
        push, mem = items[k], items[k + 1]
        n = int(mem.arg)  # type: ignore[arg-type]
        if mem.name == "write_mem":  # _ v.. p -> _ p+n: drop the values, keep a pointer
            new = [Instr("pop", n), Instr("push", (int(push.arg) + n) % P)]  # type: ignore[arg-type]
            yield (
                "drop scratch store",
                Program.from_items(items[:k] + new + items[k + 2 :], prog.isa),
            )
        else:  # _ p -> _ v.. p-n
            new = [Instr("push", 0)] * n + [Instr("push", (int(push.arg) - n) % P)]  # type: ignore[arg-type]
            yield (
                "forge scratch reload",
                Program.from_items(items[:k] + new + items[k + 2 :], prog.isa),
            )
        moved = Instr("push", (int(push.arg) + rng.choice((-1, 1))) % P)  # type: ignore[arg-type]
        yield (
            "move scratch access",
            Program.from_items(items[:k] + [moved] + items[k + 1 :], prog.isa),
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "trident-std")
    ap.add_argument("--corpus", type=Path, default=ROOT / "corpus")
    ap.add_argument("--corpus-files", type=int, default=20, help="corpus entry files to compile")
    ap.add_argument("--per-kind", type=int, default=2, help="mutants of each kind per block")
    ap.add_argument("--max-units", type=int, default=0, help="blocks/functions at most (0: all)")
    ap.add_argument(
        "--max-mutants",
        type=int,
        default=0,
        help="block mutants at most (0: all), the blocks taken in a seeded random order",
    )
    ap.add_argument("--functions", action="store_true", help="also mutate whole functions")
    ap.add_argument(
        "--contract",
        action="store_true",
        help="only the scratch contract: mutate corpus functions that own private cells",
    )
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    if args.contract:
        return contract(args, rng, t0)
    units = list(real_blocks(args.data))
    if args.corpus.exists() and args.corpus_files:
        units += list(corpus_blocks(args.corpus, args.corpus_files))
    if args.max_units or args.max_mutants:
        rng.shuffle(units)
    if args.max_units:
        units = units[: args.max_units]
    stats = {
        "mutants": 0,
        "different": 0,
        "accepted_different": 0,
        "rejected_equivalent": 0,
        "accepted": 0,
    }
    bad: list[str] = []
    by_kind: Counter[str] = Counter()
    different_by_kind: Counter[str] = Counter()
    for name, instrs in tqdm(units, desc="blocks", unit="block", file=sys.stderr):
        base = tuple(str(i) for i in instrs)
        if args.max_mutants and stats["mutants"] >= args.max_mutants:
            break
        for kind, mut in mutants(instrs, rng, args.per_kind):
            stats["mutants"] += 1
            by_kind[kind] += 1
            v = check_block(BlockCheck(base, tuple(str(i) for i in mut), seed=args.seed))
            differs = block_differs(instrs, mut, seed=args.seed + 1000)
            stats["different"] += differs
            stats["accepted"] += v.equivalent
            different_by_kind[kind] += differs
            if v.equivalent and differs:
                stats["accepted_different"] += 1
                bad.append(f"{name} [{kind}]: {' ; '.join(base)} => {' ; '.join(map(str, mut))}")
            if not v.equivalent and not differs:
                stats["rejected_equivalent"] += 1
    print(
        f"blocks: {len(units)} blocks, {stats['mutants']} mutants, {stats['different']} truly "
        f"different, accepted-but-different {stats['accepted_different']}, "
        f"rejected-but-equivalent {stats['rejected_equivalent']}, accepted {stats['accepted']}"
    )
    print(
        "mutants (truly different) by kind: "
        + ", ".join(f"{k} {n} ({different_by_kind[k]})" for k, n in sorted(by_kind.items()))
    )
    if args.functions:
        fns = [(name, prog, frozenset()) for name, prog in real_functions(args.data)]
        if args.max_units:
            rng.shuffle(fns)
            fns = fns[: args.max_units]
        judge_functions("functions", fns, args, rng, bad, contract_mutants=False)
    for line in bad[:20]:
        print("ACCEPTED BUT DIFFERENT:", line)
    print(f"{time.perf_counter() - t0:.0f} s, seed {args.seed}")
    return 1 if bad else 0


def judge_functions(
    label: str,
    fns: list[tuple[str, Program, frozenset[int]]],
    args: argparse.Namespace,
    rng: random.Random,
    bad: list[str],
    contract_mutants: bool,
) -> None:
    """Mutate whole functions and compare the optimizer's acceptance (`check_function` and
    `check_aligned`, with the function's private cells) with the ground truth (32 other
    witnesses, only the private cells' final values left out); print one summary line."""
    stats = dict.fromkeys(
        ("mutants", "different", "accepted_different", "rejected_equivalent", "accepted"), 0
    )
    for name, prog, cells in tqdm(fns, desc=label, unit="fn", file=sys.stderr):
        muts = (
            list(scratch_mutants(prog, cells, rng, 2 * args.per_kind)) if contract_mutants else []
        )
        muts += list(function_mutants(prog, rng, args.per_kind))
        for kind, mut in muts:
            stats["mutants"] += 1
            v = check_function(prog, mut, seed=args.seed, budget_s=1.0, private_cells=cells)
            accepted = (
                v.equivalent
                and check_aligned(prog, mut, seed=args.seed, private_cells=cells).equivalent
            )
            truth = check_function(
                prog, mut, seed=args.seed + 1000, witnesses=32, budget_s=2.0, private_cells=cells
            )
            differs = truth.witness >= 0
            stats["different"] += differs
            stats["accepted"] += accepted
            if accepted and differs:
                stats["accepted_different"] += 1
                bad.append(f"{name} [{kind}] {label}")
            if not accepted and not differs:
                stats["rejected_equivalent"] += 1
    print(
        f"{label}: {len(fns)} functions, {stats['mutants']} mutants, {stats['different']} truly "
        f"different, accepted-but-different {stats['accepted_different']}, "
        f"rejected-but-equivalent {stats['rejected_equivalent']}, accepted {stats['accepted']}"
    )


def contract(args: argparse.Namespace, rng: random.Random, t0: float) -> int:
    bad: list[str] = []
    fns = list(contract_functions(args.corpus))
    if args.max_units:
        rng.shuffle(fns)
        fns = fns[: args.max_units]
    judge_functions("contract", fns, args, rng, bad, contract_mutants=True)
    for line in bad[:20]:
        print("ACCEPTED BUT DIFFERENT:", line)
    print(f"{time.perf_counter() - t0:.0f} s, seed {args.seed}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
