"""Semantics of every Triton VM instruction, as Python source templates (Triton VM spec §5).

The simulator turns these templates into code (`tasmopt.vm.codegen`): per instruction into a
handler closure, and for hot straight-line runs into one function per run. A template gets
the instruction's *shape* (`Shape`: mnemonic, small argument, variant) and returns source
lines that run with these names bound:

* ``stk``: the op stack, a list of canonical ints, bottom..top (``stk[-1]`` is st0);
* ``vm``: the run state (`tasmopt.vm.state.RunState`); ``ram`` (= ``vm.ram``),
  ``js`` (= ``vm.js``, the jump stack) and ``u32add`` (= ``vm.u32.add``) on demand;
* ``cyc``: the cycle count when the code is entered;
* module globals ``P``, ``Fail``, ``xmul``, ``xinv``, ``ExternalCall``;
* placeholders for the values that depend on where the instruction sits (`PLACEHOLDERS`):
  ``NEXT`` (its index + 1), ``SKIP`` (index + 2), ``TARGET`` (call destination), ``A``
  (``push``/``addi`` immediate), ``EID`` (``error_id``), ``SYM`` (external call symbol) and
  ``K`` (offset inside a compiled block: the ``Fail`` payload).

Contract: a template performs all of its own checks (spec §6, in the spec's order) *before*
it changes any state, and reports a failure with ``raise Fail(K, kind, detail)``. The u32
operand checks (spec §5.7) and TooShallow are derived from the instruction table and not
written here. Control-flow templates end with ``return <next ip>`` (``-1`` = halted); all
others fall through to the next instruction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from tasmopt.isa import Instruction, names_where

__all__ = ["Shape", "TEMPLATES", "TERMINATORS", "PLACEHOLDERS", "shape_lines"]

#: Instructions that decide the next ``ip`` themselves, a local ``call`` included (ISA table
#: ``is_control_flow``).
TERMINATORS = names_where(lambda i: i.is_control_flow)

#: Names in template text that stand for per-site values.
PLACEHOLDERS = ("NEXT", "SKIP", "TARGET", "A", "EID", "SYM", "K")

U32_MAX = 0xFFFF_FFFF


class Shape(NamedTuple):
    """What determines an instruction's code, apart from the placeholder values.

    Attributes:
        name: mnemonic.
        arg: the small argument (``n`` 1..5 or stack index 0..15), else ``None``.
        variant: ``"external"`` for a call to an undefined symbol, ``"last"`` for a ``skiz``
            that is the program's last instruction, else ``""``.
    """

    name: str
    arg: int | None = None
    variant: str = ""

    @property
    def n(self) -> int:
        """The small argument (``pop n``, ``dup i``, ...).

        Raises:
            ValueError: the instruction takes none.
        """
        if self.arg is None:
            raise ValueError(f"{self.name} has no small argument")
        return self.arg

    @property
    def terminates(self) -> bool:
        return self.name in TERMINATORS and self.variant != "external"


def u32_key(k: int) -> str:
    """Stands for the instruction name of the table's ``k``-th U32 entry (ISA table
    ``u32_entries``; e.g. ``xor`` records an ``and`` entry): `shape_lines` fills it in."""
    return f"U32KEY{k}"


_U32_KEY = re.compile(r"U32KEY(\d)")


def _fail(kind: str, detail: str = "None") -> str:
    """Source of the failure statement; ``detail`` is a Python expression."""
    return f"raise Fail(K, {kind!r}, {detail})"


Template = Callable[[Shape], list[str]]


def _ram_reads(ptr: str, offsets: range | list[int]) -> list[str]:
    """Expressions reading RAM at ``ptr + o`` (mod p) for each offset; unset cells read 0."""
    out = []
    for o in offsets:
        addr = ptr if o == 0 else f"({ptr} + {o}) % P" if o > 0 else f"({ptr} - {-o}) % P"
        out.append(f"ram.get({addr}, 0)")
    return out


# --- stack manipulation (spec §5.2) -------------------------------------------------------


def _push(s: Shape) -> list[str]:
    return ["stk.append(A)"]


def _pop(s: Shape) -> list[str]:
    return [f"del stk[-{s.n}:]"]


def _divine(s: Shape) -> list[str]:
    n = s.n
    return [
        "i = vm.sec_i",
        f"if i + {n} > len(vm.sec): {_fail('EmptySecretInput')}",
        f"stk += vm.sec[i:i + {n}]",
        f"vm.sec_i = i + {n}",
    ]


def _dup(s: Shape) -> list[str]:
    return [f"stk.append(stk[-{s.n + 1}])"]


def _swap(s: Shape) -> list[str]:
    i = s.n
    return [] if i == 0 else [f"stk[-1], stk[-{i + 1}] = stk[-{i + 1}], stk[-1]"]


def _pick(s: Shape) -> list[str]:
    i = s.n
    return [] if i == 0 else [f"stk.append(stk.pop(-{i + 1}))"]


def _place(s: Shape) -> list[str]:
    i = s.n
    return [] if i == 0 else [f"stk.insert(-{i}, stk.pop())"]


# --- control flow (spec §5.3) ---------------------------------------------------------------


def _halt(s: Shape) -> list[str]:
    return ["return -1"]


def _nop(s: Shape) -> list[str]:
    return []


def _skiz(s: Shape) -> list[str]:
    lines = ["if stk.pop():", "    return NEXT"]
    if s.variant == "last":  # spec §4 quirk: the pop has happened when the missing
        lines.append(_fail("InstructionPointerOverflow"))  # next instruction fails
    else:
        lines.append("return SKIP")
    return lines


def _call(s: Shape) -> list[str]:
    if s.variant == "external":  # opaque call into another module: recorded, no effect
        return ["vm.ext.append(ExternalCall(SYM, cyc + K, tuple(stk)))"]
    return ["js.append((NEXT, TARGET))", "return TARGET"]


def _return(s: Shape) -> list[str]:
    return [f"if not js: {_fail('JumpStackIsEmpty')}", "return js.pop()[0]"]


def _recurse(s: Shape) -> list[str]:
    return [f"if not js: {_fail('JumpStackIsEmpty')}", "return js[-1][1]"]


def _recurse_or_return(s: Shape) -> list[str]:
    return [
        f"if not js: {_fail('JumpStackIsEmpty')}",
        "if stk[-6] == stk[-7]:",
        "    return js.pop()[0]",
        "return js[-1][1]",
    ]


def _assert(s: Shape) -> list[str]:
    return [f"if stk[-1] != 1: {_fail('AssertionFailed', 'EID')}", "del stk[-1]"]


# --- memory (spec §5.4) ----------------------------------------------------------------------


def _read_mem(s: Shape) -> list[str]:
    n = s.n
    reads = _ram_reads("p", [-k for k in range(n)])
    lines = ["p = stk[-1]", f"stk[-1] = {reads[0]}"]
    lines += [f"stk.append({r})" for r in reads[1:]]
    lines.append(f"stk.append((p - {n}) % P)")
    return lines


def _write_mem(s: Shape) -> list[str]:
    n = s.n
    lines = ["p = stk.pop()", "ram[p] = stk.pop()"]
    lines += [f"ram[(p + {k}) % P] = stk.pop()" for k in range(1, n)]
    lines.append(f"stk.append((p + {n}) % P)")
    return lines


# --- hashing (spec §5.5) ---------------------------------------------------------------------


def _hash(s: Shape) -> list[str]:
    return [
        "h = vm.permute(stk[:-11:-1] + [1, 1, 1, 1, 1, 1])",
        "del stk[-10:]",
        "stk += h[4::-1]",
    ]


def _assert_vector(s: Shape) -> list[str]:
    lines = [
        f"if stk[-{i + 1}] != stk[-{i + 6}]: {_fail('VectorAssertionFailed', str(i))}"
        for i in range(5)
    ]
    return [*lines, "del stk[-5:]"]


def _sponge_init(s: Shape) -> list[str]:
    return ["vm.sponge = [0] * 16"]


def _need_sponge(s: Shape) -> list[str]:
    return ["sp = vm.sponge", f"if sp is None: {_fail('SpongeNotInitialized')}"]


def _sponge_absorb(s: Shape) -> list[str]:
    return [*_need_sponge(s), "vm.sponge = vm.permute(stk[:-11:-1] + sp[10:])", "del stk[-10:]"]


def _sponge_absorb_mem(s: Shape) -> list[str]:
    return [
        *_need_sponge(s),
        "p = stk[-1]",
        f"v = [{', '.join(_ram_reads('p', range(10)))}]",
        "vm.sponge = vm.permute(v + sp[10:])",
        "stk[-5:] = [v[3], v[2], v[1], v[0], (p + 10) % P]",
    ]


def _sponge_squeeze(s: Shape) -> list[str]:
    return [*_need_sponge(s), "stk += sp[9::-1]", "vm.sponge = vm.permute(sp)"]


def _merkle_tail() -> list[str]:
    """Shared end of the merkle steps: ``sib`` holds the sibling digest (s0..s4)."""
    return [
        "idx = stk[-6]",
        "cur = stk[:-6:-1]",
        "h = vm.permute((sib + cur if idx & 1 else cur + sib) + [1, 1, 1, 1, 1, 1])",
        "stk[-5:] = h[4::-1]",
        "stk[-6] = idx >> 1",
        f"u32add(({u32_key(0)}, idx, idx >> 1))",
    ]


def _merkle_step(s: Shape) -> list[str]:
    return [
        "i = vm.dig_i",
        f"if i >= len(vm.digs): {_fail('EmptySecretDigestInput')}",
        "sib = list(vm.digs[i])",
        "vm.dig_i = i + 1",
        *_merkle_tail(),
    ]


def _merkle_step_mem(s: Shape) -> list[str]:
    return [
        "p = stk[-8]",
        f"sib = [{', '.join(_ram_reads('p', range(5)))}]",
        *_merkle_tail(),
        "stk[-8] = (p + 5) % P",
    ]


# --- base-field arithmetic (spec §5.6) -----------------------------------------------------


def _add(s: Shape) -> list[str]:
    return ["a = stk.pop() + stk[-1]", "stk[-1] = a - P if a >= P else a"]


def _addi(s: Shape) -> list[str]:
    return ["a = stk[-1] + A", "stk[-1] = a - P if a >= P else a"]


def _mul(s: Shape) -> list[str]:
    return ["a = stk.pop()", "stk[-1] = stk[-1] * a % P"]


def _eq(s: Shape) -> list[str]:
    return ["a = stk.pop()", "stk[-1] = 1 if stk[-1] == a else 0"]


def _invert(s: Shape) -> list[str]:
    return [f"if stk[-1] == 0: {_fail('InverseOfZero')}", "stk[-1] = pow(stk[-1], P - 2, P)"]


# --- u32 instructions (spec §5.7); operand checks are generated from ``u32_inputs`` --------


def _split(s: Shape) -> list[str]:
    return [
        "a = stk[-1]",
        "hi = a >> 32",
        "lo = a & 0xFFFFFFFF",
        "stk[-1] = hi",
        "stk.append(lo)",
        f"u32add(({u32_key(0)}, lo, hi))",
    ]


def _lt(s: Shape) -> list[str]:
    return [
        "a = stk.pop()",
        "b = stk[-1]",
        "stk[-1] = 1 if a < b else 0",
        f"u32add(({u32_key(0)}, a, b))",
    ]


def _and(s: Shape) -> list[str]:
    return ["a = stk.pop()", "b = stk[-1]", "stk[-1] = a & b", f"u32add(({u32_key(0)}, a, b))"]


def _xor(s: Shape) -> list[str]:  # the U32 table records xor as an `and` entry (spec §5.7)
    return ["a = stk.pop()", "b = stk[-1]", "stk[-1] = a ^ b", f"u32add(({u32_key(0)}, a, b))"]


def _log_2_floor(s: Shape) -> list[str]:
    return [
        "a = stk[-1]",
        f"if a == 0: {_fail('LogarithmOfZero')}",
        "stk[-1] = a.bit_length() - 1",
        f"u32add(({u32_key(0)}, a, 0))",
    ]


def _pow(s: Shape) -> list[str]:
    return [
        "a = stk.pop()",
        "e = stk[-1]",
        "stk[-1] = pow(a, e, P)",
        f"u32add(({u32_key(0)}, a, e))",
    ]


def _div_mod(s: Shape) -> list[str]:
    return [
        "a = stk[-1]",
        "d = stk[-2]",
        f"if d == 0: {_fail('DivisionByZero')}",
        "q, r = divmod(a, d)",
        "stk[-1] = r",
        "stk[-2] = q",
        f"u32add(({u32_key(0)}, r, d))",
        f"u32add(({u32_key(1)}, a, q))",
    ]


def _pop_count(s: Shape) -> list[str]:
    return ["a = stk[-1]", "stk[-1] = a.bit_count()", f"u32add(({u32_key(0)}, a, 0))"]


# --- extension-field arithmetic (spec §5.8); c0 is the shallowest word --------------------


def _xx_add(s: Shape) -> list[str]:
    return [f"stk[-{4 + j}] = (stk[-{1 + j}] + stk[-{4 + j}]) % P" for j in range(3)] + [
        "del stk[-3:]"
    ]


def _xx_mul(s: Shape) -> list[str]:
    return [
        "c = xmul((stk[-1], stk[-2], stk[-3]), (stk[-4], stk[-5], stk[-6]))",
        "del stk[-3:]",
        "stk[-1], stk[-2], stk[-3] = c",
    ]


def _x_invert(s: Shape) -> list[str]:
    return [
        "a = (stk[-1], stk[-2], stk[-3])",
        f"if a == (0, 0, 0): {_fail('InverseOfZero')}",
        "stk[-1], stk[-2], stk[-3] = xinv(a)",
    ]


def _xb_mul(s: Shape) -> list[str]:
    return ["a = stk.pop()"] + [f"stk[-{j}] = stk[-{j}] * a % P" for j in (1, 2, 3)]


# --- input/output (spec §5.9) ----------------------------------------------------------------


def _read_io(s: Shape) -> list[str]:
    n = s.n
    return [
        "i = vm.pub_i",
        f"if i + {n} > len(vm.pub): {_fail('EmptyPublicInput')}",
        f"stk += vm.pub[i:i + {n}]",
        f"vm.pub_i = i + {n}",
    ]


def _write_io(s: Shape) -> list[str]:
    n = s.n
    return [f"vm.out += stk[:-{n + 1}:-1]", f"del stk[-{n}:]"]


# --- many-in-one (spec §5.10) ----------------------------------------------------------------


def _horner(s: Shape, coeff: list[str], step: int) -> list[str]:
    """``acc (st7..9) := acc · x (st0..2) + c``; ``st5 := st5 - step``."""
    return [
        "p = stk[-6]",
        "m = xmul((stk[-8], stk[-9], stk[-10]), (stk[-1], stk[-2], stk[-3]))",
        f"stk[-8] = (m[0] + {coeff[0]}) % P",
        f"stk[-9] = (m[1] + {coeff[1]}) % P",
        f"stk[-10] = (m[2] + {coeff[2]}) % P",
        f"stk[-6] = (p - {step}) % P",
    ]


def _b_horner_step(s: Shape) -> list[str]:
    return _horner(s, [*_ram_reads("p", [0]), "0", "0"], 1)


def _x_horner_step(s: Shape) -> list[str]:
    # c = (RAM[p-2], RAM[p-1], RAM[p]); the reference reads p, p-1, p-2 (order is irrelevant)
    return _horner(s, _ram_reads("p", [-2, -1, 0]), 3)


def _xx_dot_step(s: Shape) -> list[str]:
    return [
        "a = stk[-1]",
        "b = stk[-2]",
        f"m = xmul(({', '.join(_ram_reads('a', range(3)))}), "
        f"({', '.join(_ram_reads('b', range(3)))}))",
        *[f"stk[-{3 + j}] = (stk[-{3 + j}] + m[{j}]) % P" for j in range(3)],
        "stk[-1] = (a + 3) % P",
        "stk[-2] = (b + 3) % P",
    ]


def _xb_dot_step(s: Shape) -> list[str]:
    lhs = _ram_reads("b", range(3))
    return [
        "a = stk[-1]",
        "b = stk[-2]",
        f"c = {_ram_reads('a', [0])[0]}",
        *[f"stk[-{3 + j}] = (stk[-{3 + j}] + c * {lhs[j]}) % P" for j in range(3)],
        "stk[-1] = (a + 1) % P",
        "stk[-2] = (b + 3) % P",
    ]


#: Mnemonic -> template, for both ISA variants (opcodes 80/88 differ by name).
TEMPLATES: dict[str, Template] = {
    "halt": _halt,
    "push": _push,
    "skiz": _skiz,
    "pop": _pop,
    "split": _split,
    "lt": _lt,
    "nop": _nop,
    "divine": _divine,
    "assert": _assert,
    "write_mem": _write_mem,
    "log_2_floor": _log_2_floor,
    "and": _and,
    "return": _return,
    "pick": _pick,
    "hash": _hash,
    "write_io": _write_io,
    "div_mod": _div_mod,
    "xor": _xor,
    "recurse": _recurse,
    "place": _place,
    "assert_vector": _assert_vector,
    "pop_count": _pop_count,
    "pow": _pow,
    "recurse_or_return": _recurse_or_return,
    "dup": _dup,
    "sponge_absorb": _sponge_absorb,
    "merkle_step": _merkle_step,
    "sponge_init": _sponge_init,
    "swap": _swap,
    "add": _add,
    "merkle_step_mem": _merkle_step_mem,
    "sponge_absorb_mem": _sponge_absorb_mem,
    "call": _call,
    "mul": _mul,
    "sponge_squeeze": _sponge_squeeze,
    "read_mem": _read_mem,
    "eq": _eq,
    "invert": _invert,
    "addi": _addi,
    "xx_add": _xx_add,
    "x_invert": _x_invert,
    "read_io": _read_io,
    "xx_mul": _xx_mul,
    "b_horner_step": _b_horner_step,
    "xb_mul": _xb_mul,
    "x_horner_step": _x_horner_step,
    "xx_dot_step": _xx_dot_step,
    "xb_dot_step": _xb_dot_step,
}


def shape_lines(shape: Shape, spec: Instruction) -> list[str]:
    """All source lines of one instruction: the u32 operand checks (from the instruction
    table's ``u32_inputs``, in check order, spec §5.7), then its semantics."""
    lines = [
        f"if stk[-{pos + 1}] > {U32_MAX}: {_fail('FailedU32Conversion', f'stk[-{pos + 1}]')}"
        for pos in spec.u32_inputs
    ]
    keys = spec.u32_entries
    return lines + [
        _U32_KEY.sub(lambda m: repr(keys[int(m.group(1))][0]), line)
        for line in TEMPLATES[shape.name](shape)
    ]
