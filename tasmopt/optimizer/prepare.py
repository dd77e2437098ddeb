"""Stage 2, ``lower``/prepare: per function, the reference to beat (the client's program when
it is proven equal to our lowering, else ours; passed through unchanged when it cannot be) and
the straight-line blocks that may be rewritten, as `BlockTask`s. Every fallback reason lands
in the function's report."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tasmopt.errors import BaselineError, TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.lower.triton import (
    LOOP_HEADER,
    LoweredBlock,
    LoweredFunction,
    Lowering,
    lower,
)
from tasmopt.lower.validate import find_unlowerable, validate
from tasmopt.module import ModuleText
from tasmopt.optimizer.contract import private_by_function
from tasmopt.optimizer.keys import function_keys
from tasmopt.optimizer.state import FunctionState, out_of_time, stage
from tasmopt.report import (
    BaselineMismatch,
    CachedFunction,
    CompileOptions,
    FunctionCache,
    FunctionReport,
)
from tasmopt.sources import BlockTask
from tasmopt.tasm.parser import parse, parse_instructions
from tasmopt.tasm.program import Instr, Program
from tasmopt.tir import codec
from tasmopt.tir.codec import tir_hash
from tasmopt.tir.ops import Op
from tasmopt.vm.equivalence import (
    check_aligned,
    check_function,
)
from tasmopt.vm.scratch import Item, Liveness, control_points, items_of_lines, items_of_program
from tasmopt.vm.stack_liveness import of_program as stack_liveness

__all__ = [
    "prepare_functions",
    "entry_hazard",
    "check_client_text",
    "decode_tir",
    "decode_checked",
    "lower_module",
    "cached_answers",
]

log = logging.getLogger(__name__)


def decode_tir(tir: Any) -> tuple[Op, ...]:
    """TIR as ops, from ops (tuple or list), their JSON value (list) or JSON text.

    Raises:
        TirError: malformed TIR (with the op's path).
    """
    if isinstance(tir, (str, bytes)):
        return codec.loads(tir)
    if isinstance(tir, tuple) and all(isinstance(o, Op) for o in tir):
        return tir
    if isinstance(tir, list) and tir and all(isinstance(o, Op) for o in tir):
        return tuple(tir)
    return codec.decode(tir)


def decode_checked(tir: Any, options: CompileOptions) -> tuple[Op, ...]:
    """`decode_tir`, then the request's limits and (``options.strict``) lowerability.

    Raises:
        TirError: malformed, invalid or (strict) unlowerable TIR, with the op's path.
    """
    ops = decode_tir(tir)
    validate(ops, max_ops=options.max_ops, max_nesting=options.max_nesting)
    if options.strict:
        find_unlowerable(ops, isa=options.isa, strict=True)
    return ops


def lower_module(
    ops: Sequence[Op], baseline_tasm: str | None, options: CompileOptions
) -> tuple[Lowering, ModuleText, ModuleText | None]:
    """Our lowering of ``ops``, its text by function, and the client's text split the same
    way (checked by `check_client_text`), if the client sent one.

    Raises:
        TasmSyntaxError, BaselineError: as `check_client_text`.
    """
    low = lower(ops, isa=options.isa)
    ours = ModuleText.from_lowering(low)
    labels = {name: f.label for name, f in ours.functions.items()}
    client = ModuleText.from_text(baseline_tasm, labels) if baseline_tasm is not None else None
    if client is not None:
        check_client_text(client, low, options.isa)
    return low, ours, client


def cached_answers(
    cache: FunctionCache,
    ops: Sequence[Op],
    low: Lowering,
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    private: dict[str, frozenset[int]] | None = None,
) -> tuple[dict[str, str], dict[str, CachedFunction]]:
    """(cache key per function, the cache's entries by key) for this module; functions in
    ``options.only`` are not looked up (they are to be computed afresh). A lookup that
    raises is logged and answers nothing: the cache never breaks a compile."""
    keys = function_keys(ops, low, ours, client, options, private)
    wanted = [k for n, k in keys.items() if options.only is None or n not in options.only]
    try:
        return keys, cache.get_many(wanted) if wanted else {}
    except Exception:
        log.exception("result cache lookup failed; computing every function")
        return keys, {}


def check_client_text(client: ModuleText, low: Lowering, isa: IsaVariant) -> None:
    """Refuse a client baseline that cannot serve as this TIR's baseline, before any work.

    The whole text must parse, except the sections of functions whose TIR cannot be lowered
    (upstream emits those as they come, e.g. ``pop 0``; they are passed through): the
    preamble included, so that garbage outside every function is not echoed back. And it must
    define at least one of the TIR's functions.

    Raises:
        TasmSyntaxError: with the line and column in the client's text.
        BaselineError: it defines none of the TIR's functions.
    """
    names = [f.name for f in low.functions if f.name]
    if names and not any(n in client.functions for n in names):
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise BaselineError(
            f"baseline_tasm defines none of this TIR's functions ({shown}); "
            "is it another module's compiler output?"
        )
    lines = list(client.lines)
    for lf in low.functions:
        if lf.unlowerable and lf.name in client.functions:
            for a, b in client.functions[lf.name].sections:
                lines[a + 1 : b] = [""] * (b - a - 1)  # keep the label: calls to it resolve
    _assembles("\n".join(lines), isa)


#: Digests of the baseline texts that parsed, most recent last (`_assembles`).
_PARSED: OrderedDict[tuple[str, IsaVariant], None] = OrderedDict()
_PARSED_MAX = 1024
_PARSED_LOCK = threading.Lock()


def _assembles(text: str, isa: IsaVariant) -> None:
    """Parse ``text`` (raises `TasmSyntaxError`); a text that parsed is remembered by its
    SHA-256, so that a build sending the same baseline again does not pay for its parse (17 ms
    for keccak256's 22 kB) and no request's text is kept in memory. Failures are not
    remembered."""
    key = (hashlib.sha256(text.encode()).hexdigest(), isa)
    with _PARSED_LOCK:
        if key in _PARSED:
            _PARSED.move_to_end(key)
            return
    parse(text, isa)
    with _PARSED_LOCK:
        _PARSED[key] = None
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)


def prepare_functions(
    low: Lowering,
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    timings: dict[str, float],
    keys: dict[str, str] | None = None,
    hits: dict[str, CachedFunction] | None = None,
    private: dict[str, frozenset[int]] | None = None,
    focus: frozenset[str] | None = None,
) -> list[FunctionState]:
    """One `FunctionState` per function of the lowering, in order.

    Args:
        focus: the functions to look at (`tasmopt.optimizer.priority.focus`), None: all; the
            others are returned unchanged and reported cut by the deadline (``improving``),
            as if the time had run out before them.
        private: `tasmopt.optimizer.contract.private_by_function` of this request, if the
            caller has it (else it is computed here).
        keys: result-cache key per function name (`tasmopt.optimizer.keys`).
        hits: cache entries found for those keys, by key: such a function is answered from
            its entry (report and lines) and no stage works on it.
    """
    keys, hits = keys or {}, hits or {}
    if private is None:
        private = private_by_function(ours, client, options.isa)
    every = frozenset().union(*private.values()) if private else frozenset()
    scratch = _ScratchView(low.lines, every, options.isa) if every else None
    fns: list[FunctionState] = []
    for lf in low.functions:
        if not lf.name:
            continue
        f = FunctionState(
            lf.name, FunctionReport(name=lf.name, source="compiler", cycles=0, baseline_cycles=0)
        )
        f.private = private.get(lf.name, frozenset())
        f.report.unlowerable = list(lf.unlowerable)
        f.key = keys.get(lf.name)
        fns.append(f)
        entry = hits.get(f.key) if f.key is not None else None
        if entry is None and options.only is not None and lf.name not in options.only:
            f.passthrough = f.skipped = True
            f.report.reason = "not among the functions this run works on; returned unchanged"
            continue
        if entry is not None:
            f.cached = entry
            f.report = FunctionReport.from_dict(entry.report)
            f.report.cache, f.report.latency_s = "hit", 0.0
            f.report.status = "final" if entry.final else "improving"
            f.report.cache_key = entry.key
            if not entry.measured:
                f.report.reason = (
                    "returned unchanged from the result cache: cut by an earlier request's "
                    "deadline, being deepened in the background"
                )
            f.new_lines = list(entry.lines) if entry.lines is not None else None
            f.passthrough = entry.lines is None
            continue
        if f.key is not None:
            f.report.cache, f.report.cache_key = "miss", f.key
        if lf.unlowerable:
            f.passthrough = True
            f.report.reason = "TIR contains ops that cannot be lowered to valid TASM: " + "; ".join(
                lf.unlowerable[:3]
            )
            continue
        why = out_of_time(options)
        if why is None and focus is not None and lf.name not in focus:
            why = "request deadline: the functions of highest expected saving came first"
        if why is not None:  # not even the reference is checked: the baseline, unchanged
            f.passthrough = True
            f.cut = f.report.reason = (
                f"{why} before this function was looked at; returned unchanged"
            )
            continue
        try:
            our_prog = ours.harness(lf.name, options.isa)
        except TasmSyntaxError as exc:
            f.passthrough = True
            f.report.reason = f"our lowering of a callee does not assemble: {exc}"
            continue
        f.reference = our_prog
        if client is not None:
            if not _client_reference(f, lf.name, our_prog, ours, client, options, timings):
                continue
        theirs = f.reference if f.reference_is_client else None
        stack = _StackView(ours, our_prog, client if theirs else None, theirs, lf.name)
        for block in blocks_with_loop_counters(low, lf):
            instrs = _block_instrs(low.lines[block.start : block.end], options.isa)
            if not instrs:
                continue
            hazard = entry_hazard(low.lines, block.start, block.end, options.isa)
            if hazard:
                f.report.notes.append(f"block {block.path} not rewritten: {hazard}")
                continue
            f.tasks.append(
                BlockTask(
                    lf.name,
                    block.index,
                    block.path,
                    block.ops,
                    tuple(instrs),
                    block.entry_depth,
                    block.net_effect,
                    tir_hash(block.ops),
                    scratch.dead(block.start, block.end, f.private) if scratch else (),
                    stack.dead(block.end),
                )
            )
            f.block_ranges.append((block.start, block.end))
    return fns


class _ScratchView:
    """Our lowering's text analysed once (`tasmopt.vm.scratch.Liveness`), to ask which
    private cells are dead after a block (given as a line range)."""

    def __init__(self, lines: Sequence[str], private: frozenset[int], isa: IsaVariant) -> None:
        items: list[Item] = []
        self.at: list[int] = []  # line index -> index of the first item at or after it
        for line in lines:
            self.at.append(len(items))
            items.extend(items_of_lines([line]))
        self.at.append(len(items))
        self.live = Liveness(items, private, isa)

    def dead(self, start: int, end: int, private: frozenset[int]) -> tuple[int, ...]:
        if not private:
            return ()
        cells = self.live.dead_after(self.at[start], self.at[end]) & private
        return tuple(sorted(cells))


class _Harness:
    """One function's harness program (as parsed for its proofs), where each module line of
    its text lands among the program's items, its control points (as `check_aligned`
    segments them) and its op-stack liveness (`tasmopt.vm.stack_liveness.of_program`: the
    analysis the later proofs against this program reuse)."""

    def __init__(self, text: ModuleText, name: str, program: Program) -> None:
        joined, where = text.closure_text(name)
        lines = ["    call", "    halt", *joined.split("\n")]  # the harness's two lines first
        self.at: dict[int, int] = {}  # module line -> index of the first item at or after it
        count = 0
        for line, owner in zip(lines, [-1, -1, *where]):
            if owner >= 0:
                self.at[owner] = count
            count += len(items_of_lines([line]))
        if count != len(program.items):  # not the text it was parsed from: nothing is dead
            self.at = {}
        self.controls = control_points(items_of_program(program), program.isa)
        self.live = stack_liveness(program)
        self.size = len(program.items)


class _StackView:
    """Dead op-stack slots after a block of one function, proven on every program the
    function's proofs treat as its reference: our lowering's harness and, where the client's
    program is the reference, the client's (the same control skeleton, proven by
    `check_aligned`; a block that ends at the n-th control point of ours ends at the n-th of
    the client's). A slot counts only where every such program proves it dead."""

    def __init__(
        self,
        ours: ModuleText,
        our_prog: Program,
        client: ModuleText | None,
        client_prog: Program | None,
        name: str,
    ) -> None:
        self.ours = _Harness(ours, name, our_prog)
        self.client = (
            _Harness(client, name, client_prog)
            if client is not None and client_prog is not None
            else None
        )

    def dead(self, end: int) -> tuple[int, ...]:
        """Slots dead after the block that ends before module line ``end`` of our text."""
        if not self.ours.at:
            return ()
        k = self.ours.at.get(end, self.ours.size)
        slots = self.ours.live.dead_before(k)
        if slots and self.client is not None:
            try:
                n = self.ours.controls.index(k)
            except ValueError:
                return ()  # not at a control point: no counterpart in the client's text
            if n >= len(self.client.controls):
                return ()
            slots &= self.client.live.dead_before(self.client.controls[n])
        return tuple(sorted(slots))


#: The loop counter decrement of a lowered loop (spec/tir.md §3.4), as TIR: ``Push(-1), Add``.
_DECREMENT = (Op("Push", P - 1), Op("Add"))


def blocks_with_loop_counters(low: Lowering, lf: LoweredFunction) -> list[LoweredBlock]:
    """The function's blocks, where the counter decrement ``push -1; add`` that the loop
    header puts before each loop body joins the body's first block (as the TIR ops
    ``Push(-1), Add``): it runs once per iteration and is worth optimizing with the body.
    A body that starts with a call or a branch gets a block of its own for it (index < 0)."""
    blocks = list(lf.blocks)
    by_start = {b.start: k for k, b in enumerate(blocks)}
    glue = 0
    for a, b in lf.sections:
        for i in range(a, b - len(LOOP_HEADER)):
            line = low.lines[i]
            if not (line.endswith(":") and not line[:1].isspace()):
                continue
            if (
                tuple(ln.strip() for ln in low.lines[i + 1 : i + 1 + len(LOOP_HEADER)])
                != LOOP_HEADER
            ):
                continue
            dec, body = i + len(LOOP_HEADER) - 1, i + len(LOOP_HEADER) + 1
            k = by_start.get(body)
            if k is not None:
                old = blocks[k]
                blocks[k] = replace(
                    old, ops=_DECREMENT + old.ops, start=dec, entry_depth=max(old.entry_depth, 1)
                )
            else:
                glue += 1
                blocks.append(
                    LoweredBlock(
                        lf.name, -glue, f"{line[:-1]}.counter", _DECREMENT, dec, body, 1, 0
                    )
                )
    return sorted(blocks, key=lambda b: b.start)


#: Share of the time left to a request under a deadline that the check telling a mismatch
#: of the client's baseline from a difference we cannot prove may take (`_client_reference`).
#: std.crypto.lut_sponge: two functions whose client text differs from our lowering in a way
#: the alignment proof does not cover took 1 s each in this check, guard solving on paths no
#: witness gets through, and left a 2 s compile no time for the other eight.
DIAGNOSIS_SHARE = 0.1


def _client_reference(
    f: FunctionState,
    name: str,
    our_prog: Program,
    ours: ModuleText,
    client: ModuleText,
    options: CompileOptions,
    timings: dict[str, float],
) -> bool:
    """Check the client's baseline of ``name`` against ours; False if we must pass it through."""
    if name not in client.functions:
        f.passthrough = True
        f.report.source = "client"
        f.report.mismatch = BaselineMismatch(f"function {name!r} is missing from baseline_tasm")
        f.report.reason = f.report.mismatch.cause
        return False
    our_text, _ = ours.closure_text(name)
    client_text, _ = client.closure_text(name)
    if _normalized(our_text) == _normalized(client_text):
        return True  # identical up to trailing blanks: nothing to check
    client_prog = client.harness(name, options.isa)  # raises TasmSyntaxError -> 422
    with stage(timings, "verify"):
        proof = check_aligned(
            client_prog,
            our_prog,
            witnesses=options.witnesses,
            seed=options.seed + 1,
            deadline=options.deadline,
        )
    if proof.equivalent:  # our lowering is proven equal to the client's program
        f.reference = client_prog
        f.reference_is_client = True
        return True
    # Not proven: the client's program is the reference and is returned as sent. A witness
    # run tells a real disagreement (a mismatch, counted and logged) from a difference in
    # shape we cannot prove either way. Either way the function is returned as sent, so
    # under a deadline this check gets only a share of the time left: the other functions'
    # work is worth more to the answer
    budget = None if options.deadline is None else options.deadline.share(DIAGNOSIS_SHARE)
    with stage(timings, "verify"):
        v = check_function(
            client_prog,
            our_prog,
            witnesses=options.witnesses,
            seed=options.seed + 1,
            deadline=budget,
        )
    f.passthrough = True
    why = out_of_time(options)
    if why is None and budget is not None and budget.expired:
        why = "its share of the request deadline ran out"
    f.reference = client_prog  # returned as sent: measured as sent, never as our lowering
    if why is not None and v.witness < 0:  # not decided: the client's program, as sent
        f.report.source = "client"
        f.cut = f.report.reason = (
            f"{why} before the client's baseline was checked; returned unchanged"
        )
        return False
    f.report.source = "client"
    if v.witness >= 0:
        f.report.mismatch = BaselineMismatch(
            v.reason or "differs", v.witness, _known_bug(client.section_lines(name))
        )
        f.report.reason = "client baseline disagrees with our lowering: " + (v.reason or "")
        log.warning("function %s: client baseline disagrees with our lowering: %s", name, v.reason)
    else:
        f.report.reason = (
            "our lowering could not be proven equivalent to the client's "
            f"baseline ({proof.reason}); returned unchanged"
        )
    return False


def _normalized(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _known_bug(lines: Sequence[str]) -> str | None:
    """Name the upstream lowering bug a client section shows, if we recognise one."""
    body = [ln.strip() for ln in lines]
    for i, ln in enumerate(body):
        if ln.endswith(":") and ln.startswith("__loop__") and i > 0 and body[i - 1] == "pop 1":
            return (
                "loop fall-through (spec/tir.md §3.4): the loop subroutine is emitted "
                "inline and runs again after the call"
            )
    if "or" in body:
        return "`or` is not a Triton VM instruction (spec/tir.md §1)"
    return None


def entry_hazard(lines: Sequence[str], start: int, end: int, isa: IsaVariant) -> str | None:
    """Why lines ``start:end`` cannot be rewritten as one straight-line block, or None.

    A block is a unit only if control enters it at its first instruction and leaves after
    its last: no label inside it, no control-flow instruction inside it (ISA table
    ``is_control_flow``), and the instruction before it cannot skip its first instruction
    (``skiz`` at the end of an ``Asm`` op, say, makes the first instruction conditional and
    the second a second entry point). Design §2, block boundaries.
    """
    table = instruction_set(isa)

    def name_of(line: str) -> str | None:
        text = line.split("//", 1)[0].strip()
        if not text:
            return None
        if text.endswith(":"):
            return ":"
        return text.split()[0]

    for k in range(start, end):
        n = name_of(lines[k])
        if n == ":":
            return f"label inside the block (line {k + 1})"
        if n is not None and n in table and table[n].is_control_flow:
            return f"control flow `{n}` inside the block (line {k + 1})"
    for k in range(start - 1, -1, -1):
        n = name_of(lines[k])
        if n is None:
            continue
        if n != ":" and n in table and table[n].may_skip_next:
            return f"`{n}` before the block (line {k + 1}) can skip its first instruction"
        break
    return None


def _block_instrs(lines: Sequence[str], isa: IsaVariant) -> list[Instr]:
    text = "\n".join(ln for ln in lines if ln.strip() and not ln.strip().startswith("//"))
    return parse_instructions(text, isa)
