"""Fixtures for the simulator tests: run a program in both execution tiers and compare."""

from __future__ import annotations

import pytest

from tasmopt.tasm import parse
from tasmopt.vm import VmInput, VmResult, run
from tasmopt.vm.codegen import decoded


def _fingerprint(r: VmResult) -> tuple:
    err = None if r.error is None else (r.error.kind, r.error.ip, r.error.detail, str(r.error))
    return (
        err,
        r.stack,
        r.ram,
        r.public_output,
        r.public_input_consumed,
        r.secret_input_consumed,
        r.secret_digests_consumed,
        r.sponge,
        r.cycles,
        r.heights,
        r.jump_stack,
        r.external_calls,
    )


def execute_both(
    text: str, vm_input: VmInput | None = None, *, isa: str = "release", **kwargs
) -> VmResult:
    """Run ``text`` with per-instruction handlers and again with every block precompiled;
    assert that both tiers agree on everything, and return the result."""
    vm_input = vm_input or VmInput()
    interpreted = run(parse(text, isa), vm_input, **kwargs)  # type: ignore[arg-type]
    program = parse(text, isa)  # type: ignore[arg-type]
    dec = decoded(program)
    for ip in range(len(dec)):
        dec.compile_block(ip)
    compiled = run(program, vm_input, **kwargs)
    assert _fingerprint(compiled) == _fingerprint(interpreted)
    return interpreted


@pytest.fixture
def execute():
    """``execute(text, vm_input=None, *, isa="release", **run_kwargs) -> VmResult``."""
    return execute_both
