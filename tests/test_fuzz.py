"""The differential fuzzer of the whole compile (`tasmopt.fuzz`, ``benchmarks/fuzz.py``): a
short seeded run, one program per family, finds no difference; the harness itself can fail
(a wrong optimized program is caught and minimized); the families reach the passes they are
written for."""

from __future__ import annotations

import pytest

from tasmopt import fuzz
from tasmopt.fuzz import FAMILIES, check, compile_program, generate, minimize


@pytest.mark.parametrize("family", FAMILIES)
def test_a_seeded_program_of_every_family_behaves_like_the_reference(family):
    prog = generate(FAMILIES.index(family) + 1000, family)
    out = check(prog, runs=6, seed=1)
    assert out.compiled, out.error
    assert out.runs == 6
    assert not out.findings, (prog.source, out.findings[0].public, out.findings[0].optimized)
    assert out.cycles <= out.baseline_cycles


def test_every_generated_program_compiles():
    for seed in range(3 * len(FAMILIES)):
        prog = generate(seed)
        compile_program(prog)  # raises FrontendError on a generator bug


def test_generation_is_deterministic_and_rejects_unknown_families():
    assert generate(5).source == generate(5).source
    assert generate(5).family == FAMILIES[5 % len(FAMILIES)]
    with pytest.raises(ValueError, match="unknown family"):
        generate(1, "nope")


def test_rare_inputs_take_the_magic_values():
    prog = generate(0, "arith")
    while not prog.magic:
        prog = generate(prog.seed + len(FAMILIES), "arith")
    import random

    sets = fuzz.input_sets(prog, random.Random(0), 40)
    rare = [v for public, _ in sets[20:] for v in public]
    assert any(v in prog.magic for v in rare)


def test_a_wrong_optimized_program_is_found_and_minimized(monkeypatch):
    """The harness can fail: an optimizer that turns one ``add`` into ``mul`` is caught on
    the generated inputs, and the minimized program still shows it with fewer statements."""
    from tasmopt import optimizer

    real = optimizer.compile

    def broken(*args, **kwargs):
        result = real(*args, **kwargs)
        lines = result.tasm.splitlines()
        for i, ln in enumerate(lines):
            if ln.strip() == "add":
                lines[i] = ln.replace("add", "mul")
                break
        result.tasm = "\n".join(lines) + "\n"
        return result

    monkeypatch.setattr(optimizer, "compile", broken)
    prog = generate(3, "calls")
    out = check(prog, runs=6)
    assert out.findings, prog.source
    small = minimize(out.findings[0])
    assert len(small.body) < len(prog.body)
    assert check(small, runs=6).findings


@pytest.mark.parametrize(
    ("family", "passes"),
    [
        ("unroll", {"unroll"}),
        ("chain", {"conditions", "inline"}),
        ("early", {"early_exit", "checks"}),
    ],
)
def test_a_family_reaches_the_pass_it_is_written_for(family, passes):
    """Cheap families; the costly ones (dot, absorb, xdot) are shown by the benchmark."""
    kept: set[str] = set()
    for seed in range(4):
        kept |= set(check(generate(seed, family), runs=2).rewrites)
    assert kept & passes, kept
