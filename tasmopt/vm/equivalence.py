"""The verifier: decides whether a candidate may replace a baseline (design §2). It fails
closed: anything it cannot prove is rejected, with the reason (`rejection_class`).

Observable behaviour: a candidate is *equivalent* to its baseline if, from every entry state
on which the baseline does not underflow the op stack, both leave the same op stack, RAM,
public output, input consumption (public, secret, digests), sponge state and external calls,
and one fails exactly when the other does.

RAM means every cell except **private scratch cells that are dead** (design §2): cells of the
compiler's scratch regions (from 2^29) that `tasmopt.vm.scratch` proves, on the request's own
text, to be accessed only at constant addresses by one function that does no computed-address
access, with no scratch address escaping anywhere in the request; such a cell is dead after a
straight-line run when every read of it lies in that run after a write, and at the harness's
halt. Callers pass the cells (`BlockCheck.dead_cells`, ``private_cells=`` of `check_aligned` and
`check_function`); by default all RAM is observable.

The op stack at the end of a straight-line run likewise leaves out **dead slots**: slots
`tasmopt.vm.stack_liveness` proves, on the baseline program's own text, that no path reads
again before popping them (callees summarised by how deep they reach; everything live at
returns, loop iterations, halts and external calls). ``BlockCheck.dead_slots`` carries them
(`check_aligned` computes them per run); the stack length is always compared.

Three layers decide it:

1. **Symbolic** (straight-line blocks): both run on canonical expressions
   (`tasmopt.vm.symbolic`); equal observables are a proof. A definite difference (stack
   height, output count, input consumption, deeper underflow) rejects at once; differences
   through comparisons, bit operations, RAM reads that may alias or RAM cells at
   non-algebraic addresses, differing guards or RAM write sequences are unprovable.
2. **Differential**: both run in the simulator on >= `MIN_WITNESSES` witnesses that *pass
   the baseline's guards* (`check_block`): random ones first — `LANE_WITNESSES` of them in one
   numpy pass where the lane evaluator covers the block (`tasmopt.vm.lanes`; one lane of each
   program is re-run in the simulator and any disagreement falls back to it) — then
   guard-directed ones solved from the symbolic guards (`tasmopt.vm.guards`). Witnesses start with a live random
   sponge (every eighth uninitialised). Witnesses on which the baseline fails must make the
   candidate fail too but never count: if fewer than the minimum pass, the check rejects.
   When layer 1 could not prove equality, acceptance additionally needs every remaining
   difference to be a polynomial over algebraic atoms of bounded degree d with
   d · witnesses / p <= 2^-40 (`degree_ok`: Schwartz–Zippel), and at least
   `MIN_RANDOM_FIELD` passing witnesses with uniformly random field values.
3. **Whole functions**: `check_aligned` proves two programs equal by their control
   skeleton (identical labels and control-flow instructions, the instruction a ``skiz`` may
   skip included) and a `check_block` proof of every differing straight-line run between
   them; `check_function` runs both on witnesses that reach the return (concolic
   guard-directed ones where random ones fail, `tasmopt.vm.concolic`), and measures
   cycles and table heights. The optimizer needs both.

Underflow contract: the caller guarantees the stack depth the *baseline* needs; a candidate
may never reach deeper (checked statically for blocks), so it never fails with TooShallow
where the baseline does not.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache, wraps
from types import ModuleType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from tasmopt.deadline import Deadline
from tasmopt.deadline import current as current_deadline
from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.tasm.program import Instr, Program
from tasmopt.vm.expr import ExprContext, Guard, Poly
from tasmopt.vm.guards import passing_witness, singular_points
from tasmopt.vm.scratch import Liveness, items_of_program
from tasmopt.vm.stack_liveness import StackLiveness
from tasmopt.vm.stack_liveness import of_program as stack_liveness
from tasmopt.vm.symbolic import SymbolicRun, run_symbolic
from tasmopt.vm.witness import CONTROL_FAMILIES, Witness, witness

if TYPE_CHECKING:  # the simulator is imported late (its Tip5 tables are heavy)
    from tasmopt.vm.lanes import LaneInputs, LaneRun
    from tasmopt.vm.state import VmResult
    from tasmopt.vm.tables import TableHeights

log = logging.getLogger(__name__)


def preload() -> None:
    """Import now what the verifier imports late (the lane-parallel simulator and NumPy, the
    concolic layer, z3): a long-running process calls this at start, so that its first
    request's checks do not pay for the imports inside their deadline (NumPy alone: about
    80 ms on 2 cores, most of a 200 ms deadline's block checks)."""
    import z3  # noqa: F401 - the import is the point

    import tasmopt.vm.concolic  # noqa: F401
    import tasmopt.vm.lanes  # noqa: F401
    import tasmopt.vm.simulator  # noqa: F401


__all__ = [
    "preload",
    "REJECTION_CLASSES",
    "rejection_class",
    "degree_ok",
    "BlockCheck",
    "Verdict",
    "check_block",
    "check_blocks",
    "clear_block_verdicts",
    "compare_symbolic",
    "SymbolicComparison",
    "FunctionVerdict",
    "check_function",
    "stall_cap",
    "STALL_FACTOR",
    "STALL_FLOOR",
    "harness",
    "observe",
    "MIN_WITNESSES",
    "LANE_WITNESSES",
    "HARNESS_CYCLES",
    "AlignedVerdict",
    "check_aligned",
    "ACCEPTANCE_TABLES",
    "no_taller",
    "no_taller_at_runtime",
    "PROGRAM_SIZE_TABLES",
    "padded_height",
    "VERIFIER_VERSION",
]

#: Version of what this module accepts. Bump it with every change that could accept a program
#: an earlier version rejected (or the reverse): results proven by another version are not
#: reused (the per-function result cache keys on it, `tasmopt.optimizer.keys`).
VERIFIER_VERSION = "2026.11.29.1"

#: Design §2: at least this many differential witnesses per check, each of which must run
#: the baseline to its end (witnesses on which it fails do not count).
MIN_WITNESSES = 16

#: Random witnesses a straight-line block is run on when the lane evaluator covers it
#: (`tasmopt.vm.lanes`): one numpy pass over 64 lanes costs about what 16 simulator runs
#: cost (``benchmarks/lanes.py``), so the verifier takes the wider evidence, and fewer
#: blocks need guard-directed witnesses (the SMT solver) to reach `MIN_WITNESSES` passing.
LANE_WITNESSES = 64

#: A polynomial-identity acceptance needs this many passing witnesses drawn uniformly from F_p.
MIN_RANDOM_FIELD = 4

#: Guard-directed witnesses tried per required witness before a check gives up (rejects).
DIRECTED_TRIES = 3


