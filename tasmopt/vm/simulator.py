"""A faithful Triton VM simulator: runs a `Program`, reports success or the failure kind, and
counts clock cycles and the heights of every AET table (Triton VM spec §3-§7).

Conventions beyond the reference VM:

* ``ip`` is an index into ``program.instructions`` (not a word address); jump-stack pairs hold
  indices too. Execution may start at any instruction index or label (``start``).
* **External calls.** A ``call`` to a symbol the program does not define (the Trident
  toolchain's ``@module__fn``) is an opaque call into another module: the simulator records an
  `ExternalCall` (symbol, cycle count, stack snapshot), leaves the op stack and jump stack
  unchanged, continues with the next instruction, and counts 1 cycle (the ``call`` row, with
  the ``call`` instruction's table rows). The callee's own cost is not known here.
* **Step limit.** A run that would execute more than ``step_limit`` instructions fails with
  our own kind ``"StepLimitExceeded"`` at the instruction that would exceed it.
* **Error details** (`VmError.detail`): FailedU32Conversion -> the offending value;
  AssertionFailed -> the ``error_id`` (or ``None``); VectorAssertionFailed -> the first index
  ``i`` with ``st_i != st_{i+5}``; StepLimitExceeded -> the limit; otherwise ``None``.
  ``error_id`` annotations also appear in the error message.
* **Heights on error** are those of the executed prefix (the failing instruction excluded),
  plus program attestation; the reference VM produces no AET for a failed run.

Speed: instructions are pre-decoded into handler closures once per program, and hot
straight-line runs are compiled into one Python function each (`tasmopt.vm.codegen`).
"""

from __future__ import annotations

import logging

from tasmopt.errors import VmError
from tasmopt.isa import P
from tasmopt.tasm.program import Program
from tasmopt.vm import tip5
from tasmopt.vm.codegen import HOT_THRESHOLD, MIN_STACK, Fail, decoded, unpack_rows
from tasmopt.vm.state import ExternalCall, RunState, VmInput, VmResult
from tasmopt.vm.tables import TableHeights, attestation, measured_permutation, u32_height

__all__ = ["VmInput", "ExternalCall", "VmResult", "run", "initial_stack", "program_digest"]

logger = logging.getLogger(__name__)

_NO_INPUT = VmInput()


def program_digest(program: Program) -> tuple[int, ...]:
    """``Tip5.hash_varlen(program.words())`` (spec §8), cached on the program."""
    return attestation(program).digest


def initial_stack(program: Program) -> list[int]:
    """The reference initial op stack, bottom..top: ``d4 d3 d2 d1 d0`` then 11 zeros (spec §3)."""
    return list(reversed(program_digest(program))) + [0] * 11


def _resolve_start(program: Program, start: int | str) -> int:
    if isinstance(start, str):
        try:
            return program.labels[start]
        except KeyError:
            raise ValueError(f"start label {start!r} is not defined in the program") from None
    if not 0 <= start <= len(program.instructions):
        raise ValueError(f"start index {start} outside 0..{len(program.instructions)}")
    return start


def _message(kind: str, detail: object, error_id: int | None) -> str:
    if kind == "FailedU32Conversion":
        text = f"{kind}: {detail} is not a u32"
    elif kind == "VectorAssertionFailed":
        text = f"{kind}: st{detail} != st{detail + 5}"  # type: ignore[operator]  # VectorAssertionFailed carries the int index
    elif kind == "StepLimitExceeded":
        text = f"{kind}: more than {detail} steps"
    else:
        text = kind
    if error_id is not None:
        text += f" (error_id {error_id})"
    return text


