"""Minimal reproductions of frontend problems met while writing the corpus, all about
spilling past 16 live stack elements (programs in ``repros/``, each with its expected output
in a comment). They were fixed in the frontend while the corpus was written and stay here
as regression tests:

* ``reload_*``: a spilled variable reloaded while anonymous temporaries were pending landed
  between them, so the consuming op (``Reveal``, a struct literal) took the wrong operands.
* ``spill_internal_error``: internal ``AssertionError: Var(x)`` in ``build_expr.read``.
* ``branch_spill_restore``: ``too many live values to restore the stack after this block``
  (without line:col) for an if/else inside a loop body that spills.
"""

from __future__ import annotations

from pathlib import Path

import corpus_ref as R
import pytest

HERE = Path(__file__).resolve().parent / "repros"

REPROS = [
    ("reload_above_temps.tri", [], [], [0, 9, 8, 7, 6, 5, 4, 3, 2, 1]),
    ("reload_matvec3.tri", [], [], [1, 4, 7]),
    ("spill_internal_error.tri", [1, 2], [], [2 * R.leaf(1)[4] % R.P, 1]),
    ("branch_spill_restore.tri", list(range(1, 12)), list(range(12, 22)), [17]),
]


@pytest.mark.parametrize(
    ("name", "public", "secret", "expected"),
    REPROS,
    ids=[r[0].removesuffix(".tri") for r in REPROS],
)
def test_repro(name, public, secret, expected):
    from tasmopt.frontend import compile_modules, link
    from tasmopt.lower.triton import lower
    from tasmopt.tasm.parser import parse
    from tasmopt.vm.simulator import VmInput, run

    prog = parse(lower(link(compile_modules(str(HERE / name), []))).text())
    r = run(prog, VmInput(public_input=public, secret_input=secret), measure=False)
    assert r.error is None, r.error
    assert list(r.public_output) == expected
