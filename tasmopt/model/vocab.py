"""The model's output vocabulary: one token per TASM instruction line, derived from the ISA.

Every token is a whole straight-line instruction (mnemonic and argument), built from the
instruction table (`tasmopt.isa`), never from a hand-kept list:

* specials ``<pad>`` (0), ``<bos>`` (1), ``<eos>`` (2);
* every instruction that may appear in a straight-line block (control flow,
  ISA table ``is_control_flow``, and ``call`` are excluded), with each of its small
  arguments: ``n_1_5`` -> 1..5, ``stack_index`` -> 0..15 (the table's ``arg_range``);
* ``push`` / ``addi`` with the small constants `PUSH_CONSTANTS` / `ADDI_CONSTANTS`;
* pointer tokens ``push <imm k>``, ``push -<imm k>``, ``addi <imm k>``, ``addi -<imm k>``
  for k < `MAX_POINTERS`: the immediate of the k-th TIR node that has one (see
  `tasmopt.model.graph.immediates`), so any constant of the input can be emitted.

Encoding is canonical, so token sequences and instruction lists correspond one to one: a
constant is a small-constant token when it is one, else the first pointer to an immediate of
that value (plain before negated); `pointer_valid` masks the pointers that would be a second
spelling of the same line. Lines that fit none of these raise `VocabError`
(`encode_lines(..., strict=False)` reports them instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from hashlib import sha256

from tasmopt.errors import TasmoptError
from tasmopt.isa import IsaVariant, P, instruction_set, names_where
from tasmopt.tasm.program import Instr, format_field

#: Instructions a straight-line fragment cannot contain (ISA table ``is_control_flow``).
CONTROL_FLOW = names_where(lambda i: i.is_control_flow)
#: Instructions whose argument is a field element (ISA table).
_FIELD_ARGUMENT = names_where(lambda i: i.has_field_argument)

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "MAX_POINTERS",
    "PUSH_CONSTANTS",
    "ADDI_CONSTANTS",
    "POINTER_KINDS",
    "Token",
    "Vocab",
    "VocabError",
    "vocab",
]

PAD, BOS, EOS = 0, 1, 2
#: Pointer tokens per kind: blocks with more immediates can only point at the first 32.
MAX_POINTERS = 32
#: Small ``push`` constants (signed view of the field element): what the lowering and the
#: rewrite rules emit most (``push -1`` for Sub/Neg, ``push 0`` for Seal padding, small
#: counters), every power of two up to 2^63 (split/shift constants, the 2^30 spill base) and
#: the inverses of 2..16 (division by a small constant, as the block search writes it).
PUSH_CONSTANTS: tuple[int, ...] = (
    tuple(range(-8, 33))
    + tuple(1 << k for k in range(6, 64) if (1 << k) < P)
    + tuple(pow(c, P - 2, P) for c in range(2, 17))
)
#: Small ``addi`` constants (``addi 0`` is a no-op and left out).
ADDI_CONSTANTS: tuple[int, ...] = tuple(k for k in range(-8, 17) if k != 0)
#: Pointer kinds: (mnemonic, negated). ``push -<imm>`` is ``push (p - imm)``.
POINTER_KINDS: tuple[tuple[str, bool], ...] = (
    ("push", False),
    ("push", True),
    ("addi", False),
    ("addi", True),
)


class VocabError(TasmoptError):
    """An instruction line that has no token (e.g. a constant that is neither small nor an
    immediate of the block's TIR), or a token id that is not an instruction."""


@dataclass(frozen=True)
class Token:
    """One vocabulary entry.

    Attributes:
        id: token id.
        text: printable form (``"dup 3"``, ``"push <imm 2>"``, ``"<eos>"``).
        name: mnemonic, or ``""`` for specials.
        arg: the fixed argument (canonical field element for push/addi constants), or None.
        pointer: ``(kind index into POINTER_KINDS, k)`` for pointer tokens, else None.
    """

    id: int
    text: str
    name: str = ""
    arg: int | None = None
    pointer: tuple[int, int] | None = None

    @property
    def is_special(self) -> bool:
        return not self.name


class Vocab:
    """Token table and the codec between instruction lists and token ids.

    Attributes:
        tokens: all tokens, by id.
        isa: instruction-set variant the table was derived from.
        pointer_base: id of pointer token (kind 0, k 0); kind j, slot k is
            ``pointer_base + j * MAX_POINTERS + k``.
    """

    def __init__(self, isa: IsaVariant = "release") -> None:
        self.isa = isa
        table = instruction_set(isa)
        toks: list[Token] = [Token(PAD, "<pad>"), Token(BOS, "<bos>"), Token(EOS, "<eos>")]

        def add(
            name: str,
            arg: int | None = None,
            text: str | None = None,
            pointer: tuple[int, int] | None = None,
        ) -> None:
            if text is None:
                text = (
                    name
                    if arg is None
                    else f"{name} {format_field(arg) if name in _FIELD_ARGUMENT else arg}"
                )
            toks.append(Token(len(toks), text, name, arg, pointer))

        for ins in table:
            if ins.name in CONTROL_FLOW or ins.arg_kind == "label":
                continue
            if ins.arg_kind is None:
                add(ins.name)
            elif ins.arg_kind == "field_element":
                consts = PUSH_CONSTANTS if ins.name == "push" else ADDI_CONSTANTS
                for c in dict.fromkeys(c % P for c in consts):
                    add(ins.name, c)
            else:
                rng = ins.arg_range()
                assert rng is not None, ins.name
                for a in rng:
                    add(ins.name, a)
        self.pointer_base = len(toks)
        for j, (name, neg) in enumerate(POINTER_KINDS):
            if name not in table:  # pragma: no cover - both variants have push and addi
                raise VocabError(f"ISA {isa} lacks {name}")
            for k in range(MAX_POINTERS):
                add(name, None, f"{name} {'-' if neg else ''}<imm {k}>", (j, k))
        self.tokens: tuple[Token, ...] = tuple(toks)
        self._by_line: dict[tuple[str, int | None], int] = {
            (t.name, t.arg): t.id for t in toks if t.name and t.pointer is None
        }

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"Vocab({self.isa!r}, {len(self)} tokens)"

    @property
    def fingerprint(self) -> str:
        """sha256 of the token texts in order: stored in checkpoints to refuse a mismatch."""
        return sha256("\n".join(t.text for t in self.tokens).encode()).hexdigest()

    def pointer_id(self, kind: int, k: int) -> int:
        return self.pointer_base + kind * MAX_POINTERS + k

    # -- encoding ------------------------------------------------------------------------
    def encode_instr(self, ins: Instr, immediates: Sequence[int] = ()) -> int:
        """Token id of one instruction.

        Args:
            ins: the instruction (canonical argument, as parsed).
            immediates: the block's immediates in node order, canonical mod p
                (`tasmopt.model.graph.immediates`).

        Raises:
            VocabError: no token spells this instruction for this block.
        """
        if ins.error_id is not None:
            raise VocabError(f"{ins}: error_id annotations have no token")
        key = (ins.name, ins.arg if isinstance(ins.arg, int) else None)
        tid = self._by_line.get(key)
        if tid is not None:
            return tid
        if ins.name in _FIELD_ARGUMENT and isinstance(ins.arg, int):
            for j, (name, neg) in enumerate(POINTER_KINDS):
                if name != ins.name:
                    continue
                for k, v in enumerate(immediates[:MAX_POINTERS]):
                    if ((P - v) % P if neg else v) == ins.arg:
                        return self.pointer_id(j, k)
        raise VocabError(f"{ins}: no token (not a small constant nor an immediate of the block)")

    def encode(
        self, instrs: Sequence[Instr], immediates: Sequence[int] = (), *, eos: bool = True
    ) -> list[int]:
        """Token ids of an instruction list, with a final EOS. Raises `VocabError`."""
        ids = [self.encode_instr(i, immediates) for i in instrs]
        return ids + [EOS] if eos else ids

    def encode_lines(
        self, lines: Sequence[str], immediates: Sequence[int] = (), *, strict: bool = True
    ) -> tuple[list[int], list[str]]:
        """Token ids of TASM lines (comments/blank lines skipped) and the lines with no token.

        With ``strict`` (default) the first unencodable line raises `VocabError`; otherwise
        it is reported in the second return value and the ids are those of the rest (never
        use such a lossy encoding as a training target: the row must be dropped).
        """
        from tasmopt.tasm.parser import parse_instructions

        ids: list[int] = []
        bad: list[str] = []
        for line in lines:
            text = line.strip()
            if not text or text.startswith("//"):
                continue
            (ins,) = parse_instructions(text, self.isa)
            try:
                ids.append(self.encode_instr(ins, immediates))
            except VocabError:
                if strict:
                    raise
                bad.append(text)
        return ids + [EOS], bad

    # -- decoding ------------------------------------------------------------------------
    def decode(self, ids: Sequence[int], immediates: Sequence[int] = ()) -> list[Instr]:
        """Instructions of a token sequence, up to the first EOS (BOS/PAD skipped).

        Raises:
            VocabError: a pointer token beyond the block's immediates, or an unknown id.
        """
        out: list[Instr] = []
        for tid in ids:
            tid = int(tid)
            if tid == EOS:
                break
            if tid in (PAD, BOS):
                continue
            if not 0 <= tid < len(self.tokens):
                raise VocabError(f"token id {tid} out of range 0..{len(self.tokens) - 1}")
            tok = self.tokens[tid]
            if tok.pointer is not None:
                j, k = tok.pointer
                if k >= len(immediates):
                    raise VocabError(f"{tok.text}: the block has only {len(immediates)} immediates")
                v = immediates[k] % P
                out.append(Instr(tok.name, (P - v) % P if POINTER_KINDS[j][1] else v))
            else:
                out.append(Instr(tok.name, tok.arg))
        return out

    def pointer_valid(self, immediates: Sequence[int]) -> list[bool]:
        """For each pointer token, in id order (kind-major): may the block use it?

        A pointer is valid when its slot holds an immediate and the line it spells has no
        earlier spelling (a small constant, or a lower pointer of the same mnemonic), so
        that every instruction list has exactly one token sequence.
        """
        out: list[bool] = []
        seen: dict[str, set[int | None]] = {}
        for name, neg in POINTER_KINDS:
            spelled = seen.setdefault(name, {a for (n, a) in self._by_line if n == name})
            for k in range(MAX_POINTERS):
                if k >= len(immediates):
                    out.append(False)
                    continue
                v = immediates[k] % P
                value = (P - v) % P if neg else v
                ok = value not in spelled and not (name == "addi" and value == 0)
                spelled.add(value)
                out.append(ok)
        return out


@cache
def vocab(isa: IsaVariant = "release") -> Vocab:
    """The vocabulary of an ISA variant (built once per process)."""
    return Vocab(isa)
