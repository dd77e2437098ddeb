"""Every corpus test program, optimized as one request (rules and search, the
observable-behaviour contract of design §2 included), must still print what the unoptimized
program prints on the case's inputs and fail where it fails. The whole program runs, entry
included: the strongest check that private scratch cells are dead where the analysis says
(`tasmopt.vm.scratch`), and of the function-level passes (inlining, loops to
``recurse_or_return``) on every program. Marked slow.

CI runs every other program (sorted by path; about 9 minutes of CPU on 2 cores) and every case
of those: the whole-compile fuzzer (``tests/test_fuzz.py``, ``benchmarks/fuzz.py``) drives each
function-level pass on generated programs in the fast suite. ``TASMOPT_FULL_CORPUS=1`` runs
all 54 programs (about 35 minutes of CPU). The slow suite runs with ``--dist load`` (.ci/run):
the cases spread over both workers, a program shared by two cases may be compiled on each.
"""

from __future__ import annotations

import functools
import os

import pytest
import test_corpus_programs as T

pytestmark = pytest.mark.slow


@functools.cache
def optimized(program: str):
    from tasmopt.frontend import compile_modules, link
    from tasmopt.optimizer import compile as compile_tir
    from tasmopt.report import CompileOptions
    from tasmopt.tasm.parser import parse

    ops = link(compile_modules(str(T.CORPUS / program), [str(T.CORPUS)]))
    r = compile_tir(ops, options=CompileOptions(sources=("rules", "search")))
    return parse(r.tasm), r


#: Every other program (sorted), or all of them with ``TASMOPT_FULL_CORPUS=1``.
PROGRAMS = sorted({c.program for c in T.CASES})[
    :: 1 if os.environ.get("TASMOPT_FULL_CORPUS") == "1" else 2
]
CASES = [
    pytest.param(c, id=c.id)
    for c in T.CASES
    if c.program in PROGRAMS or c.program == "ext/tests/t_xarith.tri"
]


@pytest.mark.parametrize("c", CASES)
def test_optimized_program_behaves_the_same(c):
    prog, _ = optimized(c.program)
    got = T.run_on(prog, c)
    want = T.run_case(c)
    assert (got.error is None) == (want.error is None), (got.error, want.error)
    if want.error is None:  # a failing run proves nothing, so its output is not observable
        assert list(got.public_output) == list(want.public_output)
    if c.expected is not None:
        assert list(got.public_output) == list(c.expected)


def test_the_contract_removes_spill_traffic():
    # t_xarith uses ext.xarith.pow_u32, the corpus's heaviest spiller: optimized as a whole
    # program, it makes fewer RAM accesses (RAM table rows) on the test's input
    from tasmopt.frontend import compile_modules, link
    from tasmopt.lower.triton import lower
    from tasmopt.tasm.parser import parse
    from tasmopt.vm.simulator import VmInput, run

    case = next(c for c in T.CASES if c.program == "ext/tests/t_xarith.tri")
    base = parse(lower(link(compile_modules(str(T.CORPUS / case.program), [str(T.CORPUS)]))).text())
    prog, _ = optimized(case.program)
    inp = VmInput(public_input=case.public, secret_input=case.secret)
    rb, ro = run(base, inp), run(prog, inp)
    assert rb.error is None and ro.error is None
    assert ro.heights.ram < rb.heights.ram, (ro.heights.ram, rb.heights.ram)
    assert ro.cycles < rb.cycles