def run(
    program: Program,
    vm_input: VmInput = _NO_INPUT,
    *,
    start: int | str = 0,
    step_limit: int = 1_000_000,
    measure: bool = True,
) -> VmResult:
    """Run ``program`` until ``halt``, a failure, or the step limit.

    Args:
        program: the program; its ``isa`` decides opcodes 80/88 (dot steps or horner steps).
        vm_input: public/secret input, secret digests, initial RAM and initial stack.
        start: instruction index or label name where execution begins.
        step_limit: most instructions to execute; beyond it the run fails with
            ``StepLimitExceeded``.
        measure: compute table heights (Cascade needs Tip5 traces: slightly slower hashing).

    Returns:
        A `VmResult`; failures of the program are reported in ``error``, never raised.

    Raises:
        ValueError: bad arguments (initial stack shorter than 16, unknown start label,
            malformed secret digest).
    """
    dec = decoded(program)
    n_instr = len(dec)
    ip = _resolve_start(program, start)
    if vm_input.initial_stack is None:
        stk = initial_stack(program)
    else:
        stk = [x % P for x in vm_input.initial_stack]
        if len(stk) < MIN_STACK:
            raise ValueError(f"initial stack needs at least {MIN_STACK} words, got {len(stk)}")
    limbs: set[int] = set()
    vm = RunState(vm_input, measured_permutation(limbs) if measure else tip5.permutation)

    steps, blocks, hot = dec.steps, dec.blocks, dec.hot
    cycles = rows = 0  # rows: packed op-stack, RAM and Hash rows (codegen.pack_rows)
    error: VmError | None = None
    # Invariant for failure accounting: while code runs, ``ip`` is where it was entered
    # (a block's start or a handler's instruction), and `Fail` carries the offset from it.
    try:
        while True:  # ip is the start of a straight-line run
            blk = blocks.get(ip)
            if blk is not None:
                if len(stk) >= blk.need and cycles + blk.n <= step_limit:
                    ip = blk.fn(stk, vm, cycles)
                    cycles += blk.n
                    rows += blk.rows
                    if ip < 0:
                        break
                    continue
            elif ip < n_instr:
                count = hot.get(ip, 0) + 1
                hot[ip] = count
                if count >= HOT_THRESHOLD:
                    dec.compile_block(ip)
                    continue
            while True:  # interpret up to and including the next control-flow instruction
                if ip >= n_instr:
                    raise Fail(0, "InstructionPointerOverflow", None)
                fn, need, step_rows, terminates = steps[ip]
                if len(stk) < need:
                    raise Fail(0, "TooShallow", None)
                if cycles >= step_limit:
                    raise Fail(0, "StepLimitExceeded", step_limit)
                ip = fn(stk, vm, cycles)
                cycles += 1
                rows += step_rows
                if terminates:
                    break
            if ip < 0:
                break
    except Fail as fail:
        k, kind, detail = fail.args
        fail_ip = ip + k
        if k:
            cycles += k
            rows += dec.prefix_rows(ip, k)
        error_id = program.instructions[fail_ip].error_id if fail_ip < n_instr else None
        error = VmError(kind, fail_ip, detail, _message(kind, detail, error_id))

    heights = None
    if measure:
        ops, ram_rows, hash_rows = unpack_rows(rows)
        att = attestation(program)
        heights = TableHeights(
            program=att.program_rows,
            processor=cycles,
            op_stack=ops,
            ram=ram_rows,
            jump_stack=cycles,
            hash=att.hash_rows + hash_rows,
            u32=u32_height(vm.u32),
            cascade=len(att.limbs) + len(limbs - att.limbs),
        )
    if error is not None:
        logger.debug("run failed: %s after %d cycles", error, cycles)
    return VmResult(
        error=error,
        stack=stk,
        ram=vm.ram,
        public_output=vm.out,
        public_input_consumed=vm.pub_i,
        secret_input_consumed=vm.sec_i,
        secret_digests_consumed=vm.dig_i,
        sponge=None if vm.sponge is None else tuple(vm.sponge),
        cycles=cycles,
        heights=heights,
        jump_stack=vm.js,
        external_calls=vm.ext,
    )
