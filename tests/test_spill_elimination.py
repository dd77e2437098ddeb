"""Spill elimination end to end (`tasmopt.optimizer.compile` with the observable-behaviour
contract of design §2): a private scratch cell's round trip disappears; every way another
part of the request could read the cell keeps the store. Each case also runs the whole
returned program against the unoptimized one on several inputs."""

from __future__ import annotations

import random

import pytest

from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.keys import function_keys
from tasmopt.optimizer.prepare import decode_tir
from tasmopt.report import CompileOptions
from tasmopt.tasm.parser import parse
from tasmopt.vm.simulator import run
from tasmopt.vm.witness import VmInput

A = 2**30
OPTS = CompileOptions(sources=("rules", "search"))

STORE = [{"Push": A}, {"WriteMem": 1}, {"Pop": 1}]
LOAD = [{"Push": A}, {"ReadMem": 1}, {"Pop": 1}]
#: f: x -> x * y, with x parked in the spill region across the read of y
F = [
    {"FnStart": "f"},
    {"ReadIo": 1},
    *STORE,
    {"ReadIo": 1},
    *LOAD,
    "Mul",
    {"WriteIo": 1},
    "Return",
    "FnEnd",
]


def program(*functions, main_calls=("f",)):
    ops = [op for fn in functions for op in fn]
    main = [{"FnStart": "main"}, *({"Call": c} for c in main_calls), "Return", "FnEnd"]
    return [{"Entry": "main"}, *ops, *main]


def same_behaviour(tir, tasm, runs=8):
    """The returned program and our plain lowering agree on random inputs (output, RAM
    outside the spill region, failure)."""
    base = parse(lower(decode_tir(tir)).text())
    out = parse(tasm)
    rng = random.Random(5)
    for _ in range(runs):
        inp = VmInput(public_input=tuple(rng.randrange(2**64 - 2**32 + 1) for _ in range(8)))
        rb, ro = run(base, inp, measure=False), run(out, inp, measure=False)
        assert (rb.error is None) == (ro.error is None)
        if rb.error is None:
            assert list(rb.public_output) == list(ro.public_output)
        outside = lambda ram: {a: v for a, v in ram.items() if not (2**29 <= a < 2**32)}  # noqa: E731
        assert outside(rb.ram) == outside(ro.ram)
    return out


def fn_lines(result, name):
    return [ln.strip() for f in result.functions if f.name == name for ln in f.tasm]


def test_a_private_round_trip_disappears():
    tir = program(F)
    r = compile_tir(tir, options=OPTS)
    f = next(x for x in r.functions if x.name == "f")
    assert not f.fallback, f.reason
    assert "write_mem 1" not in fn_lines(r, "f") and "read_mem 1" not in fn_lines(r, "f")
    assert f.cycles < f.baseline_cycles
    same_behaviour(tir, r.tasm)


def test_a_cell_another_function_reads_keeps_its_store():
    g = [{"FnStart": "g"}, *LOAD, {"WriteIo": 1}, "Return", "FnEnd"]
    tir = program(F, g, main_calls=("f", "g"))
    r = compile_tir(tir, options=OPTS)
    assert "write_mem 1" in fn_lines(r, "f")
    out = same_behaviour(tir, r.tasm)
    # g prints what f stored: the first input
    res = run(out, VmInput(public_input=(3, 4)), measure=False)
    assert list(res.public_output) == [12, 3]


def test_an_escaped_address_keeps_every_store():
    # h computes a pointer from the scratch base: it could reach f's cell
    h = [
        {"FnStart": "h"},
        {"Push": A - 5},
        {"ReadIo": 1},
        "Add",
        {"ReadMem": 1},
        {"Pop": 1},
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    tir = program(F, h, main_calls=("f", "h"))
    r = compile_tir(tir, options=OPTS)
    assert "write_mem 1" in fn_lines(r, "f")
    out = same_behaviour(tir, r.tasm)
    res = run(out, VmInput(public_input=(3, 4, 5)), measure=False)
    assert list(res.public_output) == [12, 3]  # h read f's spilled 3 at A - 5 + 5


def test_a_reload_after_a_call_keeps_the_store():
    # the reload is in another block (after a call): the store's block does not see it
    k = [{"FnStart": "k"}, "Return", "FnEnd"]
    f2 = [
        {"FnStart": "f"},
        {"ReadIo": 1},
        *STORE,
        {"Call": "k"},
        {"ReadIo": 1},
        *LOAD,
        "Mul",
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    tir = program(k, f2)
    r = compile_tir(tir, options=OPTS)
    assert "write_mem 1" in fn_lines(r, "f")
    same_behaviour(tir, r.tasm)


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_a_ram_accumulator_in_a_loop_keeps_its_store(trips):
    # the loop body reads the cell before writing it: the next iteration needs the value
    body = [*LOAD, {"Push": 3}, "Add", *STORE]
    f = [
        {"FnStart": "f"},
        {"Push": 0},
        *STORE,
        {"ReadIo": 1},
        {"Call": "loop__acc"},
        {"Pop": 1},
        {"Loop": {"label": "loop__acc", "body": body}},
        *LOAD,
        {"WriteIo": 1},
        "Return",
        "FnEnd",
    ]
    tir = program(f)
    r = compile_tir(tir, options=OPTS)
    assert "write_mem 1" in fn_lines(r, "f")
    out = parse(r.tasm)
    res = run(out, VmInput(public_input=(trips,)), measure=False)
    assert res.error is None and list(res.public_output) == [3 * trips]


def test_cache_keys_follow_privacy():
    g = [{"FnStart": "g"}, *LOAD, {"WriteIo": 1}, "Return", "FnEnd"]
    keys = []
    for tir in (program(F), program(F, g, main_calls=("f", "g"))):
        ops = decode_tir(tir)
        low = lower(ops)
        keys.append(function_keys(ops, low, ModuleText.from_lowering(low), None, OPTS)["f"])
    # f's own text and closure are the same; only the privacy of its cell differs
    assert keys[0] != keys[1]