@dataclass(frozen=True)
class BlockCheck:
    """One candidate to check against a straight-line baseline block. JSON-serializable.

    Attributes:
        baseline: the baseline's instruction lines (TASM, one instruction per line).
        candidate: the candidate's instruction lines.
        isa: instruction-set variant (``release`` or ``head``).
        witnesses: differential witnesses (at least `MIN_WITNESSES` are used).
        seed: witness seed; a check is deterministic for a seed.
        dead_cells: RAM addresses whose values after the block are not observable: private
            scratch cells dead at the block's end (`tasmopt.vm.scratch.dead_after`, the
            observable-behaviour contract of design §2). Empty: all RAM is observable.
        dead_slots: op-stack slots (st index after the block) whose values the program
            never reads again (`tasmopt.vm.stack_liveness`): left out of the comparison;
            the stack lengths are still compared. Empty: the whole op stack is observable.
    """

    baseline: tuple[str, ...]
    candidate: tuple[str, ...]
    isa: IsaVariant = "release"
    witnesses: int = MIN_WITNESSES
    seed: int = 0
    dead_cells: tuple[int, ...] = ()
    dead_slots: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": list(self.baseline),
            "candidate": list(self.candidate),
            "isa": self.isa,
            "witnesses": self.witnesses,
            "seed": self.seed,
            "dead_cells": list(self.dead_cells),
            "dead_slots": list(self.dead_slots),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BlockCheck:
        return cls(
            tuple(d["baseline"]),
            tuple(d["candidate"]),
            d.get("isa", "release"),
            int(d.get("witnesses", MIN_WITNESSES)),
            int(d.get("seed", 0)),
            tuple(int(c) for c in d.get("dead_cells", ())),
            tuple(int(k) for k in d.get("dead_slots", ())),
        )


@dataclass
class Verdict:
    """The verifier's answer for one `BlockCheck`.

    Attributes:
        equivalent: True only if proven symbolically, or if the differential pass is a
            proof (see the module docstring).
        method: ``"symbolic"``, ``"differential"`` or ``"rejected"``.
        reason: why it was rejected (first difference found), else None.
        cycles: clock cycles of the candidate block (one pass; no ``halt``).
        heights: AET table heights of the candidate block run as a program (with ``halt``),
            max over witnesses.
    """

    equivalent: bool
    method: str
    reason: str | None = None
    cycles: int = 0
    heights: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        return cls(
            bool(d["equivalent"]),
            d["method"],
            d.get("reason"),
            int(d.get("cycles", 0)),
            dict(d.get("heights", {})),
        )


def _reject(reason: str) -> Verdict:
    return Verdict(False, "rejected", reason)


#: Reason classes of rejections (metric label ``reason`` of
#: ``tasmopt_verifier_rejections_total``; `rejection_class`).
REJECTION_CLASSES = ("guards", "degree", "random", "different", "unprovable", "function")


def rejection_class(reason: str | None) -> str:
    """The class of a rejection reason: ``guards`` (too few witnesses pass the baseline's
    guards), ``degree`` (the polynomial-identity test does not apply), ``random`` (too few
    random-field witnesses), ``different`` (a witness or the symbolic run shows a
    difference), else ``unprovable``."""
    text = reason or ""
    if "pass the baseline's guards" in text or "ran the baseline to its return" in text:
        return "guards"
    if "has degree" in text:
        return "degree"
    if "random field values" in text:
        return "random"
    if text.startswith(
        (
            "witness ",
            "directed witness ",
            "net stack effect",
            "consumes ",
            "writes ",
            "candidate pops",
        )
    ):
        return "different"
    return "unprovable"


# -- layer 1 ------------------------------------------------------------------------------


@dataclass
class SymbolicComparison:
    """``status``: ``proven`` | ``testable`` (algebraic differences only) | ``different``
    (a definite observable difference) | ``unprovable``. ``differing``: for ``testable``,
    the baseline's and the candidate's values of every observable that differs as an
    expression."""

    status: str
    reason: str | None = None
    differing: tuple[Poly, ...] = ()


#: Soundness target of the polynomial-identity argument: a false acceptance probability of
#: at most 2^-40 per check (see `degree_ok`).
SZ_ERROR_LOG2 = -40


def degree_ok(degree: int | None, witnesses: int) -> bool:
    """Whether the Schwartz–Zippel argument covers a difference of this degree.

    A nonzero polynomial of total degree d over F_p vanishes at a uniformly random point
    with probability at most d/p (Schwartz–Zippel lemma). A difference that vanishes on all
    ``witnesses`` independent random points is therefore zero except with probability at
    most (d/p)^n <= d·n/p; we require d·n/p <= 2^-40, i.e. d <= p / (n · 2^40) (about 2^20
    for 16 witnesses). Exponentiation (``(x+7)^(p-1)`` is 1 except at x = -7), Tip5 outputs
    and nested inverses have no such bound (``degree`` None) and must be proven exactly.
    """
    if degree is None:
        return False
    return degree * max(1, witnesses) <= (P >> -SZ_ERROR_LOG2)


