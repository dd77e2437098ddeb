"""The optimizer's own stages and fallback paths (`tasmopt.optimizer.compile`): candidate
sources are injected and never break a compile, and every way a function falls back says why
and returns exactly what the client (or our lowering) gave."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.triton import lower
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import default_sources
from tasmopt.report import CompileOptions
from tasmopt.sources import SourceSet
from tasmopt.tasm import parse
from tasmopt.tir import codec
from tasmopt.vm import VmInput, run

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CALL = json.loads((EXAMPLES / "call.json").read_text())["tir"]


def _output(tasm: str, inputs: list[int]) -> list[int]:
    # the module text starts with its first function; enter at `main` like the toolchain
    r = run(parse("call __main\nhalt\n" + tasm), VmInput(public_input=inputs))
    assert r.error is None, r.error
    return list(r.public_output)


class Broken:
    name = "model"

    def __init__(self, result=None) -> None:
        self.result = result
        self.calls = 0

    def propose(self, tasks, options):
        self.calls += 1
        if self.result is None:
            raise RuntimeError("the model crashed")
        return self.result


def test_default_sources_are_fresh_and_builtin():
    a, b = default_sources(), default_sources()
    assert set(a.names()) == {"rules", "search"}
    a.add(Broken())
    assert "model" in a.names() and "model" not in b.names()  # no shared registry


def test_a_crashing_or_malformed_source_never_breaks_a_compile():
    reference = compile_tir(CALL, options=CompileOptions(sources=("rules",)))
    for source in (Broken(), Broken(result=[])):  # raises / wrong number of proposals
        result = compile_tir(
            CALL,
            options=CompileOptions(sources=("rules", "model")),
            sources=SourceSet([default_sources().get("rules"), source]),
        )
        assert source.calls == 1
        assert result.tasm == reference.tasm
        assert _output(result.tasm, [3, 4]) == [25]


def test_an_unknown_source_name_is_skipped():
    result = compile_tir(CALL, options=CompileOptions(sources=("model",)), sources=SourceSet())
    assert all(f.source == "compiler" for f in result.functions)
    assert result.tasm.strip() == lower(codec.decode(CALL)).text().strip()


def test_client_baseline_missing_a_function_is_passed_through():
    unused = [{"FnStart": "unused"}, {"Push": 1}, {"Pop": 1}, "Return", "FnEnd"]
    client = lower(codec.decode(CALL)).text()  # the client's module lacks `unused`
    result = compile_tir(CALL + unused, client, options=CompileOptions(sources=("rules",)))
    f = next(f for f in result.functions if f.name == "unused")
    assert f.fallback and f.mismatch is not None and "missing from baseline_tasm" in f.reason
    assert _output(result.tasm, [3, 4]) == [25]


def test_client_baseline_that_does_not_assemble_is_an_error():
    client = lower(codec.decode(CALL)).text()
    cut = client[: client.index("__sum_of_squares:")] + client[client.index("    call __main") :]
    with pytest.raises(TasmSyntaxError, match="undefined label '__sum_of_squares'"):
        compile_tir(CALL, cut, options=CompileOptions(sources=("rules",)))


def test_client_baseline_that_disagrees_is_returned_as_sent():
    client = lower(codec.decode(CALL)).text().replace("    mul\n", "    add\n", 1)
    assert "add" in client
    result = compile_tir(CALL, client, options=CompileOptions(sources=("rules", "search")))
    square = next(f for f in result.functions if f.name == "square")
    assert square.fallback and square.source == "client"
    assert square.mismatch is not None or "could not be proven" in (square.reason or "")
    # the client's (different) program is what comes back, never ours
    assert _output(result.tasm, [3, 4]) == _output(client, [3, 4])


def test_unlowerable_tir_falls_back_with_the_reason():
    tir = [{"Entry": "main"}, {"FnStart": "main"}, {"Push": 1}, {"Pop": 0}, "Return", "FnEnd"]
    result = compile_tir(tir, options=CompileOptions(sources=("rules",)))
    main = next(f for f in result.functions if f.name == "main")
    assert main.fallback and "cannot be lowered" in main.reason
