"""Lane-parallel evaluation of straight-line TASM over a batch of witnesses (numpy).

The verifier's differential layer runs every candidate block and its baseline on 16 or more
witnesses (`tasmopt.vm.equivalence.check_block`). A straight-line block takes the same path
on every witness, so instead of one simulator run per witness, `run_lanes` executes each
instruction once on *lanes*: every op-stack word is a ``(N,)`` ``uint64`` array holding that
word in each of the ``N`` witnesses. Goldilocks arithmetic (`gl_add`, `gl_sub`, `gl_mul`,
`gl_pow`, `gl_inv`) and the Tip5 permutation (`tip5_lanes`) are vectorized over lanes; RAM,
input streams and the U32/Cascade bookkeeping stay per lane in Python.

A lane that fails (an ``assert``, a u32 operand check, an empty input stream, ...) is
masked: its error (kind, instruction index) is recorded as the simulator would report it,
and later instructions still compute garbage for it, never observed. Failure detection
follows the templates of `tasmopt.vm.instructions` check for check and in the same order.

The result of each lane is a `VmResult` like `tasmopt.vm.simulator.run` returns for that
witness, except that a failed lane carries only ``error`` (stack, RAM and outputs empty) and
its heights are None; for a halting lane every field, table heights included, is the
simulator's. `tasmopt.vm.equivalence` spot-checks that claim on one lane of every batch
with the simulator itself and falls back to per-witness runs when they disagree;
``tests/vm/test_lanes.py`` checks it on every lane of the real data's blocks.

`run_lanes` returns None (the caller runs the simulator instead) for what it does not
cover: control flow other than a final ``halt``, external calls, Merkle steps, dot and
Horner steps, ``x_invert``, witnesses with different stack depths, or an unset initial
stack.

Sources: Triton VM spec §5 (instruction semantics), §7 (table heights), §9 (Tip5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tasmopt.errors import VmError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.tasm.program import Program
from tasmopt.vm import tip5
from tasmopt.vm.codegen import static_facts, unpack_rows
from tasmopt.vm.state import VmInput, VmResult
from tasmopt.vm.tables import LOOKUP_HEIGHT, TableHeights, attestation, u32_height

__all__ = [
    "U64",
    "gl_add",
    "gl_sub",
    "gl_mul",
    "gl_sqr",
    "gl_pow",
    "gl_inv",
    "tip5_lanes",
    "run_lanes",
    "lane_coverage",
    "LANE_OPS",
    "LaneInputs",
    "LaneRun",
    "execute",
]

U64 = npt.NDArray[np.uint64]

_P = np.uint64(P)
_EPS = np.uint64(0xFFFF_FFFF)  # 2^64 mod p = 2^32 - 1
_M32 = np.uint64(0xFFFF_FFFF)
_S32 = np.uint64(32)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


# -- Goldilocks arithmetic on lanes (Triton VM spec §1) ----------------------------------------


def gl_add(a: U64, b: U64) -> U64:
    """``a + b mod p`` lane-wise for canonical ``a``, ``b`` (``(N,)`` uint64)."""
    s = a + b
    wrapped = s < a  # the true sum is s + 2^64 = s + (2^32 - 1) (mod p), and < p after it
    return np.where(wrapped, s + _EPS, np.where(s >= _P, s - _P, s))


def gl_sub(a: U64, b: U64) -> U64:
    """``a - b mod p`` lane-wise for canonical ``a``, ``b``."""
    d = a - b
    return np.where(a < b, d + _P, d)


def _reduce128(hi: U64, lo: U64) -> U64:
    """``hi·2^64 + lo mod p``, canonical, for any 64-bit ``hi``, ``lo``: with
    ``hi = h1·2^32 + h0``, ``2^64 ≡ 2^32 - 1`` and ``2^96 ≡ -1`` give
    ``lo - h1 + h0·(2^32 - 1)``."""
    h0, h1 = hi & _M32, hi >> _S32
    t = lo - h1
    t = np.where(lo < h1, t - _EPS, t)  # borrowed 2^64 ≡ 2^32 - 1: take it back
    u = h0 * _EPS  # < 2^64
    s = t + u
    s = np.where(s < t, s + _EPS, s)  # carried 2^64
    canonical: U64 = np.where(s >= _P, s - _P, s)
    return canonical


def gl_mul(a: U64, b: U64) -> U64:
    """``a · b mod p`` lane-wise for any 64-bit ``a``, ``b`` (the 128-bit product from 32-bit
    limbs, then `_reduce128`); the result is canonical."""
    a0, a1 = a & _M32, a >> _S32
    b0, b1 = b & _M32, b >> _S32
    ll, lh, hl, hh = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (ll >> _S32) + (lh & _M32) + (hl & _M32)  # < 3·2^32
    lo = (ll & _M32) | ((mid & _M32) << _S32)
    hi = hh + (lh >> _S32) + (hl >> _S32) + (mid >> _S32)
    return _reduce128(hi, lo)


def gl_sqr(a: U64) -> U64:
    """``a² mod p`` lane-wise (`gl_mul` with the cross product computed once)."""
    a0, a1 = a & _M32, a >> _S32
    ll, lh, hh = a0 * a0, a0 * a1, a1 * a1
    mid = (ll >> _S32) + ((lh & _M32) << _ONE)  # < 3·2^32
    lo = (ll & _M32) | ((mid & _M32) << _S32)
    hi = hh + ((lh >> _S32) << _ONE) + (mid >> _S32)
    return _reduce128(hi, lo)


def _times_two32(x: U64) -> U64:
    """``x · 2^32 mod p`` for canonical ``x``: with ``x = x1·2^32 + x0``,
    ``x·2^32 = x1·2^64 + x0·2^32 ≡ x1·(2^32 - 1) + x0·2^32``."""
    a = (x & _M32) << _S32
    a = np.where(a >= _P, a - _P, a)
    return gl_add(a, (x >> _S32) * _EPS)


def gl_pow(a: U64, e: U64, bits: int = 32) -> U64:
    """``a ** e mod p`` lane-wise for exponents below ``2^bits`` (``0 ** 0 = 1``)."""
    result = np.ones_like(a)
    base = a
    for k in range(bits):
        bit = ((e >> np.uint64(k)) & _ONE).astype(bool)
        result = np.where(bit, gl_mul(result, base), result)
        if k + 1 < bits:
            base = gl_sqr(base)
    return result


_P_MINUS_2 = P - 2


def gl_inv(a: U64) -> U64:
    """``a^(p-2)`` lane-wise: the inverse where ``a != 0``, 0 where ``a == 0`` (the caller
    fails those lanes first)."""
    result = np.ones_like(a)
    base = a
    e = _P_MINUS_2
    while e:
        if e & 1:
            result = gl_mul(result, base)
        e >>= 1
        if e:
            base = gl_sqr(base)
    return result


# -- Tip5 on lanes (Triton VM spec §9) ----------------------------------------------------------

_T5 = tip5.constants()
_LUT = np.frombuffer(bytes(_T5["lookup_table"]), dtype=np.uint8)
_COL = [int(c) for c in _T5["mds_matrix_first_column"]]
# circulant: new[i] = sum_j col[(i - j) % 16] * t[j]  ->  new = t @ _MDS  with _MDS[j, i]
_MDS = np.array([[_COL[(i - j) % 16] for i in range(16)] for j in range(16)], dtype=np.uint64)
_RC = [np.array(r, dtype=np.uint64) for r in _T5["round_constants_by_round"]]
_R_INV = np.uint64(pow(0xFFFF_FFFF, P - 2, P))
_TWO32 = np.uint64(1 << 32)


def _sbox_pow7(x: U64) -> U64:
    x3 = gl_mul(gl_sqr(x), x)
    return gl_mul(gl_sqr(x3), x)


def tip5_lanes(state: U64, montgomery: list[U64] | None = None) -> U64:
    """The Tip5 permutation of ``(N, 16)`` canonical states; returns a new ``(N, 16)`` array.

    With ``montgomery``, appends the ``(N, 4)`` Montgomery forms of words 0..3 of each state
    entering a round (what the Cascade table looks up, spec §7.8), round by round.
    """
    xs = state
    n = xs.shape[0]
    for rc in _RC:
        head = xs[:, :4]
        m = gl_sub(_times_two32(head), head)  # Montgomery form x·(2^32 - 1)
        if montgomery is not None:
            montgomery.append(m)
        looked = _LUT[np.ascontiguousarray(m, dtype="<u8").view(np.uint8)]
        lo_words = looked.view("<u8").astype(np.uint64).reshape(n, 4)
        t = np.empty_like(xs)
        t[:, :4] = gl_mul(lo_words, np.broadcast_to(_R_INV, (n, 4)))
        t[:, 4:] = _sbox_pow7(xs[:, 4:])
        # linear layer: 32-bit halves against 16-bit coefficients, sums < 2^52
        s_lo = (t & _M32) @ _MDS
        s_hi = (t >> _S32) @ _MDS
        h0, h1 = s_hi & _M32, s_hi >> _S32  # s_hi·2^32 = h1·2^64 + h0·2^32
        a = h0 << _S32
        a = np.where(a >= _P, a - _P, a)
        new = gl_add(gl_add(s_lo, a), h1 * _EPS)
        xs = gl_add(new, np.broadcast_to(rc, (n, 16)))
    return xs


# -- the lane machine ---------------------------------------------------------------------------


def _matrix(rows: Sequence[Sequence[int]]) -> U64 | None:
    """``(N, K)`` canonical uint64 from per-lane int rows; None for values outside
    ``[0, 2^64)`` (the caller falls back to the simulator)."""
    try:
        m = np.array(rows, dtype=np.uint64)
    except (OverflowError, ValueError):
        return None
    return np.where(m >= _P, m - _P, m)


class LaneInputs:
    """The witnesses of a batch in lane form, built once and shared by every program run
    on them (a block's baseline and its candidates).

    Attributes:
        n: lanes. stack: entry op stack, ``(N,)`` arrays bottom..top. pub, sec: per-lane
        canonical input streams. fills, ram: per-lane RAM fill functions (None: plain RAM)
        and initial RAM. has_sponge, sponge: ``(N,)`` bool and ``(N, 16)`` entry sponge.
    """

    def __init__(self, inputs: Sequence[VmInput]) -> None:
        self.ok = False
        self.n = len(inputs)
        if not inputs or any(inp.initial_stack is None for inp in inputs):
            return
        depths = {len(inp.initial_stack) for inp in inputs}  # type: ignore[arg-type]  # None excluded above
        if len(depths) != 1 or min(depths) < 16:
            return
        if any(inp.sponge is not None and len(inp.sponge) != 16 for inp in inputs):
            return
        stack = _matrix([inp.initial_stack for inp in inputs])  # type: ignore[misc]  # None excluded above
        sponge = _matrix([inp.sponge or (0,) * 16 for inp in inputs])
        if stack is None or sponge is None:
            return
        self.stack: list[U64] = list(np.ascontiguousarray(stack.T))
        self.sponge = sponge
        self.has_sponge = np.array([inp.sponge is not None for inp in inputs], dtype=bool)
        self.fills: list[Callable[[int], int] | None] = [
            getattr(inp.ram, "fill_value", None) for inp in inputs
        ]
        self.ram = [
            {} if f is not None else {a % P: v % P for a, v in inp.ram.items()}
            for f, inp in zip(self.fills, inputs, strict=True)
        ]
        self.pub = [[x % P for x in inp.public_input] for inp in inputs]
        self.sec = [[x % P for x in inp.secret_input] for inp in inputs]
        self.ok = True


class _Machine:
    """State of ``N`` lanes running one straight-line program."""

    def __init__(self, lanes: LaneInputs, measure: bool) -> None:
        self.n = n = lanes.n
        self.stk = list(lanes.stack)
        self.alive = np.ones(n, dtype=bool)
        self.errors: list[tuple[str, int, object] | None] = [None] * n
        self.fills = lanes.fills
        self.ram = [dict(r) for r in lanes.ram]
        self.pub, self.sec = lanes.pub, lanes.sec
        self.pub_i = self.sec_i = 0
        self.out: list[U64] = []
        self.has_sponge = lanes.has_sponge
        self.sponge = lanes.sponge
        self.u32: list[tuple[str, U64, U64]] = []
        self.measure = measure
        self.montgomery: list[U64] = []

    # failures
    def fail(self, mask: npt.NDArray[np.bool_], kind: str, ip: int, detail: object = None) -> None:
        new = mask & self.alive
        if new.any():
            for i in np.flatnonzero(new):
                self.errors[i] = (kind, ip, detail)
            self.alive &= ~new

    def fail_all(self, kind: str, ip: int, detail: object = None) -> None:
        self.fail(np.ones(self.n, dtype=bool), kind, ip, detail)

    # RAM, per lane
    def read(self, addr: U64) -> U64:
        out = np.empty(self.n, dtype=np.uint64)
        for i, a in enumerate(addr.tolist()):
            cell = self.ram[i].get(a)
            if cell is None:
                fill = self.fills[i]
                cell = fill(a) % P if fill is not None else 0
            out[i] = cell
        return out

    def write(self, addr: U64, value: U64) -> None:
        for i, (a, v) in enumerate(zip(addr.tolist(), value.tolist(), strict=True)):
            self.ram[i][a] = v

    def permute(self, state: U64) -> U64:
        return tip5_lanes(state, self.montgomery if self.measure else None)


def _const(n: int, value: int) -> U64:
    return np.full(n, value % P, dtype=np.uint64)


def _offset(p: U64, k: int) -> U64:
    return gl_add(p, _const(len(p), k)) if k >= 0 else gl_sub(p, _const(len(p), -k))


def _bit_length(a: U64) -> U64:
    """Bit length lane-wise (``a < 2^64``)."""
    out = np.zeros_like(a)
    for k in range(64):
        out += (a >> np.uint64(k)) != 0
    return out


def _xmul(a: tuple[U64, U64, U64], b: tuple[U64, U64, U64]) -> tuple[U64, U64, U64]:
    """Extension-field product in F_p[X]/(X^3 - X + 1), coefficients ``(c0, c1, c2)``
    (Triton VM spec §1)."""
    a0, a1, a2 = a
    b0, b1, b2 = b
    m = gl_mul
    d0 = m(a0, b0)
    d1 = gl_add(m(a0, b1), m(a1, b0))
    d2 = gl_add(gl_add(m(a0, b2), m(a1, b1)), m(a2, b0))
    d3 = gl_add(m(a1, b2), m(a2, b1))
    d4 = m(a2, b2)
    # X^3 = X - 1, X^4 = X^2 - X
    c0 = gl_sub(d0, d3)
    c1 = gl_sub(gl_add(d1, d3), d4)
    c2 = gl_add(d2, d4)
    return c0, c1, c2


class _Op:
    """What one instruction needs besides the machine: index, small argument, immediate,
    error id and the names of its U32 table entries (ISA table ``u32_entries``)."""

    __slots__ = ("ip", "arg", "imm", "eid", "keys", "name")

    def __init__(self, ip: int, name: str, arg: int | None, imm: int, eid: Any, keys: Any) -> None:
        self.ip, self.name, self.arg, self.imm, self.eid, self.keys = ip, name, arg, imm, eid, keys

    @property
    def n(self) -> int:
        assert self.arg is not None
        return self.arg


LaneOp = Callable[[_Machine, _Op], None]


def _nop(vm: _Machine, op: _Op) -> None:
    return


def _push(vm: _Machine, op: _Op) -> None:
    vm.stk.append(_const(vm.n, op.imm))


def _pop(vm: _Machine, op: _Op) -> None:
    del vm.stk[-op.n :]


def _dup(vm: _Machine, op: _Op) -> None:
    vm.stk.append(vm.stk[-(op.n + 1)])


def _swap(vm: _Machine, op: _Op) -> None:
    stk, i = vm.stk, op.n
    if i:
        stk[-1], stk[-(i + 1)] = stk[-(i + 1)], stk[-1]


def _pick(vm: _Machine, op: _Op) -> None:
    if op.n:
        vm.stk.append(vm.stk.pop(-(op.n + 1)))


def _place(vm: _Machine, op: _Op) -> None:
    if op.n:
        vm.stk.insert(-op.n, vm.stk.pop())


def _read_stream(vm: _Machine, op: _Op) -> None:
    secret = op.name == "divine"
    streams = vm.sec if secret else vm.pub
    i, n = (vm.sec_i if secret else vm.pub_i), op.n
    short = np.array([i + n > len(s) for s in streams], dtype=bool)
    vm.fail(short, "EmptySecretInput" if secret else "EmptyPublicInput", op.ip)
    for k in range(n):
        vm.stk.append(
            np.array([s[i + k] if i + k < len(s) else 0 for s in streams], dtype=np.uint64)
        )
    if secret:
        vm.sec_i = i + n
    else:
        vm.pub_i = i + n


def _assert(vm: _Machine, op: _Op) -> None:
    vm.fail(vm.stk[-1] != _ONE, "AssertionFailed", op.ip, op.eid)
    del vm.stk[-1]


def _assert_vector(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    for i in range(5):
        vm.fail(stk[-(i + 1)] != stk[-(i + 6)], "VectorAssertionFailed", op.ip, i)
    del stk[-5:]


def _read_mem(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    p = stk[-1]
    stk[-1] = vm.read(p)
    for k in range(1, op.n):
        stk.append(vm.read(_offset(p, -k)))
    stk.append(_offset(p, -op.n))


def _write_mem(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    p = stk.pop()
    for k in range(op.n):
        vm.write(_offset(p, k), stk.pop())
    stk.append(_offset(p, op.n))


def _hash(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    state = np.stack(stk[:-11:-1] + [np.ones(vm.n, dtype=np.uint64)] * 6, axis=1)
    h = vm.permute(state)
    del stk[-10:]
    stk += [h[:, j] for j in range(4, -1, -1)]


def _sponge_init(vm: _Machine, op: _Op) -> None:
    vm.sponge = np.zeros((vm.n, 16), dtype=np.uint64)
    vm.has_sponge = np.ones(vm.n, dtype=bool)


def _sponge(vm: _Machine, op: _Op) -> None:
    vm.fail(~vm.has_sponge, "SpongeNotInitialized", op.ip)
    stk, sp = vm.stk, vm.sponge
    if op.name == "sponge_absorb":
        rate = np.stack(stk[:-11:-1], axis=1)
        vm.sponge = vm.permute(np.concatenate([rate, sp[:, 10:]], axis=1))
        del stk[-10:]
    elif op.name == "sponge_absorb_mem":
        p = stk[-1]
        v = [vm.read(_offset(p, k)) for k in range(10)]
        vm.sponge = vm.permute(np.concatenate([np.stack(v, axis=1), sp[:, 10:]], axis=1))
        stk[-5:] = [v[3], v[2], v[1], v[0], _offset(p, 10)]
    else:  # sponge_squeeze
        stk += [sp[:, j] for j in range(9, -1, -1)]
        vm.sponge = vm.permute(sp)


def _add(vm: _Machine, op: _Op) -> None:
    a = vm.stk.pop()
    vm.stk[-1] = gl_add(a, vm.stk[-1])


def _addi(vm: _Machine, op: _Op) -> None:
    vm.stk[-1] = gl_add(vm.stk[-1], _const(vm.n, op.imm))


def _mul(vm: _Machine, op: _Op) -> None:
    a = vm.stk.pop()
    vm.stk[-1] = gl_mul(vm.stk[-1], a)


def _eq(vm: _Machine, op: _Op) -> None:
    a = vm.stk.pop()
    vm.stk[-1] = (vm.stk[-1] == a).astype(np.uint64)


def _invert(vm: _Machine, op: _Op) -> None:
    vm.fail(vm.stk[-1] == _ZERO, "InverseOfZero", op.ip)
    vm.stk[-1] = gl_inv(vm.stk[-1])


def _split(vm: _Machine, op: _Op) -> None:
    a = vm.stk[-1]
    hi, lo = a >> _S32, a & _M32
    vm.stk[-1] = hi
    vm.stk.append(lo)
    vm.u32.append((op.keys[0][0], lo, hi))


def _binary_u32(vm: _Machine, op: _Op) -> None:
    a = vm.stk.pop()
    b = vm.stk[-1]
    if op.name == "lt":
        vm.stk[-1] = (a < b).astype(np.uint64)
    elif op.name == "and":
        vm.stk[-1] = a & b
    else:  # xor
        vm.stk[-1] = a ^ b
    vm.u32.append((op.keys[0][0], a, b))


def _log_2_floor(vm: _Machine, op: _Op) -> None:
    a = vm.stk[-1]
    vm.fail(a == _ZERO, "LogarithmOfZero", op.ip)
    vm.stk[-1] = _bit_length(a) - _ONE
    vm.u32.append((op.keys[0][0], a, np.zeros(vm.n, dtype=np.uint64)))


def _pop_count(vm: _Machine, op: _Op) -> None:
    a = vm.stk[-1]
    vm.stk[-1] = np.bitwise_count(a).astype(np.uint64)
    vm.u32.append((op.keys[0][0], a, np.zeros(vm.n, dtype=np.uint64)))


def _pow(vm: _Machine, op: _Op) -> None:
    a = vm.stk.pop()
    e = vm.stk[-1]
    vm.stk[-1] = gl_pow(a, e)
    vm.u32.append((op.keys[0][0], a, e))


def _div_mod(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    a, d = stk[-1], stk[-2]
    vm.fail(d == _ZERO, "DivisionByZero", op.ip)
    safe = np.where(d == _ZERO, _ONE, d)
    q, r = a // safe, a % safe
    stk[-1], stk[-2] = r, q
    vm.u32.append((op.keys[0][0], r, d))
    vm.u32.append((op.keys[1][0], a, q))


def _xx_add(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    for j in range(3):
        stk[-(4 + j)] = gl_add(stk[-(1 + j)], stk[-(4 + j)])
    del stk[-3:]


def _xx_mul(vm: _Machine, op: _Op) -> None:
    stk = vm.stk
    c = _xmul((stk[-1], stk[-2], stk[-3]), (stk[-4], stk[-5], stk[-6]))
    del stk[-3:]
    stk[-1], stk[-2], stk[-3] = c


def _xb_mul(vm: _Machine, op: _Op) -> None:
    a = vm.stk.pop()
    for j in (1, 2, 3):
        vm.stk[-j] = gl_mul(vm.stk[-j], a)


def _write_io(vm: _Machine, op: _Op) -> None:
    vm.out += vm.stk[: -(op.n + 1) : -1]
    del vm.stk[-op.n :]


#: Mnemonic -> lane semantics (Triton VM spec §5; the templates of `tasmopt.vm.instructions`,
#: check for check). What is missing here (control flow, Merkle, dot and Horner steps,
#: ``x_invert``) makes `run_lanes` return None.
LANE_OPS: dict[str, LaneOp] = {
    "halt": _nop,
    "nop": _nop,
    "push": _push,
    "pop": _pop,
    "dup": _dup,
    "swap": _swap,
    "pick": _pick,
    "place": _place,
    "divine": _read_stream,
    "read_io": _read_stream,
    "assert": _assert,
    "assert_vector": _assert_vector,
    "read_mem": _read_mem,
    "write_mem": _write_mem,
    "hash": _hash,
    "sponge_init": _sponge_init,
    "sponge_absorb": _sponge,
    "sponge_absorb_mem": _sponge,
    "sponge_squeeze": _sponge,
    "add": _add,
    "addi": _addi,
    "mul": _mul,
    "eq": _eq,
    "invert": _invert,
    "split": _split,
    "lt": _binary_u32,
    "and": _binary_u32,
    "xor": _binary_u32,
    "log_2_floor": _log_2_floor,
    "pop_count": _pop_count,
    "pow": _pow,
    "div_mod": _div_mod,
    "xx_add": _xx_add,
    "xx_mul": _xx_mul,
    "xb_mul": _xb_mul,
    "write_io": _write_io,
}


def _static(isa: IsaVariant, ins: Any) -> tuple[int, int, int, int]:
    """``(TooShallow bound, op-stack rows, RAM rows, Hash rows)`` of one instruction, as the
    simulator's decoder derives them (`tasmopt.vm.codegen.static_facts`)."""
    small = ins.arg if instruction_set(isa)[ins.name].arg_range() is not None else None
    _, need, rows = static_facts(isa, ins.name, small)
    return (need, *unpack_rows(rows))


def lane_coverage(program: Program) -> bool:
    """True iff `run_lanes` evaluates ``program`` itself: every instruction is in its
    coverage and the only control flow is a final ``halt``."""
    items = program.instructions
    if not items or items[-1].name != "halt":
        return False
    return all(ins.name in LANE_OPS and ins.name != "halt" for ins in items[:-1])


def execute(
    program: Program,
    inputs: Sequence[VmInput] | LaneInputs,
    *,
    step_limit: int = 1_000_000,
    measure: bool = True,
) -> LaneRun | None:
    """Run a straight-line ``program`` (ending in its only ``halt``) on every input at once.

    Args:
        program: the program; see `lane_coverage` for what is evaluated here.
        inputs: one `VmInput` per lane, all with an ``initial_stack`` of one length (>= 16);
            or the same as `LaneInputs`, built once for many programs.
        step_limit: as in `tasmopt.vm.simulator.run`; a program longer than it is not
            evaluated here (None).
        measure: compute table heights of halting lanes.

    Returns:
        The `LaneRun`, or None when this program or these inputs are outside the coverage.
    """
    if not lane_coverage(program) or len(program.instructions) > step_limit:
        return None
    lanes = inputs if isinstance(inputs, LaneInputs) else LaneInputs(inputs)
    if not lanes.ok:
        return None
    table = instruction_set(program.isa)
    steps = [_static(program.isa, ins) for ins in program.instructions]
    vm = _Machine(lanes, measure)
    for ip, ins in enumerate(program.instructions):
        if len(vm.stk) < steps[ip][0]:
            vm.fail_all("TooShallow", ip)
            break
        spec = table[ins.name]
        for pos in spec.u32_inputs:  # u32 operand checks first, in the table's order (§5.7)
            vm.fail(vm.stk[-(pos + 1)] > _M32, "FailedU32Conversion", ip)
        small = ins.arg if isinstance(ins.arg, int) else None
        op = _Op(ip, ins.name, small, small or 0, ins.error_id, spec.u32_entries)
        LANE_OPS[ins.name](vm, op)
        if not vm.alive.any():
            break
    return LaneRun(program, vm, steps)


def run_lanes(
    program: Program,
    inputs: Sequence[VmInput] | LaneInputs,
    *,
    step_limit: int = 1_000_000,
    measure: bool = True,
) -> list[VmResult] | None:
    """`execute`, as one `VmResult` per input (in order), or None outside the coverage."""
    run = execute(program, inputs, step_limit=step_limit, measure=measure)
    return None if run is None else [run.result(i) for i in range(run.n)]


class LaneRun:
    """The outcome of `execute`: ``N`` lanes of one program.

    Attributes:
        n: lanes. halted: ``(N,)`` bool, the lane ran to ``halt``.
    """

    def __init__(self, program: Program, vm: _Machine, steps: list[tuple[int, int, int, int]]):
        self.program, self.vm, self.n = program, vm, vm.n
        self.halted: npt.NDArray[np.bool_] = vm.alive
        self.cycles = len(program.instructions)
        self._steps = steps
        self._stack: U64 | None = None

    @property
    def stack(self) -> U64:
        """``(depth, N)`` final op stack, bottom..top (garbage in failed lanes)."""
        if self._stack is None:
            self._stack = np.stack(self.vm.stk) if self.vm.stk else np.zeros((0, self.n), np.uint64)
        return self._stack

    def same_observables(
        self,
        other: LaneRun,
        hidden: frozenset[int] = frozenset(),
        dead_slots: frozenset[int] = frozenset(),
    ) -> npt.NDArray[np.bool_]:
        """``(N,)`` bool: lane ``i`` of both runs has equal observables (design §2, as
        `tasmopt.vm.equivalence.observe` compares them; every failure equals every other).
        ``hidden``: RAM cells left out; ``dead_slots``: final op-stack slots (st index)
        left out (the stack lengths are still compared)."""
        a, b = self.vm, other.vm
        both = self.halted & other.halted
        same = ~self.halted & ~other.halted  # failures agree with failures
        if (
            len(a.stk) != len(b.stk)
            or len(a.out) != len(b.out)
            or (a.pub_i, a.sec_i) != (b.pub_i, b.sec_i)
        ):
            return same
        ok = both.copy()
        if a.stk:
            equal = self.stack == other.stack
            depth = len(a.stk)
            for k in dead_slots:
                if k < depth:
                    equal[depth - 1 - k] = True
            ok &= np.all(equal, axis=0)
        for x, y in zip(a.out, b.out, strict=True):
            ok &= x == y
        ok &= a.has_sponge == b.has_sponge
        ok &= ~a.has_sponge | np.all(a.sponge == b.sponge, axis=1)
        for i in np.flatnonzero(ok):
            ra, rb = a.ram[i], b.ram[i]
            if hidden:
                ra = {k: v for k, v in ra.items() if k not in hidden}
                rb = {k: v for k, v in rb.items() if k not in hidden}
            if ra != rb:
                ok[i] = False
        return same | ok

    def first_difference(
        self,
        other: LaneRun,
        hidden: frozenset[int] = frozenset(),
        dead_slots: frozenset[int] = frozenset(),
    ) -> int | None:
        """The first lane whose observables differ between the two runs (see
        `same_observables`), or None."""
        differ = np.flatnonzero(~self.same_observables(other, hidden, dead_slots))
        return int(differ[0]) if len(differ) else None

    def halting_lanes(self) -> list[int]:
        """Lanes that ran to ``halt``, in order."""
        return [int(i) for i in np.flatnonzero(self.halted)]

    def _static_heights(self) -> dict[str, int]:
        steps, att = self._steps, attestation(self.program)
        return {
            "program": att.program_rows,
            "processor": self.cycles,
            "op_stack": sum(s[1] for s in steps),
            "ram": sum(s[2] for s in steps),
            "jump_stack": self.cycles,
            "hash": att.hash_rows + sum(s[3] for s in steps),
        }

    def _u32_height(self, i: int) -> int:
        return u32_height({(k, int(a[i]), int(b[i])) for k, a, b in self.vm.u32})

    def _cascade_height(self, i: int) -> int:
        att = attestation(self.program)
        limbs: set[int] = set()
        for m in self.vm.montgomery:
            limbs.update(np.ascontiguousarray(m[i], dtype="<u8").view("<u2").tolist())
        return len(att.limbs) + len(limbs - att.limbs)

    def heights(self, i: int) -> TableHeights | None:
        """Table heights of lane ``i`` (spec §7), None if it failed or nothing was measured."""
        if not self.vm.measure or not self.halted[i]:
            return None
        return TableHeights(
            **self._static_heights(), u32=self._u32_height(i), cascade=self._cascade_height(i)
        )

    def max_heights(self, lanes: Sequence[int]) -> dict[str, int]:
        """Per table, the tallest over the given lanes that halted (spec §7); only the U32
        and Cascade tables depend on the lane."""
        lanes = [i for i in lanes if self.halted[i]]
        if not self.vm.measure or not lanes:
            return {}
        out = self._static_heights()
        out["u32"] = max(self._u32_height(i) for i in lanes) if self.vm.u32 else 0
        if self.vm.montgomery:
            out["cascade"] = max(self._cascade_height(i) for i in lanes)
        else:
            out["cascade"] = len(attestation(self.program).limbs)
        out["lookup"] = LOOKUP_HEIGHT
        return out

    def result(self, i: int) -> VmResult:
        """Lane ``i`` as the `VmResult` the simulator returns for that input (a failed lane
        carries only its error; see the module docstring)."""
        vm = self.vm
        err = vm.errors[i]
        if err is not None or not self.halted[i]:
            kind, ip, detail = err if err is not None else ("Unknown", 0, None)
            return VmResult(
                error=VmError(kind, ip, detail, f"{kind} at instruction {ip}"),
                stack=[],
                ram={},
                public_output=[],
                public_input_consumed=0,
                secret_input_consumed=0,
                secret_digests_consumed=0,
                sponge=None,
                cycles=ip,
                heights=None,
                jump_stack=[],
                external_calls=[],
            )
        return VmResult(
            error=None,
            stack=self.stack[:, i].tolist(),
            ram=vm.ram[i],
            public_output=[int(x[i]) for x in vm.out],
            public_input_consumed=vm.pub_i,
            secret_input_consumed=vm.sec_i,
            secret_digests_consumed=0,
            sponge=tuple(vm.sponge[i].tolist()) if vm.has_sponge[i] else None,
            cycles=self.cycles,
            heights=self.heights(i),
            jump_stack=[],
            external_calls=[],
        )
