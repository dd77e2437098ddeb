"""Inputs, outputs and the mutable run state of the simulator (Triton VM spec §3).

Re-exported by `tasmopt.vm.simulator`; kept apart so that generated block code and the
runner can share `RunState` and `ExternalCall` without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tasmopt.errors import VmError
from tasmopt.isa import P
from tasmopt.vm.tables import TableHeights

__all__ = ["VmInput", "ExternalCall", "VmResult", "RunState"]


@dataclass(frozen=True)
class VmInput:
    """Everything a run reads besides the program (spec §3). Values are reduced mod p.

    Attributes:
        public_input: FIFO of field elements for ``read_io``.
        secret_input: FIFO of secret tokens for ``divine``.
        secret_digests: FIFO of 5-word digests ``(d0..d4)`` for ``merkle_step``.
        ram: initial RAM, address -> value; every other address reads 0. A mapping with a
            ``fill_value(address) -> value`` method instead defines every address (the
            verifier's witnesses, `tasmopt.vm.witness.FilledRam`); the result's ``ram`` then
            holds only the writes.
        initial_stack: op stack bottom..top, at least 16 words; ``None`` means spec §3:
            11 zeros over the program digest (``digest[k]`` at ``st(11+k)``).
        sponge: the 16-word sponge state at entry; ``None`` (spec §3) means uninitialised
            until ``sponge_init``. The verifier starts fragments with a live sponge.
    """

    public_input: Sequence[int] = ()
    secret_input: Sequence[int] = ()
    secret_digests: Sequence[tuple[int, int, int, int, int]] = ()
    ram: Mapping[int, int] = field(default_factory=dict)
    initial_stack: Sequence[int] | None = None
    sponge: Sequence[int] | None = None


@dataclass(frozen=True)
class ExternalCall:
    """A ``call`` to a symbol not defined in the program (another module's function).

    Attributes:
        symbol: the call target, e.g. ``"@std_crypto_bigint__is_zero"``.
        cycle: clock cycles executed before the call instruction.
        stack: the full op stack when the call executed, bottom..top.
    """

    symbol: str
    cycle: int
    stack: tuple[int, ...]


@dataclass
class VmResult:
    """Outcome of one run.

    Attributes:
        error: ``None`` after ``halt``; else the failure (``kind``, ``ip`` = instruction index).
        stack: final op stack bottom..top; on error, the stack before the failing instruction
            (except the ``skiz`` end-of-program quirk of spec §4, where the pop has happened).
        ram: initial RAM plus all writes (canonical addresses and values).
        public_output: words written by ``write_io``, in order.
        public_input_consumed, secret_input_consumed, secret_digests_consumed: counts read.
        sponge: the 16-word sponge state, or ``None`` if ``sponge_init`` never ran.
        cycles: executed instructions (= Processor rows), ``halt`` included; on error, the
            instructions executed before the failing one.
        heights: table heights (``None`` if ``measure=False``); on error, those of the
            executed prefix plus program attestation.
        jump_stack: ``(origin, destination)`` instruction indices, bottom..top.
        external_calls: the external calls executed, in order.
    """

    error: VmError | None
    stack: list[int]
    ram: dict[int, int]
    public_output: list[int]
    public_input_consumed: int
    secret_input_consumed: int
    secret_digests_consumed: int
    sponge: tuple[int, ...] | None
    cycles: int
    heights: TableHeights | None
    jump_stack: list[tuple[int, int]]
    external_calls: list[ExternalCall]

    @property
    def ok(self) -> bool:
        """True iff the run halted successfully."""
        return self.error is None


class _FilledDict(dict[int, int]):
    """RAM whose unwritten addresses read ``fill(address)`` instead of 0. Holds only the
    writes, so a result's ``ram`` is what the run wrote."""

    __slots__ = ("_fill",)

    def __init__(self, fill: Callable[[int], int]) -> None:
        super().__init__()
        self._fill = fill

    def get(self, addr: int, default: int | None = None) -> int:  # type: ignore[override]  # RAM reads never take a default: unwritten cells read the fill value
        try:
            return self[addr]
        except KeyError:
            return self._fill(addr) % P


class RunState:
    """Mutable machine state besides the op stack, as seen by generated block code."""

    __slots__ = (
        "ram",
        "js",
        "pub",
        "pub_i",
        "sec",
        "sec_i",
        "digs",
        "dig_i",
        "out",
        "sponge",
        "u32",
        "permute",
        "ext",
    )

    def __init__(self, vm_input: VmInput, permute: Callable[[list[int]], list[int]]) -> None:
        fill = getattr(vm_input.ram, "fill_value", None)
        if fill is not None:  # RAM with a value at every address (the verifier's witnesses)
            self.ram: dict[int, int] = _FilledDict(fill)
        else:
            self.ram = {a % P: v % P for a, v in vm_input.ram.items()}
        self.js: list[tuple[int, int]] = []
        self.pub: list[int] = [x % P for x in vm_input.public_input]
        self.pub_i = 0
        self.sec: list[int] = [x % P for x in vm_input.secret_input]
        self.sec_i = 0
        digs = []
        for d in vm_input.secret_digests:
            if len(d) != 5:
                raise ValueError(f"a secret digest has 5 words, got {len(d)}")
            digs.append(tuple(x % P for x in d))
        self.digs: list[tuple[int, ...]] = digs
        self.dig_i = 0
        self.out: list[int] = []
        if vm_input.sponge is not None and len(vm_input.sponge) != 16:
            raise ValueError(f"the sponge state has 16 words, got {len(vm_input.sponge)}")
        self.sponge: list[int] | None = (
            None if vm_input.sponge is None else [x % P for x in vm_input.sponge]
        )
        self.u32: set[tuple[str, int, int]] = set()
        self.permute = permute
        self.ext: list[ExternalCall] = []
