"""Semantics-preserving augmentations of training pairs (design §4), and the coverage measure.

Two kinds, both checked by the verifier before they are kept:

* **input space — reorder independent ops**: the block's dataflow is re-emitted as TIR in
  another valid order of its operations, in the Trident builder's style (operands copied
  with ``Dup`` before each op, a ``Swap``/``Pop`` cleanup at the end). The new TIR means
  exactly what the old one meant (the verifier proves its lowering equivalent to the old
  baseline), so the best known target stays a correct and cheaper answer for it;
* **output space — verified rewrites of the target**: other schedules of the target's
  dataflow with the same number of cycles (sampled by the beam scheduler with random
  tie-breaking), verified against the baseline.

`coverage` measures how varied a set of targets is: every target's instruction 3-grams
(arguments of ``push``/``addi`` abstracted) are MinHashed into a cluster, and the Shannon
entropy of the cluster distribution is reported (bits), with the plain 3-gram entropy.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence

from tasmopt.isa import IsaVariant, names_where
from tasmopt.lower.expansion import SINGLE, expand
from tasmopt.search.algebra import simplify
from tasmopt.search.dataflow import Dataflow, UnsupportedBlock, extract
from tasmopt.search.schedule import SHUFFLES, Budget, beam, exact
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tasm.program import Instr
from tasmopt.tir.ops import Op
from tasmopt.vm.equivalence import BlockCheck, check_block

__all__ = ["tir_of", "lower_block", "reorder_variants", "target_variants", "coverage"]

_FIELD_ARGUMENT = names_where(lambda i: i.has_field_argument)
_N_OPS = {
    "pop": "Pop",
    "divine": "Hint",
    "read_io": "ReadIo",
    "write_io": "WriteIo",
    "read_mem": "ReadMem",
    "write_mem": "WriteMem",
    "dup": "Dup",
    "swap": "Swap",
}
#: instruction -> TIR op, for the ops that lower to exactly that one instruction
_ONE = {
    instrs[0]: kind
    for kind, instrs in SINGLE.items()
    if len(instrs) == 1 and kind not in ("Return", "Halt")
}
#: The data-movement instructions TIR can express: the stack shuffles (ISA table) that some
#: TIR op lowers to on its own (no ``pick``/``place``).
_TIR_SHUFFLES = frozenset(n for n in SHUFFLES if n in _N_OPS or n in _ONE)


def tir_of(code: Sequence[Instr]) -> tuple[Op, ...] | None:
    """TIR ops whose lowering is exactly ``code``, or None if some instruction has no TIR
    op of its own (``pick``, ``place``, ``addi``, ``nop``, ...)."""
    out: list[Op] = []
    for ins in code:
        if ins.name == "push":
            out.append(Op("Push", ins.arg))
        elif ins.name in _N_OPS:
            out.append(Op(_N_OPS[ins.name], ins.arg))
        elif ins.name == "assert":
            out.append(Op("Assert", 1))
        elif ins.name == "assert_vector":
            out.append(Op("Assert", 5))
        elif ins.name == "hash":
            out.append(Op("Hash", fields=(("width", 5),)))
        elif ins.name in _ONE:
            out.append(Op(_ONE[ins.name]))
        else:
            return None
    return tuple(out)


def lower_block(ops: Sequence[Op]) -> list[str]:
    """Instruction lines of a straight-line TIR block (comments dropped)."""
    return [t for op in ops if op.kind != "Comment" for t in expand(op)]


def _topological(df: Dataflow, rng: random.Random) -> list:
    nodes = [n for n in df.needed_nodes() if n.instr.name != "push"]
    made = set(df.entry) | set(df.constants)
    order, left = [], list(nodes)
    next_effect = 0
    effects = sorted(n.effect for n in nodes if n.effect is not None)
    while left:
        ready = [
            n
            for n in left
            if all(v in made for v in n.inputs)
            and (n.effect is None or n.effect == effects[next_effect])
        ]
        if not ready:
            return []
        n = rng.choice(ready)
        order.append(n)
        left.remove(n)
        made.update(n.outputs)
        if n.effect is not None:
            next_effect += 1
    return order


def _builder_style(df: Dataflow, order: Sequence, rng: random.Random) -> list[Instr] | None:
    """Emit ``order`` with copies of every operand (``Dup``), like the Trident builder; the
    last use of a value already on top is sometimes consumed in place."""
    stack = list(df.entry)
    code: list[Instr] = []
    remaining = Counter(v for n in order for v in n.inputs) + Counter(df.final)
    for node in order:
        r = len(node.inputs)
        for j in range(r - 1, -1, -1):
            v = node.inputs[j]
            depth_top = len(stack) - 1
            if (
                j == r - 1
                and stack
                and stack[-1] == v
                and remaining[v] <= stack.count(v)
                and rng.random() < 0.5
            ):
                pass  # consume the copy already on top
            elif v in df.constants:
                code.append(Instr("push", df.constants[v]))
                stack.append(v)
            else:
                pos = max((k for k in range(len(stack)) if stack[k] == v), default=None)
                if pos is None or depth_top - pos > 15:
                    return None
                code.append(Instr("dup", depth_top - pos))
                stack.append(v)
            remaining[v] -= 1
        code.append(node.instr)
        del stack[len(stack) - r :]
        stack.extend(reversed(node.outputs))
    tail = exact(
        Dataflow(
            list(stack),
            list(df.final),
            [],
            {},
            df.constants,
            df.low_water + len(df.entry) - len(stack),
            0,
        ),
        max_length=10,
        budget=Budget(3000),
        shuffles=_TIR_SHUFFLES,
    )
    return None if tail is None else code + tail


def reorder_variants(
    ops: Sequence[Op], *, count: int, seed: int, isa: IsaVariant = "release", tries: int = 4
) -> list[tuple[Op, ...]]:
    """Up to ``count`` TIR blocks equivalent to ``ops`` with their operations in another
    order (see module docstring), each verified against the original lowering."""
    base = lower_block(ops)
    try:
        df = extract(parse_instructions("\n".join(base), isa), isa)
    except (UnsupportedBlock, Exception):
        return []
    rng = random.Random(seed)
    seen = {tuple(base)}
    out: list[tuple[Op, ...]] = []
    for _ in range(count * tries):
        if len(out) >= count:
            break
        order = _topological(df, rng)
        code = _builder_style(df, order, rng) if order else None
        new = tir_of(code) if code is not None else None
        if new is None:
            continue
        lines = tuple(lower_block(new))
        if lines in seen:
            continue
        seen.add(lines)
        if check_block(BlockCheck(tuple(base), lines, isa, seed=seed)).equivalent:
            out.append(new)
    return out


def target_variants(
    baseline: Sequence[str],
    target: Sequence[str],
    *,
    count: int,
    seed: int,
    isa: IsaVariant = "release",
) -> list[list[str]]:
    """Up to ``count`` other schedules of ``target``'s dataflow, no longer than ``target``,
    each verified against ``baseline``."""
    try:
        df = simplify(extract(parse_instructions("\n".join(target), isa), isa))
    except (UnsupportedBlock, Exception):
        return []
    rng = random.Random(seed)
    seen = {tuple(target)}
    out: list[list[str]] = []
    for _ in range(4 * count):
        if len(out) >= count:
            break
        cand = beam(df, width=4, budget=Budget(2000), rng=rng)
        if cand is None or len(cand) > len(target):
            continue
        lines = tuple(str(i) for i in cand)
        if lines in seen:
            continue
        seen.add(lines)
        if check_block(BlockCheck(tuple(baseline), lines, isa, seed=seed)).equivalent:
            out.append(list(lines))
    return out


def _gram_text(line: str) -> str:
    parts = line.split()
    return f"{parts[0]} c" if parts[0] in _FIELD_ARGUMENT and len(parts) > 1 else line


def _grams(lines: Sequence[str], n: int = 3) -> list[tuple[str, ...]]:
    toks = ["<s>"] + [_gram_text(ln) for ln in lines] + ["</s>"]
    return [tuple(toks[i : i + n]) for i in range(max(0, len(toks) - n + 1))]


def _minhash(grams: Iterable[tuple[str, ...]], k: int = 2) -> tuple[int, ...]:
    keys = [" ".join(g).encode() for g in set(grams)] or [b""]
    return tuple(
        min(
            int.from_bytes(hashlib.blake2b(x, digest_size=8, salt=bytes([i]) * 8).digest(), "big")
            for x in keys
        )
        for i in range(k)
    )


def _entropy(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0


def coverage(targets: Iterable[Sequence[str]]) -> dict[str, float]:
    """Coverage of a set of targets: ``cluster_entropy`` (bits, MinHash clusters of 3-gram
    sets), ``clusters`` (how many), ``ngram_entropy`` (bits, over all 3-grams), ``rows``."""
    clusters: Counter = Counter()
    grams: Counter = Counter()
    rows = 0
    for lines in targets:
        g = _grams(list(lines))
        grams.update(g)
        clusters[_minhash(g)] += 1
        rows += 1
    return {
        "rows": rows,
        "clusters": len(clusters),
        "cluster_entropy": _entropy(clusters),
        "ngram_entropy": _entropy(grams),
    }