def compare_symbolic(
    ctx: ExprContext,
    base: SymbolicRun,
    cand: SymbolicRun,
    witnesses: int = 16,
    hidden: frozenset[int] = frozenset(),
    dead_slots: frozenset[int] = frozenset(),
) -> SymbolicComparison:
    """Compare two symbolic runs made in ``ctx`` (see the module docstring). ``hidden``:
    RAM cells (constant addresses) whose final values are not observable; ``dead_slots``:
    final op-stack slots (st index) whose values are not observable.

    ``testable`` is returned only when every remaining difference is algebraic (free
    variables, RAM cells at algebraic addresses, field inverses) *and* its degree passes
    `degree_ok` for ``witnesses`` random witnesses.
    """
    if base.unsupported or cand.unsupported:
        which = "baseline" if base.unsupported else "candidate"
        name = base.unsupported or cand.unsupported
        return SymbolicComparison("unprovable", f"{which} contains control flow ({name})")
    if base.delta != cand.delta:
        return SymbolicComparison(
            "different", f"net stack effect {cand.delta:+d}, baseline {base.delta:+d}"
        )
    if cand.low_water < base.low_water:
        return SymbolicComparison(
            "different",
            f"candidate pops {-cand.low_water} below entry, baseline only "
            f"{-base.low_water}: could underflow where the baseline does not",
        )
    for kind in ("public", "secret", "digests"):
        if base.consumed[kind] != cand.consumed[kind]:
            return SymbolicComparison(
                "different",
                f"consumes {cand.consumed[kind]} {kind} input tokens, baseline "
                f"{base.consumed[kind]}",
            )
    if len(base.outputs) != len(cand.outputs):
        return SymbolicComparison(
            "different", f"writes {len(cand.outputs)} output tokens, baseline {len(base.outputs)}"
        )
    pairs = []  # (what, baseline value, candidate value)
    # Below the materialized part both stacks hold the same untouched entry elements
    # (len(stack) = base + delta and the deltas are equal), so this depth covers everything.
    depth = max(len(base.stack), len(cand.stack))
    for i, (x, y) in enumerate(zip(base.top_down(depth), cand.top_down(depth))):
        if x is not y and i not in dead_slots:
            pairs.append((f"st{i}", x, y))
    for i, (x, y) in enumerate(zip(base.outputs, cand.outputs)):
        if x is not y:
            pairs.append((f"output[{i}]", x, y))
    if (base.sponge is None) != (cand.sponge is None):
        sb = base.sponge_state()
        sc = cand.sponge_state()
    else:
        sb, sc = base.sponge or (), cand.sponge or ()
    for i, (x, y) in enumerate(zip(sb, sc)):
        if x is not y:
            pairs.append((f"sponge[{i}]", x, y))
    if base.sponge_initialized != cand.sponge_initialized:
        return SymbolicComparison("unprovable", "sponge initialisation differs")
    if base.guards != cand.guards:
        return SymbolicComparison(
            "unprovable", "failure conditions (asserts, u32 checks, inverses of zero) differ"
        )
    ram_b, ram_c = base.ram_effect(hidden), cand.ram_effect(hidden)
    if ram_b != ram_c:
        return SymbolicComparison("unprovable", "RAM writes differ")
    if not pairs:
        return SymbolicComparison("proven")
    what, x, y = pairs[0]
    reason = f"{what}: {ctx.describe(y)} vs baseline {ctx.describe(x)}"
    if not ctx.is_algebraic([p for _, a, b in pairs for p in (a, b)]):
        return SymbolicComparison("unprovable", reason)
    degrees = [ctx.degree(ctx.sub(a, b)) for _, a, b in pairs]
    worst = None if None in degrees else max(degrees)  # type: ignore[type-var]  # no degree is None on this branch
    if not degree_ok(worst, witnesses):
        return SymbolicComparison(
            "unprovable",
            f"{reason}: the difference has degree "
            f"{'unbounded' if worst is None else worst}, too high for a "
            f"polynomial-identity test on {witnesses} witnesses",
        )
    # The cells read are independent random values only where their addresses differ: the
    # addresses' differences are compared like any other value (`ExprContext.alias_degree`).
    values = tuple(p for _, a, b in pairs for p in (a, b))
    alias = ctx.alias_degree(ctx.read_addresses(values))
    if alias is None or not degree_ok(worst + alias, witnesses):  # type: ignore[operator]  # worst is bounded here
        return SymbolicComparison(
            "unprovable",
            f"{reason}: the RAM addresses read differ by a polynomial of degree "
            f"{'unbounded' if alias is None else alias}: two cells may coincide on every "
            "random witness and differ elsewhere",
        )
    return SymbolicComparison("testable", reason, values)


# -- layer 2 ------------------------------------------------------------------------------


def _vm() -> ModuleType:
    from tasmopt.vm import simulator  # imported late: the simulator imports Tip5 tables

    return simulator


def observe(
    result: VmResult,
    hidden: frozenset[int] = frozenset(),
    dead_slots: frozenset[int] = frozenset(),
) -> tuple[Any, ...]:
    """The observables of a VmResult (design §2), as a comparable tuple; all errors equal.
    ``hidden``: RAM cells left out (private scratch cells dead at the end of the run);
    ``dead_slots``: op-stack slots (st index) whose values are left out (``None`` in their
    place: the stack length still counts)."""
    if result.error is not None:
        return ("error",)
    ram = result.ram.items()
    stack: tuple[Any, ...] = tuple(result.stack)
    if dead_slots:
        top = len(stack) - 1
        stack = tuple(None if top - j in dead_slots else v for j, v in enumerate(stack))
    return (
        stack,
        tuple(sorted((a, v) for a, v in ram if a not in hidden) if hidden else sorted(ram)),
        tuple(result.public_output),
        result.public_input_consumed,
        result.secret_input_consumed,
        result.secret_digests_consumed,
        tuple(result.sponge) if result.sponge is not None else None,
        tuple((c.symbol, c.stack) for c in result.external_calls),
    )


def _explain(a: tuple[Any, ...], b: tuple[Any, ...]) -> str:
    if a[0] == "error" or b[0] == "error":
        return (
            "baseline fails and candidate does not"
            if a[0] == "error"
            else "candidate fails and baseline does not"
        )
    names = (
        "op stack",
        "RAM",
        "public output",
        "public input consumed",
        "secret input consumed",
        "secret digests consumed",
        "sponge state",
        "external calls",
    )
    for name, x, y in zip(names, a, b):
        if x != y:
            if name == "op stack" and len(x) != len(y):
                return f"op stack length {len(y)}, baseline {len(x)}"
            if name == "op stack":
                i = next(k for k in range(len(x)) if x[-1 - k] != y[-1 - k])
                return f"op stack differs at st{i}: {y[-1 - i]} vs baseline {x[-1 - i]}"
            return f"{name} differs"
    return "differs"


def _run(program: Program, w: Witness, step_limit: int, start: int | str = 0) -> VmResult:
    result: VmResult = _vm().run(program, w.vm_input(), start=start, step_limit=step_limit)
    return result


#: Witness sizes of a block check (op-stack depth, input tokens) are multiples of this.
_WITNESS_QUANTUM = 8


