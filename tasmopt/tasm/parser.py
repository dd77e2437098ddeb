"""TASM text -> `Program` (Triton VM spec §10), with errors that carry line and column.

Accepted: labels (``name:``), instructions with their arguments, ``//`` and ``/* */`` comments,
``error_id <i128>`` after ``assert``/``assert_vector``, type hints and ``break`` (both
dropped: they have no effect). One extension: a ``call`` target may be an external symbol
``@module__fn`` (the Trident toolchain's unlinked cross-module calls, spec/tir.md §3.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import IsaVariant, P, instruction_set
from tasmopt.tasm.program import EXTERNAL_PREFIX, Instr, Item, Label, Program

__all__ = ["parse", "parse_instructions", "parse_field_literal"]

KEYWORDS = frozenset({"hint", "error_id", "error_message", "break"})
_DECIMAL = re.compile(r"[+-]?[0-9]+")

# Whitespace is Unicode's White_Space property (Rust `char::is_whitespace`, which the reference
# parser uses; spec/triton-vm.md §10). Python's `str.isspace` also counts the information
# separators U+001C..U+001F, which are not whitespace there, so the set is spelled out.
WHITESPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_WS = "[" + "".join(f"\\u{ord(c):04x}" for c in sorted(WHITESPACE)) + "]"
# A `//` comment ends at the first line terminator, `\n` or `\r` (so `\r\n` and a lone `\r`).
_LINE_END = re.compile(r"[\n\r]")
_HINT = re.compile(
    (
        r"hint\s+[a-z_][a-z0-9_]*\s*(:\s*\**[A-Za-z_][A-Za-z0-9_]*(<[A-Za-z0-9_<>,\s*]*>)?\s*)?"
        r"=\s*stack\s*\[\s*([0-9]+)\s*(\.\.\s*([0-9]+)\s*)?\]"
    ).replace(r"\s", _WS),
    re.S,
)


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    pos: int  # offset in the source
    kind: str  # "word" or "colon"


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self._line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def where(self, pos: int) -> tuple[int, int, str]:
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:  # last line start <= pos
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        start = self._line_starts[lo]
        end = self.text.find("\n", start)
        line_text = self.text[start : end if end >= 0 else len(self.text)]
        return lo + 1, pos - start + 1, line_text

    def error(self, reason: str, pos: int) -> TasmSyntaxError:
        line, col, text = self.where(pos)
        return TasmSyntaxError(reason, line, col, text)


def _tokenize(src: _Source) -> list[_Tok]:
    text, n, i = src.text, len(src.text), 0
    toks: list[_Tok] = []
    while i < n:
        c = text[i]
        if c in WHITESPACE:
            i += 1
        elif text.startswith("//", i):
            m = _LINE_END.search(text, i)
            i = n if m is None else m.start()
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise src.error("unterminated block comment", i)
            i = j + 2
        elif c == ":":
            toks.append(_Tok(":", i, "colon"))
            i += 1
        else:
            j = i
            while (
                j < n
                and text[j] not in WHITESPACE
                and text[j] != ":"
                and not text.startswith(("//", "/*"), j)
            ):
                j += 1
            toks.append(_Tok(text[i:j], i, "word"))
            i = j
    return toks


def _is_label_name(name: str) -> bool:
    if not name or not (name[0].isalpha() or name[0] == "_"):
        return False
    return all(ch.isalnum() or ch in "_-" for ch in name)


def parse_field_literal(text: str) -> int:
    """A ``push``/``addi`` argument: signed decimal with ``-p < a < p``; returns ``a mod p``.

    Raises:
        ValueError: not a decimal integer, or out of range.
    """
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"expected a decimal field element, got {text!r}")
    value = int(text)
    if not -P < value < P:
        raise ValueError(f"field element {text} out of range: need -p < a < p (p = {P})")
    return value % P


#: Texts up to this many characters are parsed once per process (`parse` keeps the last
#: `PARSED_SHORT` of them), longer ones up to `LONG_TEXT` once per `PARSED_LONG`: a compile
#: parses the same lines, blocks and harness programs again and again (a cold keccak256
#: compile parsed 1,466 texts, 69 of its 290 ms). A `Program` is immutable (its analyses are
#: memoized on it), so one parse serves every caller.
SHORT_TEXT, PARSED_SHORT = 2_000, 4_096
LONG_TEXT, PARSED_LONG = 200_000, 64


def parse(text: str, isa: IsaVariant = "release", *, allow_external: bool = True) -> Program:
    """Parse TASM text into a `Program` (memoized: the same text gives the same object).

    Args:
        text: program text.
        isa: instruction-set variant; decides which mnemonics exist (``xx_dot_step`` vs
            ``b_horner_step``).
        allow_external: accept ``call @symbol`` to symbols not defined in the text.

    Raises:
        TasmSyntaxError: with 1-based ``line`` and ``column`` of the offending token.
    """
    if len(text) <= SHORT_TEXT:
        return _parse_short(text, isa, allow_external)
    if len(text) <= LONG_TEXT:
        return _parse_long(text, isa, allow_external)
    return _parse(text, isa, allow_external)


def _parse(text: str, isa: IsaVariant, allow_external: bool) -> Program:
    src = _Source(text)
    table = instruction_set(isa)
    toks = _tokenize(src)
    items: list[Item] = []
    label_pos: dict[str, int] = {}
    calls: list[tuple[str, int]] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.kind == "colon":
            raise src.error("unexpected ':'", tok.pos)
        word = tok.text
        if i + 1 < len(toks) and toks[i + 1].kind == "colon":  # a label
            if word in table or word in KEYWORDS:
                raise src.error(f"{word!r} is reserved and cannot be a label", tok.pos)
            if not _is_label_name(word):
                raise src.error(f"invalid label name {word!r}", tok.pos)
            if word in label_pos:
                raise src.error(f"duplicate label {word!r}", tok.pos)
            label_pos[word] = tok.pos
            items.append(Label(word))
            i += 2
            continue
        if word == "break":
            i += 1
            continue
        if word == "hint":
            m = _HINT.match(text, tok.pos)
            if not m:
                raise src.error(
                    "malformed type hint; expected 'hint name[: Type] = stack[a]' or 'stack[a..b]'",
                    tok.pos,
                )
            if m.group(5) is not None and int(m.group(5)) <= int(m.group(3)):
                raise src.error("type hint range must have end > start", tok.pos)
            end = m.end()
            if end < len(text) and not (
                text[end] in WHITESPACE or text.startswith(("//", "/*"), end)
            ):
                # the hint's closing ']' must be followed by whitespace, a comment or the end,
                # like every other token (spec §10); otherwise the next token would be lost
                raise src.error("expected whitespace or a comment after the type hint", end)
            while i < len(toks) and toks[i].pos < end:
                i += 1
            continue
        if word == "error_id":
            prev = items[-1] if items else None
            if not (
                isinstance(prev, Instr)
                and table[prev.name].takes_error_id
                and prev.error_id is None
                and i > 0
                and toks[i - 1].kind == "word"
            ):
                raise src.error(
                    "'error_id' must directly follow 'assert' or 'assert_vector'", tok.pos
                )
            if i + 1 >= len(toks) or not _DECIMAL.fullmatch(toks[i + 1].text):
                raise src.error("'error_id' needs an integer argument", tok.pos)
            value = int(toks[i + 1].text)
            if not -(2**127) <= value < 2**127:
                raise src.error("error_id out of i128 range", toks[i + 1].pos)
            items[-1] = Instr(prev.name, prev.arg, value)
            i += 2
            continue
        if word not in table:
            raise src.error(f"unknown instruction {word!r}", tok.pos)
        spec = table[word]
        if not spec.has_arg:
            items.append(Instr(word))
            i += 1
            continue
        if i + 1 >= len(toks) or toks[i + 1].kind != "word":
            raise src.error(f"'{word}' needs an argument", tok.pos + len(word))
        atok = toks[i + 1]
        arg_text = atok.text
        if spec.arg_kind == "field_element":
            try:
                arg: int | str = parse_field_literal(arg_text)
            except ValueError as exc:
                raise src.error(f"'{word}': {exc}", atok.pos) from None
        elif spec.arg_kind == "label":
            name = arg_text
            external = (
                allow_external and name.startswith(EXTERNAL_PREFIX) and _is_label_name(name[1:])
            )
            if not external and not _is_label_name(name):
                raise src.error(f"'call' needs a label, got {name!r}", atok.pos)
            if name in table or name in KEYWORDS:
                raise src.error(f"'call' target {name!r} is a reserved word", atok.pos)
            arg = name
            if not external:
                calls.append((name, atok.pos))
        else:
            allowed = spec.arg_range()
            assert allowed is not None
            if (
                not (arg_text.isascii() and arg_text.isdigit())
                or (len(arg_text) > 1 and arg_text[0] == "0")
                or int(arg_text) not in allowed
            ):
                raise src.error(
                    f"'{word}' takes one of {allowed.start}..{allowed.stop - 1}, got {arg_text!r}",
                    atok.pos,
                )
            arg = int(arg_text)
        items.append(Instr(word, arg))
        i += 2
    for name, pos in calls:
        if name not in label_pos:
            raise src.error(f"call to undefined label {name!r}", pos)
    return Program(tuple(items), isa)


_parse_short = lru_cache(maxsize=PARSED_SHORT)(_parse)
_parse_long = lru_cache(maxsize=PARSED_LONG)(_parse)


def parse_instructions(text: str, isa: IsaVariant = "release") -> list[Instr]:
    """Parse a straight-line fragment (no labels, no calls to local labels).

    Raises:
        TasmSyntaxError: on any syntax error, or if the fragment contains a label.
    """
    prog = parse(text, isa)
    for item in prog.items:
        if isinstance(item, Label):
            raise TasmSyntaxError(
                f"a straight-line fragment cannot define label {item.name!r}", 1, 1
            )
    return list(prog.instructions)
