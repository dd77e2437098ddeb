"""Exception hierarchy of tasmopt: one root, one class per package concern.

The service maps these to HTTP status codes in exactly one place
(`service/errors.py`); library code never raises bare `Exception`.
"""

from __future__ import annotations

__all__ = [
    "TasmoptError",
    "IsaError",
    "TasmSyntaxError",
    "TirError",
    "LoweringError",
    "VmError",
    "VerificationError",
    "FrontendError",
]


class TasmoptError(Exception):
    """Root of every error raised by the tasmopt library."""


class IsaError(TasmoptError):
    """The instruction table is missing, malformed, or asked for an unknown instruction."""


class TasmSyntaxError(TasmoptError):
    """TASM text that does not parse (Triton VM spec §10).

    Attributes:
        line: 1-based line of the offending token.
        column: 1-based column of the offending token.
        reason: the message without the position prefix.
    """

    def __init__(self, reason: str, line: int, column: int, source_line: str = "") -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(f"{line}:{column}: {reason}")


class TirError(TasmoptError):
    """Malformed or invalid TIR (spec/tir.md §2).

    Attributes:
        path: where the offending op sits, e.g. ``tir[12].IfElse.then_body[3]``.
        reason: the message without the path prefix.
    """

    def __init__(self, reason: str, path: str = "tir") -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"{path}: {reason}")


class BaselineError(TasmoptError):
    """The client's ``baseline_tasm`` cannot be the baseline of this TIR: it defines none of
    the TIR's functions (another module's text, or not compiler output at all)."""


class LoweringError(TasmoptError):
    """TIR that validates but cannot be lowered to TASM for the selected ISA."""


class VmError(TasmoptError):
    """A Triton VM run failed (Triton VM spec §6).

    Attributes:
        kind: the reference error kind, e.g. ``"AssertionFailed"``, ``"TooShallow"``,
            ``"FailedU32Conversion"``, or ``"StepLimitExceeded"`` (ours: the step limit).
        ip: instruction index (not word address) of the failing instruction, if any.
        detail: extra payload, e.g. the offending value or the ``error_id``.
    """

    def __init__(
        self, kind: str, ip: int | None = None, detail: object = None, message: str = ""
    ) -> None:
        self.kind = kind
        self.ip = ip
        self.detail = detail
        text = message or kind
        if ip is not None:
            text = f"{text} at instruction {ip}"
        if detail is not None and not message:
            text = f"{text} ({detail})"
        super().__init__(text)


class VerificationError(TasmoptError):
    """The verifier could not be run on a candidate (not: the candidate is inequivalent)."""


class FrontendError(TasmoptError):
    """A Trident source file that does not resolve, lex, parse or type-check
    (spec/trident-language.md §9).

    ``str()`` renders every diagnostic as ``file:line:col: error: message``, the offending
    source line and a caret under the column (plus a ``help:`` line where there is one).

    Attributes:
        file: the file (or source name) of the first diagnostic.
        line: 1-based line of the offending token's first byte (0 if unknown).
        col: 1-based column of that byte (0 if unknown).
        message: the first diagnostic's message, without position.
        source_line: the text of that line ("" if unknown).
        help: an optional hint for the first diagnostic.
        errors: every diagnostic of the failing module, this one first (each a
            `FrontendError` with one diagnostic).
    """

    def __init__(
        self,
        message: str,
        file: str = "<source>",
        line: int = 0,
        col: int = 0,
        source_line: str = "",
        help: str | None = None,
        more: tuple[FrontendError, ...] = (),
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        self.source_line = source_line
        self.help = help
        self.errors: tuple[FrontendError, ...] = (self, *more)
        super().__init__(message)

    def render(self) -> str:
        """This diagnostic alone: position, message, source line, caret, help."""
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        out = [f"{where}: error: {self.message}"]
        if self.source_line and self.line:
            text = self.source_line.rstrip("\n\r")
            pad = "".join(c if c == "\t" else " " for c in text[: max(self.col - 1, 0)])
            out += [f"  {text}", f"  {pad}^"]
        if self.help:
            out.append(f"  help: {self.help}")
        return "\n".join(out)

    def __str__(self) -> str:
        return "\n".join(e.render() for e in self.errors)