def _quantum(n: int, q: int = _WITNESS_QUANTUM) -> int:
    """``n`` rounded up to a multiple of ``q``."""
    return -(-n // q) * q


def _block_program(instrs: Sequence[Instr], isa: IsaVariant) -> Program:
    return Program.from_items(list(instrs) + [Instr("halt")], isa)


#: Tables compared for acceptance. The cascade table is left out: it counts distinct 16-bit
#: limbs over *all* Tip5 traces, including the attestation of the program's own words
#: (Triton VM spec §7.8), so any edit of the program moves it pseudo-randomly by a few rows.
#: It still counts through the padded height, which must not grow (see `no_taller`).
ACCEPTANCE_TABLES = (
    "program",
    "processor",
    "op_stack",
    "ram",
    "jump_stack",
    "hash",
    "u32",
    "lookup",
)


def padded_height(heights: dict[str, int]) -> int:
    """Next power of two of the tallest table (Triton VM spec §7); 0 for no heights."""
    tallest = max(heights.values(), default=0)
    if tallest <= 0:
        return 0  # (tallest - 1).bit_length() would say 2 for empty tables
    return 1 << (tallest - 1).bit_length()


def no_taller(candidate: dict[str, int], baseline: dict[str, int]) -> bool:
    """Design §2 acceptance on heights: no acceptance table taller than the baseline's, and
    no larger padded height."""
    if any(candidate.get(t, 0) > baseline.get(t, 0) for t in ACCEPTANCE_TABLES):
        return False
    return padded_height(candidate) <= padded_height(baseline)


#: Tables whose height grows with the program's *length*, not with what it executes: the
#: program table holds one row per instruction word, and the hash table absorbs those words
#: for the program attestation (Triton VM spec §7.8) besides the program's own hashing.
PROGRAM_SIZE_TABLES = ("program", "hash")


def no_taller_at_runtime(candidate: dict[str, int], baseline: dict[str, int]) -> bool:
    """Issue 11 item 7 acceptance for function-level rewrites that trade program length for
    clock cycles (a loop's new layout set up at its call site, an unrolled loop): no table
    that grows with execution is taller than the baseline's, the `PROGRAM_SIZE_TABLES` may
    grow, and the padded height (what proof time follows: every table is padded to it) is
    no larger. Stricter than that is `no_taller` (design §2), used everywhere else."""
    runtime = [t for t in ACCEPTANCE_TABLES if t not in PROGRAM_SIZE_TABLES]
    if any(candidate.get(t, 0) > baseline.get(t, 0) for t in runtime):
        return False
    return padded_height(candidate) <= padded_height(baseline)


def _merge_heights(acc: dict[str, int], heights: TableHeights | None) -> None:
    if heights is None:
        return
    for k, v in heights.as_dict().items():
        if v > acc.get(k, -1):
            acc[k] = v


def check_block(check: BlockCheck) -> Verdict:
    """Check one candidate block against its baseline (see the module docstring).

    Fails closed: besides every layer accepting, at least ``max(check.witnesses,
    MIN_WITNESSES)`` witnesses must run the baseline to its end without failing. Random
    witnesses come first; when too few of them pass the baseline's guards (an ``assert``
    against a constant, a u32 check on a field element, ...), guard-directed witnesses are
    solved from the symbolic guards (`tasmopt.vm.guards.solve`). Witnesses on which the
    baseline fails still require the candidate to fail too, but never count toward the
    minimum. A polynomial-identity (``testable``) acceptance also needs at least
    `MIN_RANDOM_FIELD` passing witnesses with uniformly random field values.

    Never raises for a bad candidate: unparsable text or control flow are rejections.
    """
    try:
        base = parse_instructions("\n".join(check.baseline), check.isa)
    except TasmSyntaxError as exc:
        return _reject(f"baseline does not parse: {exc}")
    # the baseline checked against itself (`tasmopt.optimizer.candidates.build_checks`: it
    # measures the baseline's cycles and heights of every block with a candidate) runs each
    # program once: the symbolic run, the lanes and the simulator are deterministic, so a
    # second run of the same program could only repeat the first
    same = tuple(check.candidate) == tuple(check.baseline)
    try:
        cand = base if same else parse_instructions("\n".join(check.candidate), check.isa)
    except TasmSyntaxError as exc:
        return _reject(f"candidate does not parse: {exc}")
    need = max(check.witnesses, MIN_WITNESSES)
    ctx = ExprContext()
    sym_b = run_symbolic(base, ctx, check.isa)
    sym_c = sym_b if same else run_symbolic(cand, ctx, check.isa)
    hidden = frozenset(check.dead_cells)
    dead = frozenset(check.dead_slots)
    cmp = compare_symbolic(ctx, sym_b, sym_c, need, hidden, dead)
    if cmp.status in ("different", "unprovable"):
        return _reject(cmp.reason or cmp.status)
    # the witnesses' sizes rounded up (`_WITNESS_QUANTUM`): the blocks of a request then
    # share the memoized witnesses instead of drawing their own for every size (drawing was
    # 45% of the time of coin's baseline checks); a deeper stack or a longer input stream only adds
    # values the programs do not reach
    depth = _quantum(16 + max(sym_b.base, sym_c.base, -sym_b.low_water) + 2)
    inputs = _quantum(max(sym_b.consumed["public"], sym_b.consumed["secret"]) + 2)
    digests = _quantum(sym_b.consumed["digests"] + 1, 2)
    prog_b = _block_program(base, check.isa)
    prog_c = prog_b if same else _block_program(cand, check.isa)
    limit = len(cand) + 2
    heights: dict[str, int] = {}
    passed = random_field = 0

    def compare(i: int, w: Witness, runs: tuple[VmResult, VmResult] | None = None) -> str | None:
        nonlocal passed, random_field
        if runs is None:
            rb = _run(prog_b, w, len(base) + 2)
            runs = (rb, rb if same else _run(prog_c, w, limit))
        rb, rc = runs
        ob, oc = observe(rb, hidden, dead), observe(rc, hidden, dead)
        if ob != oc:
            detail = _explain(ob, oc)
            if cmp.status == "proven":  # layer 1 and layer 2 disagree: a verifier bug
                log.error(
                    "symbolic proof contradicted by witness %d (%s): %s | %s",
                    i,
                    detail,
                    check.baseline,
                    check.candidate,
                )
            kind = "directed " if w.directed else ""
            return f"{kind}witness {i} ({w.family}): {detail}"
        if rb.error is None:
            passed += 1
            random_field += int(w.family == "field")
            _merge_heights(heights, rc.heights)
        return None

    def draw(i: int) -> Witness:
        return witness(i, check.seed, depth=depth, inputs=inputs, digests=digests)

    wide = [draw(i) for i in range(max(need, LANE_WITNESSES))]
    lanes = _lane_runs(prog_b, prog_c, wide, (len(base) + 2, limit), check.seed)
    if lanes is not None:  # one numpy pass over every witness (`tasmopt.vm.lanes`)
        lane_b, lane_c = lanes
        i = None if same else lane_b.first_difference(lane_c, hidden, dead)
        if i is not None:
            bad = compare(i, wide[i], (lane_b.result(i), lane_c.result(i)))
            if bad:
                return _reject(bad)
            log.error("lane evaluator: lanes differ, their results do not: %s", check.candidate)
            lanes = None  # trust neither: the simulator decides below
        else:
            halting = lane_b.halting_lanes()
            passed += len(halting)
            random_field += sum(wide[k].family == "field" for k in halting)
            for k, v in lane_c.max_heights(halting).items():
                heights[k] = max(heights.get(k, -1), v)
    first = wide if lanes is not None else wide[:need]
    if lanes is None:
        for i, w in enumerate(first):
            bad = compare(i, w)
            if bad:
                return _reject(bad)
    start = len(first)
    if passed < need or (cmp.status == "testable" and random_field < MIN_RANDOM_FIELD):
        guards = sym_b.guards
        rng = random.Random(check.seed * 7919 + 17)
        stop = current_deadline()  # the request's, where the caller made it active
        for j in range(start, start + DIRECTED_TRIES * need):
            if passed >= need and (cmp.status != "testable" or random_field >= MIN_RANDOM_FIELD):
                break
            if stop is not None and stop.expired:
                return _reject(
                    f"unverified: deadline ({stop.why()}) while solving the baseline's guards"
                )
            found = passing_witness(
                ctx,
                guards,
                draw(j),
                rng,
                time_budget_s=0.25 if stop is None else min(0.25, stop.remaining()),
            )
            if found is None:
                if j >= start + need // 2 and passed == 0:
                    break  # no attempt gets through the guards: stop early, reject below
                continue
            bad = compare(j, found)
            if bad:
                return _reject(bad)
    if passed < need:
        return _reject(
            f"only {passed} of {need} required witnesses pass the baseline's guards"
            " (asserts, u32 checks, inverses); agreement on failing runs proves "
            "nothing"
        )
    if cmp.status == "testable" and random_field < MIN_RANDOM_FIELD:
        return _reject(
            f"only {random_field} passing witnesses with random field values; a "
            f"polynomial-identity test needs {MIN_RANDOM_FIELD}"
        )
    if cmp.status == "testable":  # the degree bound is the proof; these attack it anyway
        bad = _singular_witnesses(
            ctx, set(sym_b.guards), cmp.differing, draw, compare, check.seed, start
        )
        if bad:
            return _reject(bad)
    method = "symbolic" if cmp.status == "proven" else "differential"
    return Verdict(True, method, None, len(cand), heights)


#: Singular-point witnesses per differential (``testable``) acceptance, and the solver's time
#: for each (seconds).
SINGULAR_WITNESSES = 6
SINGULAR_SOLVE_S = 0.1


def _singular_witnesses(
    ctx: ExprContext,
    guards: set[Guard],
    differing: Sequence[Poly],
    draw: Callable[[int], Witness],
    compare: Callable[[int, Witness], str | None],
    seed: int,
    start: int,
) -> str | None:
    """Run both programs on witnesses solved to sit on the singular points of what differs
    (`tasmopt.vm.guards.singular_points` of ``differing``: a power's base, an inverse's
    operand, two read addresses equal, ...) and pass the baseline's ``guards``; the reason
    of the first disagreement, else None. Points the solver cannot reach in
    `SINGULAR_SOLVE_S` are skipped: the degree bound has already accepted; these only try
    to break it."""
    points = singular_points(ctx, differing, SINGULAR_WITNESSES)
    rng = random.Random(seed * 104_729 + 3)
    stop = current_deadline()
    for k, q in enumerate(points):
        if stop is not None and stop.expired:
            return None  # already accepted by the degree bound; nothing more to try
        solve_for = guards | {("zero", ctx.canonical_sign(q).id)}
        budget = SINGULAR_SOLVE_S if stop is None else min(SINGULAR_SOLVE_S, stop.remaining())
        found = passing_witness(ctx, solve_for, draw(start + 1000 + k), rng, time_budget_s=budget)
        if found is None:
            continue
        bad = compare(start + 1000 + k, found)
        if bad:
            return f"singular point {ctx.describe(q)} = 0: {bad}"
    return None


def _agree(a: VmResult, b: VmResult) -> bool:
    """The lane evaluator's result ``a`` says what the simulator's ``b`` says: the same
    observables, the same failing instruction, the same table heights of a halting run."""
    if (a.error is None) != (b.error is None):
        return False
    if a.error is not None and b.error is not None:
        return (a.error.kind, a.error.ip) == (b.error.kind, b.error.ip)
    return observe(a) == observe(b) and a.heights == b.heights and a.cycles == b.cycles


@lru_cache(maxsize=64)
def _lane_inputs(ws: tuple[Witness, ...]) -> LaneInputs:
    """The witnesses in lane form, shared by every check that draws the same ones (a
    request's checks use one seed; `LaneInputs` is never changed by a run)."""
    from tasmopt.vm.lanes import LaneInputs

    return LaneInputs([w.vm_input() for w in ws])


def _lane_runs(
    prog_b: Program,
    prog_c: Program,
    ws: list[Witness],
    limits: tuple[int, int],
    seed: int,
) -> tuple[LaneRun, LaneRun] | None:
    """Baseline and candidate of a straight-line block run on all of ``ws`` at once
    (`tasmopt.vm.lanes`), or None where the lane evaluator does not cover them.
    The same program object twice (a baseline measured against itself) runs once.

    Spot check: one lane of each program (the first halting one from ``seed``'s choice on)
    is run again in the simulator, the authority; when the two disagree the batch is thrown
    away (the caller runs the simulator on every witness) and the disagreement is logged as
    a verifier bug."""
    from tasmopt.vm.lanes import execute  # late, as the simulator (`_vm`)

    lanes = _lane_inputs(tuple(ws))
    rb = execute(prog_b, lanes, step_limit=limits[0])
    if prog_c is prog_b:
        rc = rb
    else:
        rc = execute(prog_c, lanes, step_limit=limits[1]) if rb is not None else None
    if rb is None or rc is None:
        return None
    halting = rb.halting_lanes()
    j = seed % len(ws)
    j = next((k for k in halting if k >= j), halting[0] if halting else j)
    spot = [(prog_b, rb, limits[0])] + ([] if rc is rb else [(prog_c, rc, limits[1])])
    for prog, run, limit in spot:
        if not _agree(run.result(j), _run(prog, ws[j], limit)):
            log.error("lane evaluator disagrees with the simulator on witness %d: %s", j, prog)
            return None
    return rb, rc


def check_blocks(checks: list[BlockCheck]) -> list[Verdict]:
    """Check many candidates in-process (the embedded default's verify backend). Memoized
    per `BlockCheck` (deterministic for its seed), so the whole-function proof by
    `check_aligned` does not redo the block stage's checks."""
    return [_check_block_cached(c) for c in checks]


# -- whole functions ----------------------------------------------------------------------


@dataclass
class FunctionVerdict:
    """Result of `check_function`.

    Attributes:
        equivalent: no witness distinguished the two and enough witnesses were conclusive.
        reason: the first difference, or why the check was inconclusive.
        witness: index of the distinguishing witness (-1 if none).
        conclusive: witnesses on which the baseline finished within its step limit.
        halted: conclusive witnesses on which the baseline halted without failing (cycles
            and heights are measured on those; on failing runs only if there are none).
        cycles, baseline_cycles: max clock cycles over conclusive witnesses on which the
            baseline succeeded (all conclusive ones if it never succeeded), minus the
            harness's ``call`` and ``halt``.
        heights, baseline_heights: max table heights over the same witnesses.
    """

    equivalent: bool
    reason: str | None = None
    witness: int = -1
    conclusive: int = 0
    halted: int = 0
    cycles: int = 0
    baseline_cycles: int = 0
    heights: dict[str, int] = field(default_factory=dict)
    baseline_heights: dict[str, int] = field(default_factory=dict)


HARNESS_CYCLES = 2  # the harness's own `call` and `halt`

_Args = ParamSpec("_Args")
_V = TypeVar("_V")
#: The reason a check gives when it exhausted Python's recursion limit.
RECURSION_LIMIT = "verifier recursion limit reached: not proven"


def _fails_closed(
    verdict: Callable[[str], _V],
) -> Callable[[Callable[_Args, _V]], Callable[_Args, _V]]:
    """A check that runs out of recursion depth (a resource limit, not a verdict) returns
    ``verdict(RECURSION_LIMIT)``, a not-equivalent result, instead of raising."""

    def wrap(check: Callable[_Args, _V]) -> Callable[_Args, _V]:
        @wraps(check)
        def checked(*args: _Args.args, **kwargs: _Args.kwargs) -> _V:
            try:
                return check(*args, **kwargs)
            except RecursionError:
                return verdict(RECURSION_LIMIT)

        return checked

    return wrap


#: Seconds the guard-directed phase of one `check_function` may take.
FUNCTION_BUDGET_S = 2.0


def harness(text: str, entry: str, isa: IsaVariant = "release") -> Program:
    """A program that calls label ``entry`` of ``text`` once and halts.

    Raises:
        TasmSyntaxError: if ``text`` does not parse.
    """
    return parse(f"    call {entry}\n    halt\n{text}", isa)


@_fails_closed(lambda why: FunctionVerdict(False, reason=why))
def check_function(
    baseline: Program,
    candidate: Program | None,
    *,
    depth: int = 48,
    witnesses: int = MIN_WITNESSES,
    seed: int = 0,
    step_limit: int = 50_000,
    max_tries: int | None = None,
    budget_s: float = FUNCTION_BUDGET_S,
    deadline: Deadline | None = None,
    private_cells: frozenset[int] = frozenset(),
) -> FunctionVerdict:
    """Differential check of two harness programs (see `harness`) on fresh witnesses.

    Fails closed: ``equivalent`` needs no distinguishing witness **and** at least
    ``witnesses`` witnesses on which the baseline *halts without failing* (they execute
    the function to its return). Random witnesses come first (`CONTROL_FAMILIES`); if too
    few of them get through the function's guards, guard-directed witnesses are derived by
    concolic runs (`tasmopt.vm.concolic.directed_witness`). Witnesses on which the baseline
    fails still require the candidate to fail, but do not count; runs past the step limit
    are inconclusive and skipped.

    Args:
        baseline, candidate: harness programs (start at instruction 0). ``candidate=None``
            only measures the baseline (``cycles``/``heights`` then repeat the baseline's).
        depth: initial op stack length of each witness (>= 16); doubled (up to
            `MAX_HARNESS_DEPTH`) while the baseline's run fails TooShallow, so a function
            taking more elements than that is still run to its return.
        witnesses: halting witnesses required.
        seed: witness seed.
        step_limit: clock cycles after which a baseline run is inconclusive (skipped).
        max_tries: random witnesses tried at most (default ``6 * witnesses``).
        budget_s: seconds the guard-directed phase may take (a deadline, not a target).
        deadline: the caller's deadline, looked at before every witness run: once it
            expires the check stops, not equivalent (``reason`` says so). One run may
            overshoot it (at most ``step_limit`` cycles).
        private_cells: the request's private scratch cells (`tasmopt.vm.scratch`): dead
            once the harness halts, so their final values are not compared.

    Returns:
        FunctionVerdict; ``equivalent`` is False if a witness distinguishes them, fewer
        than ``witnesses`` runs halted, or the deadline expired first. ``cycles`` are measured on halting runs only; with
        none, ``halted`` is 0 and the cycles are those of the failing runs (no claim).
    """
    tries = max_tries if max_tries is not None else 6 * witnesses
    verdict = FunctionVerdict(False)
    ok_cycles_b = ok_cycles_c = 0
    any_ok = False
    hb: dict[str, int] = {}
    hc: dict[str, int] = {}
    for i, w, rb in _baseline_runs(
        baseline, depth, witnesses, seed, step_limit, tries, budget_s
    ).runs(deadline):
        if deadline is not None and deadline.expired:
            verdict.reason = f"unverified: deadline ({deadline.why()}) before the check ended"
            return verdict
        verdict.conclusive += 1
        rc = rb if candidate is None else _run(candidate, w, 10 * rb.cycles + 1000)
        ob, oc = observe(rb, private_cells), observe(rc, private_cells)
        if ob != oc:
            kind = "directed " if w.directed else ""
            verdict.reason = f"{kind}witness {i} ({w.family}): {_explain(ob, oc)}"
            verdict.witness = i
            return verdict
        if rb.error is None:
            verdict.halted += 1
            if not any_ok:
                any_ok, hb, hc, ok_cycles_b, ok_cycles_c = True, {}, {}, 0, 0
        if rb.error is None or not any_ok:
            ok_cycles_b = max(ok_cycles_b, rb.cycles)
            ok_cycles_c = max(ok_cycles_c, rc.cycles)
            _merge_heights(hb, rb.heights)
            _merge_heights(hc, rc.heights)
    verdict.baseline_cycles = max(0, ok_cycles_b - HARNESS_CYCLES)
    verdict.cycles = max(0, ok_cycles_c - HARNESS_CYCLES)
    verdict.heights, verdict.baseline_heights = hc, hb
    if verdict.halted < witnesses:
        verdict.reason = (
            f"only {verdict.halted} witnesses ran the baseline to its return "
            f"({verdict.conclusive} conclusive; {witnesses} required): "
            "agreement on failing runs proves nothing"
        )
        return verdict
    verdict.equivalent = True
    return verdict


#: What the producer of `_BaselineRuns` yields when the caller's deadline stopped it early.
_PAUSED = object()


class _BaselineRuns:
    """The witnesses of a function check and the baseline's run on each, produced lazily
    and kept: ``(index, witness, VmResult)`` for every conclusive run (runs past the step
    limit are left out) until ``witnesses`` of them halt. Random witnesses first, then
    concolic guard-directed ones within ``budget_s`` seconds. A check that finds a
    difference stops early; one that measures the same reference again (a caller
    re-measured with its callees' improved code, `tasmopt.optimizer`) reuses the runs."""

    def __init__(
        self,
        baseline: Program,
        depth: int,
        witnesses: int,
        seed: int,
        step_limit: int,
        tries: int,
        budget_s: float,
    ) -> None:
        self._done: list[tuple[int, Witness, VmResult]] = []
        self._stop: Deadline | None = None
        self._more = self._produce(baseline, depth, witnesses, seed, step_limit, tries, budget_s)
        self._lock = threading.Lock()

    def runs(self, stop: Deadline | None = None) -> Iterator[tuple[int, Witness, VmResult]]:
        """The runs, produced on demand; producing more stops once ``stop`` expires (the
        runs produced so far are kept for the next caller)."""
        k = 0
        while True:
            with self._lock:
                if k == len(self._done):
                    if stop is not None and stop.expired:
                        return
                    self._stop = stop
                    nxt = next(self._more, None)
                    if not isinstance(nxt, tuple):  # exhausted, or paused at the deadline
                        return
                    self._done.append(nxt)
                item = self._done[k]
            yield item
            k += 1

    def _produce(
        self,
        baseline: Program,
        depth: int,
        witnesses: int,
        seed: int,
        step_limit: int,
        tries: int,
        budget_s: float,
    ) -> Iterator[tuple[int, Witness, VmResult] | object]:
        halted = 0

        def make(i: int) -> Witness:
            return witness(i, seed, depth=depth, inputs=24, digests=6, families=CONTROL_FAMILIES)

        longest = 0  # cycles of the longest halting baseline run so far
        stalls = 0  # runs that reached their step limit

        def conclusive(w: Witness, limit: int = step_limit) -> tuple[Witness, VmResult | None]:
            """``w`` and the baseline's run on it (None: past ``limit``, inconclusive).

            A random witness on whose run the harness stack was too shallow (the function
            takes or reaches more elements than the stack holds below the harness's
            ``call``) is drawn again with a deeper stack, and every later one with it: a
            witness never fails for want of stack (a candidate that reaches deeper than the
            baseline still fails on it, and differs)."""
            nonlocal longest, stalls, depth
            rb = _run(baseline, w, limit)
            while (
                rb.error is not None
                and rb.error.kind == "TooShallow"
                and not w.directed
                and depth < MAX_HARNESS_DEPTH
            ):
                depth = min(MAX_HARNESS_DEPTH, 2 * depth)
                w = make(w.index)
                rb = _run(baseline, w, limit)
            if rb.error is not None and rb.error.kind == "StepLimitExceeded":
                stalls += 1
                return w, None
            if rb.error is None:
                longest = max(longest, rb.cycles)
            return w, rb

        def cap() -> int:
            """Step limit of the next run: once a run has stalled, the runs that halt are
            the ones that count: a stall costs the whole step limit, so later runs stop at
            a multiple of the longest halting run (a run cut there is inconclusive, as one
            cut at the limit is)."""
            return step_limit if not (stalls and halted) else stall_cap(longest, step_limit)

        for i in range(tries):
            if halted >= witnesses:
                return
            if self._stop is not None and self._stop.expired:
                yield _PAUSED
            if not halted and stalls >= witnesses:
                break  # random values do not get through: the guard-directed phase next
            w, rb = conclusive(make(i), cap())
            if rb is not None:
                halted += rb.error is None
                yield i, w, rb
        from tasmopt.vm.concolic import directed_witness  # the concolic layer imports us

        # seconds of guard-directed search left: only the time spent producing counts, not
        # the time paused at a yield (a later caller, possibly seconds later, resumes here
        # with what is left; an absolute deadline set by the first caller left it nothing)
        left = budget_s
        ctx = ExprContext()
        guards: set[Guard] = set()
        rng = random.Random(seed * 104_729 + 3)
        misses = 0
        j = tries
        while halted < witnesses and left > 0:
            if self._stop is not None and self._stop.expired:
                yield _PAUSED  # the caller's deadline: a later caller resumes here
                continue
            stop = self._stop
            t0 = time.perf_counter()
            deadline = t0 + left
            # after a stall, the directed runs stop where the random ones do
            # (os.neptune.recursive: 62 of 71 directed runs paid the whole 20,000-step
            # symbolic run for nothing, 4 s of a 4.5 s compile)
            limit = cap()
            directed = directed_witness(
                baseline,
                make(j),
                ctx,
                guards,
                rng,
                step_limit=min(limit, 20_000),
                deadline=deadline if stop is None else min(deadline, t0 + stop.remaining()),
            )
            rb = None
            if directed is not None:
                directed, rb = conclusive(directed, limit)
            left -= time.perf_counter() - t0
            if directed is None and stop is not None and stop.expired:
                yield _PAUSED  # cut by the caller's deadline, not a miss: retried when resumed
                continue
            if directed is None:
                misses += 1
                if misses >= 3 and halted == 0:
                    return
            elif rb is not None:
                halted += rb.error is None
                yield j, directed, rb
            j += 1


#: Deepest op stack, elements, a function check's witnesses are drawn with (they start at the
#: check's ``depth`` and double while the baseline's run fails TooShallow).
MAX_HARNESS_DEPTH = 1024

#: After a stall (a random witness's baseline run reached the step limit), the random runs of
#: a function check stop at this many times the longest halting run so far ...
STALL_FACTOR = 16
#: ... and at no fewer than this many clock cycles.
STALL_FLOOR = 4_000


def stall_cap(longest: int, step_limit: int) -> int:
    """Step limit, clock cycles, of the random baseline runs of a function check after one
    stalled: ``STALL_FACTOR`` times the longest halting run (``longest``, cycles), at least
    ``STALL_FLOOR``, at most ``step_limit``. A function whose loop counters come from its
    inputs runs to the limit on most random values (std/trinity/inference: 81 of 97 runs at
    50,000 cycles, the 16 that halted took 42): the cap keeps the witnesses that count and
    stops paying the full limit for the ones that cannot."""
    return min(step_limit, max(STALL_FLOOR, STALL_FACTOR * longest))


@lru_cache(maxsize=128)
def _baseline_runs(
    baseline: Program,
    depth: int,
    witnesses: int,
    seed: int,
    step_limit: int,
    tries: int,
    budget_s: float,
) -> _BaselineRuns:
    return _BaselineRuns(baseline, depth, witnesses, seed, step_limit, tries, budget_s)


# -- whole functions by alignment -----------------------------------------------------------


@dataclass
class AlignedVerdict:
    """Result of `check_aligned`.

    Attributes:
        equivalent: the programs have the same control skeleton and every pair of
            differing straight-line runs is accepted by `check_block`.
        reason: why not (first failing segment), else None.
        checked: straight-line runs that differed and were proven.
    """

    equivalent: bool
    reason: str | None = None
    checked: int = 0


def _segments(program: Program) -> list[tuple[str, object]]:
    """A program as its control skeleton: ``("ctl", text)`` for labels, control-flow
    instructions (ISA table ``is_control_flow``) and the instruction a ``skiz`` may skip;
    ``("run", (lines...))`` for the straight-line runs between them (possibly empty)."""
    return [(kind, value) for kind, value, _ in _segments_at(program)]


def _segments_at(program: Program) -> list[tuple[str, object, tuple[int, int]]]:
    """`_segments`, each with its item range ``(start, end)`` in ``program.items``."""
    table = instruction_set(program.isa)
    out: list[tuple[str, object, tuple[int, int]]] = []
    run: list[str] = []
    start = 0
    after_skip = False
    for k, item in enumerate(program.items):
        is_instr = isinstance(item, Instr)
        control = not is_instr or table[item.name].is_control_flow or after_skip
        if control:
            out.append(("run", tuple(run), (start, k)))
            run = []
            out.append(("ctl", str(item).strip(), (k, k + 1)))
            after_skip = is_instr and table[item.name].may_skip_next
            start = k + 1
        else:
            run.append(str(item).strip())
    out.append(("run", tuple(run), (start, len(program.items))))
    return out


@_fails_closed(lambda why: AlignedVerdict(False, why))
def check_aligned(
    baseline: Program,
    candidate: Program,
    *,
    witnesses: int = MIN_WITNESSES,
    seed: int = 0,
    deadline: Deadline | None = None,
    private_cells: frozenset[int] = frozenset(),
    proven: Sequence[BlockCheck] = (),
) -> AlignedVerdict:
    """Prove two whole programs equivalent by alignment: identical labels and control-flow
    instructions in the same order, and every pair of straight-line runs between them
    either identical or accepted by `check_block` (which is universal over entry states, so
    the proof holds whatever path reaches the run). Sound for any control flow, loops and
    calls included; incomplete where the two differ in control structure (then not
    equivalent, with the reason). ``deadline``: looked at before each block proof; once it
    expires the programs are not proven equivalent.

    ``private_cells``: the request's private scratch cells (`tasmopt.vm.scratch`). A run's
    check then leaves out the cells dead after that run *in the baseline*
    (`tasmopt.vm.scratch.dead_after`). Composition stays sound: a cell dead at a run's
    exit is never read by the baseline before it is written again, so the baseline's run
    does not depend on it; the candidate's run equals the baseline's on every entry state,
    so it does not either, and two states that differ only in dead cells lead to the same
    observables.

    Dead op-stack slots (`tasmopt.vm.stack_liveness`, on the baseline's text): a run's check
    leaves out the slots dead after that run in the baseline, the stack length still
    compared. The same argument composes: the baseline's observables from that point on
    flow only from live slots (a callee's summary bounds what a call may reach), so a state
    that differs only in dead slots leads to the same observables, and each later run of the
    candidate equals the baseline's on every entry state.

    ``proven``: block checks already accepted with this ``witnesses`` and ``seed`` (the
    block stage's, for the blocks spliced into ``candidate``). A differing run that is the
    baseline's with some of those blocks' baselines replaced by their candidates, the rest
    identical, is proven by them (`_by_proven_blocks`) without a check of its own: the same
    composition argument at the points inside the run where each block ends, provided every
    op-stack slot and scratch cell a block's check left out is dead there in the baseline
    (by this program's own analyses, not by what the check was told).
    """
    sa = _segments_at(baseline)
    a, b = [(k, v) for k, v, _ in sa], _segments(candidate)
    live = (
        Liveness(items_of_program(baseline), private_cells, baseline.isa) if private_cells else None
    )
    stack_live: StackLiveness | None = None
    if len(a) != len(b):
        return AlignedVerdict(
            False, f"control skeletons differ ({len(b)} segments, baseline {len(a)})"
        )
    checked = 0
    for k, ((ka, va), (kb, vb)) in enumerate(zip(a, b)):
        if ka != kb:
            return AlignedVerdict(False, f"segment {k}: control skeletons differ")
        if va == vb:
            continue
        if ka == "ctl":
            return AlignedVerdict(False, f"segment {k}: `{vb}` where the baseline has `{va}`")
        if deadline is not None and deadline.expired:
            return AlignedVerdict(False, f"unverified: deadline ({deadline.why()}) at segment {k}")
        dead: tuple[int, ...] = ()
        start, end = sa[k][2]
        if live is not None:
            dead = tuple(sorted(live.dead_after(start, end)))
        if stack_live is None:
            stack_live = stack_liveness(baseline)
        slots = tuple(sorted(stack_live.dead_before(end)))
        if proven and _by_proven_blocks(va, vb, start, proven, stack_live, live):  # type: ignore[arg-type]  # segments are tuples of instruction lines
            checked += 1
            continue
        v = _check_block_cached(BlockCheck(va, vb, baseline.isa, witnesses, seed, dead, slots))  # type: ignore[arg-type]  # segments are tuples of instruction lines
        if not v.equivalent:
            return AlignedVerdict(
                False,
                f"segment {k} ({len(va)} vs {len(vb)} instructions): "  # type: ignore[arg-type]  # segments are tuples of instruction lines
                f"{v.reason}",
            )
        checked += 1
    return AlignedVerdict(True, None, checked)


def _by_proven_blocks(
    va: tuple[str, ...],
    vb: tuple[str, ...],
    start: int,
    proven: Sequence[BlockCheck],
    stack_live: StackLiveness,
    live: Liveness | None,
) -> bool:
    """Whether run ``vb`` is run ``va`` (baseline items ``start ..``) with one or more
    non-overlapping sub-runs replaced by the candidates of ``proven`` checks whose baseline
    they are, every other instruction the same, and each such block's left-out slots and
    cells dead where it ends in the baseline (`check_aligned`)."""
    by_first: dict[str, list[BlockCheck]] = {}
    for c in proven:
        if c.baseline:
            by_first.setdefault(c.baseline[0], []).append(c)

    def dead_ok(c: BlockCheck, i: int) -> bool:
        end = start + i + len(c.baseline)
        if not set(c.dead_slots) <= stack_live.dead_before(end):
            return False
        if not c.dead_cells:
            return True
        return live is not None and set(c.dead_cells) <= live.dead_after(start + i, end)

    if va == vb:
        return False
    todo, seen = [(0, 0)], {(0, 0)}  # positions in (va, vb) both runs agree up to
    while todo:
        i, j = todo.pop()
        if i == len(va):
            if j == len(vb):
                return True
            continue
        steps = [(i + 1, j + 1)] if j < len(vb) and va[i] == vb[j] else []
        for c in by_first.get(va[i], ()):
            m, n = len(c.baseline), len(c.candidate)
            if va[i : i + m] == c.baseline and vb[j : j + n] == c.candidate and dead_ok(c, i):
                steps.append((i + m, j + n))
        for nxt in steps:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


_BLOCK_VERDICTS: dict[BlockCheck, Verdict] = {}
_BLOCK_VERDICTS_MAX = 4096
_BLOCK_VERDICTS_LOCK = threading.Lock()


def clear_block_verdicts() -> None:
    """Forget the memoized block verdicts (`check_blocks`; benchmarks that time cold runs)."""
    with _BLOCK_VERDICTS_LOCK:
        _BLOCK_VERDICTS.clear()


def _check_block_cached(check: BlockCheck) -> Verdict:
    """`check_block`, memoized per check (deterministic for its seed), except verdicts a
    deadline cut short ("unverified: ..."): with more time the same check may pass."""
    with _BLOCK_VERDICTS_LOCK:
        hit = _BLOCK_VERDICTS.get(check)
    if hit is not None:
        return hit
    verdict = check_block(check)
    if not (verdict.reason or "").startswith("unverified"):
        with _BLOCK_VERDICTS_LOCK:
            if len(_BLOCK_VERDICTS) >= _BLOCK_VERDICTS_MAX:
                _BLOCK_VERDICTS.pop(next(iter(_BLOCK_VERDICTS)))  # the oldest
            _BLOCK_VERDICTS[check] = verdict
    return verdict
