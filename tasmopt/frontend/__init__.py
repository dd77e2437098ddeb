"""Trident frontend: ``.tri`` source to TIR (spec/trident-language.md), shaped like the
Trident toolchain's own builder + optimizer output but correct where that builder is not.

Pipeline per project: resolve and parse every reachable module (`modules`), then per module
in dependency order: check (`checker`, `check_body`), build (`builder`, `build_expr`,
`stack`), optimize (`optimize`, tir.md §4 without its unsound rewrites). The project TIR is
the concatenation, dependencies first, as upstream ``build_tir_project`` (tir.md §7.1).
Labels stay module-local (``f``, ``loop__1``, ``@std_x__f`` for cross-module calls); `link`
makes one executable op list out of the modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tasmopt.errors import FrontendError
from tasmopt.frontend.builder import build_module
from tasmopt.frontend.checker import check_module
from tasmopt.frontend.modules import load_project, read_entry
from tasmopt.frontend.optimize import optimize
from tasmopt.frontend.source import Source
from tasmopt.frontend.stack import Allocator
from tasmopt.frontend.symbols import ModuleEnv
from tasmopt.tir.ops import Op

__all__ = [
    "FrontendError",
    "ModuleTir",
    "compile_project",
    "compile_source",
    "compile_modules",
    "link",
    "optimize",
]


@dataclass(frozen=True)
class ModuleTir:
    """One module's optimized TIR (``kind`` is ``"program"`` or ``"module"``)."""

    name: str
    kind: str
    ops: tuple[Op, ...]


def _compile(
    entry: Source,
    path: Path | None,
    search_path: Sequence[str | Path],
    optimized: bool,
    spill: str = "lru",
) -> list[ModuleTir]:
    alloc = Allocator(policy=spill)
    units = load_project(entry, path, search_path)
    loaded: dict[str, ModuleEnv] = {}
    out: list[ModuleTir] = []
    for unit in units:
        env = check_module(unit, loaded)
        loaded[unit.name] = env
        ops = build_module(env, alloc)
        out.append(ModuleTir(unit.name, unit.ast.kind, optimize(ops) if optimized else tuple(ops)))
    return out


def compile_modules(
    entry: str | Path,
    search_path: Sequence[str | Path] = (),
    *,
    optimized: bool = True,
    spill: str = "lru",
) -> list[ModuleTir]:
    """Per-module TIR of the entry file and every module it imports, dependencies first.

    ``spill`` is the builder's spill policy past 16 live elements: ``"lru"`` (upstream's
    shape, the default) or ``"next-use"`` (furthest next use first, dead variables dropped
    instead of stored; `tasmopt.frontend.stack`).

    Raises:
        FrontendError: the diagnostics of the first module that fails to resolve, lex,
            parse, type-check or build (spec §9).
        ValueError: an unknown ``spill`` policy.
    """
    source, path = read_entry(entry)
    return _compile(source, path, search_path, optimized, spill)


def compile_project(entry: str | Path, search_path: Sequence[str | Path] = ()) -> tuple[Op, ...]:
    """Optimized TIR of the entry file and every module it imports, dependencies first
    (like ``build_tir_project``, spec/tir.md §7.1).

    Args:
        entry: the ``.tri`` file (a ``program`` or a ``module``).
        search_path: library roots holding ``std/``, ``vm/``, ``os/`` and other modules;
            the entry's directory is searched first for non-library modules.

    Raises:
        FrontendError: ``file:line:col`` diagnostics of the first failing module.
    """
    return tuple(op for m in compile_modules(entry, search_path) for op in m.ops)


def compile_source(
    text: str,
    name: str = "<source>",
    search_path: Sequence[str | Path] = (),
    *,
    optimized: bool = True,
    spill: str = "lru",
) -> tuple[Op, ...]:
    """`compile_project` for source text; ``name`` is used in diagnostics, imports resolve
    against ``search_path`` (its first directory stands in for the entry's directory).
    ``optimized=False`` gives the raw builder TIR (spec §10 shapes); ``spill`` as in
    `compile_modules`."""
    mods = _compile(Source(name, text), None, search_path, optimized, spill)
    return tuple(op for m in mods for op in m.ops)


def link(modules: Sequence[ModuleTir]) -> tuple[Op, ...]:
    """One op list with globally unique labels, runnable after lowering: every function,
    loop and call label of module ``a.b`` gets the prefix ``a_b__`` (cross-module calls
    ``@a_b__f`` become ``a_b__f``), as the upstream linker does for TASM (tir.md §3.10).
    The program's ``Entry`` comes first."""
    body: list[Op] = []
    entry: list[Op] = []
    for m in modules:
        prefix = m.name.replace(".", "_") + "__"
        for op in _relabel(m.ops, prefix):
            (entry if op.kind in ("Entry",) else body).append(op)
    return tuple(entry + body)


def _relabel(ops: Sequence[Op], prefix: str) -> list[Op]:
    out = []
    for op in ops:
        if op.kind in ("FnStart", "Entry"):
            op = Op(op.kind, prefix + str(op.value))
        elif op.kind == "Call":
            label = str(op.value)
            op = Op("Call", label[1:] if label.startswith("@") else prefix + label)
        elif op.kind == "Loop":
            op = Op(
                "Loop",
                fields=(
                    ("label", prefix + op.get("label")),
                    ("body", tuple(_relabel(op.get("body"), prefix))),
                ),
            )
        elif op.bodies:
            op = op.replace_bodies(**{k: tuple(_relabel(b, prefix)) for k, b in op.bodies})
        out.append(op)
    return out
