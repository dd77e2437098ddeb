"""Helpers for the frontend tests: compile snippets, render TIR compactly, run programs and
single functions in the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasmopt.errors import FrontendError
from tasmopt.frontend import compile_modules, compile_source, link
from tasmopt.lower.triton import lower
from tasmopt.tasm.parser import parse
from tasmopt.tir.ops import Op
from tasmopt.vm.simulator import VmInput, VmResult, run

FIXTURES = Path(__file__).parent / "fixtures"
LIB = FIXTURES / "lib"
P = 2**64 - 2**32 + 1
#: 16 recognisable words under a function's arguments (the VM's minimum stack).
FILLER = [1000 + i for i in range(16)]


def show(ops) -> str:
    """``Dup(1) Dup(1) Mul ...``; nested bodies as ``IfElse[a | b]``, ``Loop[...]``."""
    out = []
    for op in ops:
        if op.kind == "IfElse":
            out.append(f"IfElse[{show(op.get('then_body'))} | {show(op.get('else_body'))}]")
        elif op.kind == "IfOnly":
            out.append(f"IfOnly[{show(op.get('then_body'))}]")
        elif op.kind == "Loop":
            out.append(f"Loop({op.get('label')})[{show(op.get('body'))}]")
        elif op.kind in ("Hash", "RamRead", "RamWrite"):
            out.append(f"{op.kind}{{{op.get('width')}}}")
        elif op.kind in ("Reveal", "Seal"):
            out.append(f"{op.kind}{{{op.get('name')},{op.get('tag')},{op.get('field_count')}}}")
        elif op.kind == "Asm":
            out.append(f"Asm{{{';'.join(op.get('lines'))},{op.get('effect')}}}")
        elif op.value is not None:
            out.append(f"{op.kind}({op.value})")
        else:
            out.append(op.kind)
    return " ".join(out)


def functions(ops) -> dict[str, list[Op]]:
    """Function name -> its ops between FnStart and ``Return, FnEnd`` (both excluded)."""
    out: dict[str, list[Op]] = {}
    cur: list[Op] | None = None
    for op in ops:
        if op.kind == "FnStart":
            cur = out.setdefault(str(op.value), [])
        elif op.kind == "FnEnd":
            assert cur is not None and cur[-1].kind == "Return"
            cur.pop()
            cur = None
        elif cur is not None:
            cur.append(op)
    return out


def raw(src: str, fn: str | None = None, search_path=()) -> str:
    """Raw builder TIR (no optimizer) of a ``module t`` snippet, one function, as text."""
    if not src.lstrip().startswith(("module", "program")):
        src = "module t\n" + src
    fns = functions(compile_source(src, "t.tri", search_path, optimized=False))
    return show(fns[fn] if fn else next(iter(fns.values())))


def opt(src: str, fn: str | None = None, search_path=()) -> str:
    """Like `raw`, after the optimizer."""
    if not src.lstrip().startswith(("module", "program")):
        src = "module t\n" + src
    fns = functions(compile_source(src, "t.tri", search_path))
    return show(fns[fn] if fn else next(iter(fns.values())))


def error_of(src: str, name: str = "t.tri", search_path=()) -> FrontendError:
    with pytest.raises(FrontendError) as info:
        compile_source(src, name, search_path)
    return info.value


def run_ops(ops, public=(), secret=(), ram=None, step_limit=200_000) -> VmResult:
    """Lower and run a program's TIR (it starts with ``call __main; halt``)."""
    low = lower(ops)
    assert not any(f.unlowerable for f in low.functions), [f.unlowerable for f in low.functions]
    prog = parse(low.text())
    return run(
        prog,
        VmInput(public_input=list(public), secret_input=list(secret), ram=dict(ram or {})),
        step_limit=step_limit,
    )


def run_program(src: str, public=(), secret=(), search_path=(LIB,), ram=None) -> list[int]:
    """Compile a ``program`` snippet (with its imports, linked), run it, return its public
    output; the run must halt without error."""
    mods = _modules_of(src, search_path)
    res = run_ops(link(mods), public, secret, ram)
    assert res.error is None, res.error
    return list(res.public_output)


def _modules_of(src: str, search_path):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prog.tri"
        path.write_text(src)
        return compile_modules(path, search_path)


def call_fn(
    src: str, fn: str, args=(), public=(), secret=(), ram=None, search_path=(LIB,)
) -> VmResult:
    """Run function ``fn`` of a ``module t`` snippet on ``FILLER + args`` (bottom..top)."""
    if not src.lstrip().startswith(("module", "program")):
        src = "module t\n" + src
    mods = _modules_of(src, search_path)
    low = lower(link(mods))
    label = "__" + mods[-1].name.replace(".", "_") + "__" + fn
    prog = parse("\n".join([f"    call {label}", "    halt", *low.lines]))
    return run(
        prog,
        VmInput(
            public_input=list(public),
            secret_input=list(secret),
            ram=dict(ram or {}),
            initial_stack=FILLER + [a % P for a in args],
        ),
        step_limit=200_000,
    )


def returns(res: VmResult) -> list[int]:
    """The values a function left above FILLER (the rest of the stack must be intact)."""
    assert res.error is None, res.error
    assert res.stack[:16] == FILLER, res.stack
    return res.stack[16:]
