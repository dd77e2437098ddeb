"""Function-level stage ``client`` (opt-in, ``CompileOptions.rewrite_mismatched``):
functions whose client text our lowering does not match are optimized on the client's text
itself.

When the client's baseline TASM for a function disagrees with our lowering of its TIR (an
upstream lowering bug: a loop subroutine that runs again after its call, struct widths, ...)
the client's program is the reference and is returned as sent (design §1: the mismatch is
an upstream bug the user should see; this stage is off by default): the block pipeline
works on our lowering's blocks, which compute something else. The client's text is
still a program we can improve: its straight-line runs go to the block sources (rules and
search; each candidate proven by `check_block` against the run it replaces), and the
function is kept only when it runs equivalent to the client's program on the function
witnesses (`check_function`), in fewer cycles, with no taller table. A function kept here
joins the later function-level passes (conditions, inlining, branches, loops, pointers,
shortcuts), which work on its client text.

The harnesses of every function-level pass see these functions as the client wrote them
(not as we lower them): `client_stage` returns the module text the passes work on, our
lowering with the client's text in place of each such function, so that a caller that also
disagrees is checked against its callees as they will be returned.
"""

from __future__ import annotations

from tasmopt.module import ModuleText
from tasmopt.optimizer.inline import _callees_first, _module_with, _reoptimize, _Run
from tasmopt.optimizer.state import FunctionState, VerifyBackend, out_of_time
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet

__all__ = ["client_stage", "client_only"]


def client_only(f: FunctionState, client: ModuleText) -> bool:
    """``f`` is returned as the client sent it because our lowering disagrees (or was not
    proven equal), and its client program was measured: it ran to its end on a witness."""
    return (
        f.passthrough
        and f.reference is not None
        and f.cached is None
        and not f.skipped
        and bool(f.report.halted)
        and f.name in client.functions
    )


def client_stage(
    fns: list[FunctionState],
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    sources: SourceSet,
    verify: VerifyBackend,
) -> ModuleText:
    """Re-search the straight-line runs of every `client_only` function's client text
    (callees first); keep a function's new text when it is proven and cheaper (module
    docstring). Returns the module text the later function-level passes work on."""
    if client is None:
        return ours
    only = [f for f in fns if client_only(f, client)]
    if not only:
        return ours
    mixed = _module_with(ours, {f.name: client.section_lines(f.name) for f in only})
    run = _Run(fns, mixed, client, options, sources, verify)
    for f in _callees_first(only, mixed):
        if out_of_time(options) is not None:
            break
        f.reference_is_client = True
        lines = run.returned(f.name)
        every = [(i, i + 1) for i in range(len(lines))]  # every run holds one of them
        cand = _reoptimize(f, lines, every, options, sources, verify)
        if cand == lines:
            continue
        best = run.measure(f, lines)
        if best is None:
            continue
        if run.keep(
            f,
            cand,
            best,
            "client text",
            "the client's text, its runs re-searched",
            tie_if_smaller=True,
        ):
            f.passthrough = False
    return mixed
