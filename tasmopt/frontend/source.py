"""Source text and positions of Trident files, and the diagnostics made from them
(spec/trident-language.md §9: ``file:line:col: error: message``, the line, a caret).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tasmopt.errors import FrontendError

__all__ = ["Pos", "Source", "Diagnostics", "NO_POS"]

log = logging.getLogger("tasmopt.frontend")
log.addHandler(logging.NullHandler())  # warnings show where the application configures logging


@dataclass(frozen=True, slots=True)
class Pos:
    """A 1-based line and column (of a character; the same as bytes for ASCII sources)."""

    line: int
    col: int


#: Position of things that have none (synthesized nodes).
NO_POS = Pos(0, 0)


@dataclass
class Source:
    """One file's text under the name used in diagnostics (its path, or ``<source>``)."""

    name: str
    text: str
    lines: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.lines = self.text.split("\n")

    def line_text(self, line: int) -> str:
        """The text of a 1-based line ("" outside the file)."""
        return self.lines[line - 1].rstrip("\r") if 1 <= line <= len(self.lines) else ""

    def error(self, message: str, pos: Pos, help: str | None = None) -> FrontendError:
        """A `FrontendError` for ``message`` at ``pos`` in this file."""
        return FrontendError(message, self.name, pos.line, pos.col, self.line_text(pos.line), help)


class Diagnostics:
    """Collects the errors of one phase of one module; `raise_if_any` raises them together."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.errors: list[FrontendError] = []

    def error(self, message: str, pos: Pos, help: str | None = None) -> None:
        """Record an error (duplicates at the same position and text are dropped)."""
        for e in self.errors:
            if (e.line, e.col, e.message) == (pos.line, pos.col, message):
                return
        self.errors.append(self.source.error(message, pos, help))

    def warning(self, message: str, pos: Pos) -> None:
        """Log a warning (spec §9 "warnings"); warnings never stop compilation."""
        log.warning("%s:%d:%d: warning: %s", self.source.name, pos.line, pos.col, message)

    def raise_if_any(self) -> None:
        """Raise the collected errors as one `FrontendError` (the first one's position)."""
        if self.errors:
            first, *rest = sorted(self.errors, key=lambda e: (e.line, e.col))
            raise FrontendError(
                first.message,
                first.file,
                first.line,
                first.col,
                first.source_line,
                first.help,
                tuple(rest),
            )
