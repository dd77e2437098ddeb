"""Function-level pass ``checks``: a zero check ``push 0; eq; assert`` as ``skiz; call F``
with ``F: push 0; assert; return`` (issue 11, the way experts write range checks).

Where the lowering checks that st0 is zero (the high word of a ``split`` in a u32 range
check, ``assert x == 0``) it spends three cycles on every pass: ``push 0; eq; assert``. An
expert spends one: ``skiz`` pops st0 and skips the next instruction when it is 0, and the
next instruction calls a two-line subroutine that fails. Inside a loop that is two cycles
per iteration.

Proof, by the Triton VM semantics of the four instructions (spec/triton-vm.md: ``skiz``
pops st0 and skips the next instruction, of any size, iff it was 0; ``assert`` pops st0 and
fails unless it is 1; ``call`` jumps and pushes the return address on the jump stack). Let
``x`` be st0 where the check starts.

* ``x == 0``: the old code pushes 0, ``eq`` leaves 1, ``assert`` pops it; the new ``skiz``
  pops ``x`` and skips the ``call``. Both continue at the next instruction with ``x``
  consumed and nothing else changed.
* ``x != 0``: ``eq`` leaves 0 and ``assert`` fails; ``skiz`` pops ``x``, does not skip, and
  ``F`` fails on its ``assert`` of 0 (the same ``assert`` text, error id included). Both
  fail there, after the same outputs and input reads.

Only the jump stack (not observable, design §2), clock cycles and table heights differ. The
rewrite is made only where the three instructions are consecutive in one straight-line run
(no label between them: nothing jumps into the middle) and the instruction before ``push 0``
cannot skip it (ISA table ``may_skip_next``: a ``skiz`` would skip the new ``skiz`` instead
of the ``push``). ``F`` is appended after the function's last section, which must not fall
through into it (`no_fall_through`), under a label no function of the module uses. The
rewritten function is also run against its reference on the verifier's witnesses
(`check_function`) and kept only when equivalent there, cheaper in cycles, and with no padded
height above its own or a caller's (``F`` adds words to the program: `refusal` with
``longer``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tasmopt.isa import IsaVariant
from tasmopt.module import ModuleText, label_lines, line_kind
from tasmopt.optimizer.inline import INDENT, _Run
from tasmopt.optimizer.loops import _sections, _unskippable, no_fall_through
from tasmopt.optimizer.state import FunctionState, VerifyBackend
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet

__all__ = ["zero_checks", "check_stage"]

#: The first two instructions of a zero check (an ``assert`` follows), as the lowering and
#: the block search write them.
_CHECK = ("push 0", "eq")
#: Suffix of the failing subroutine's label (``<function label>__fail``).
SUFFIX = "__fail"


def _text(line: str) -> str:
    return " ".join(line.split("//", 1)[0].split())


def zero_checks(
    lines: Sequence[str], isa: IsaVariant = "release", taken: frozenset[str] = frozenset()
) -> tuple[list[str], int] | None:
    """``lines`` (one function's sections, its entry label first) with every qualifying zero
    check (module docstring) replaced by ``skiz; call F``, and ``F`` appended; and the number
    replaced. ``taken``: labels used elsewhere in the module (``F``'s label must be new).
    None when there is nothing to replace or no safe place for ``F``."""
    code = [i for i, ln in enumerate(lines) if line_kind(ln) is not None]
    if not code or line_kind(lines[code[0]]) != ":":
        return None
    entry = _text(lines[code[0]])[:-1]
    helpers: dict[str, str] = {}  # assert text -> the label of its failing subroutine
    names = set(label_lines(lines)) | taken
    edits: dict[int, str | None] = {}
    k = 0
    while k + 2 < len(code):
        a, b, c = code[k], code[k + 1], code[k + 2]
        third = _text(lines[c])
        if (
            (_text(lines[a]), _text(lines[b])) == _CHECK
            and line_kind(lines[c]) == "assert"
            and _unskippable(lines, a, isa)
        ):
            if third not in helpers:
                label = entry + SUFFIX + (str(len(helpers)) if helpers else "")
                if label in names:
                    return None
                helpers[third] = label
            edits[a] = INDENT + "skiz"
            edits[b] = None
            edits[c] = INDENT + f"call {helpers[third]}"
            k += 3
            continue
        k += 1
    if not edits:
        return None
    out = [edits.get(i, ln) for i, ln in enumerate(lines)]
    new = [ln for ln in out if ln is not None]
    while new and not new[-1].strip():
        new.pop()
    for text, label in helpers.items():
        new += ["", f"{label}:", INDENT + "push 0", INDENT + text, INDENT + "return"]
    sections = _sections(new)
    first_helper = len(sections) - len(helpers)
    if not no_fall_through(new, sections, first_helper):
        return None
    return new, sum(1 for v in edits.values() if v is not None and v.endswith("skiz"))


def check_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> None:
    """Rewrite the zero checks of every function worked on in this run; a function keeps its
    result so far unless the rewritten one is equivalent on the verifier's witnesses, takes
    fewer cycles and raises no padded height."""
    run = _Run(fns, ours, client, options, sources, verify)
    for f in run.workable(fns):
        cur = run.returned(f.name)
        taken = frozenset(lab for other in run.others(f) for lab in label_lines(other))
        found = zero_checks(cur, options.isa, taken)
        if found is None:
            continue
        cand, count = found
        best = run.measure(f, cur)
        if best is None:
            continue
        run.keep(
            f,
            cand,
            best,
            "checks",
            f"checks: {count} zero check(s) as skiz; call {SUFFIX.strip('_')}",
            longer=True,
        )
