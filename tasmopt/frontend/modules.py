"""Module resolution: find, lex and parse every module a Trident entry file reaches, and
order them dependencies first (spec/trident-language.md §2.2).

``use a.b.c`` is looked up as ``os/<os>/rest.tri``, ``vm/rest.tri`` or ``std/rest.tri``
under each library root (the search path, then the root implied by the entry's own module
name), or as ``a/b/c.tri`` relative to the entry file's directory, then to each root.
Imports come from the parsed tree (not a line scanner); an imported file's header must name
its import path (CF).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tasmopt.errors import FrontendError
from tasmopt.frontend import ast as A
from tasmopt.frontend.lexer import tokenize
from tasmopt.frontend.parser import parse_tokens
from tasmopt.frontend.source import Diagnostics, Source

__all__ = ["ModuleUnit", "load_project", "parse_source", "read_entry"]


@dataclass
class ModuleUnit:
    """One parsed module of a project.

    Attributes:
        name: dotted module name (the entry's header name, or its import path).
        path: the file, or None for in-memory source.
        source: text and diagnostics name.
        ast: the parsed file.
        deps: dotted names of the modules its ``use`` lines import, in order.
    """

    name: str
    path: Path | None
    source: Source
    ast: A.File
    deps: list[str]


def parse_source(source: Source) -> A.File:
    """Lex and parse one file; raises `FrontendError` with all lexer errors (then stops), or
    all parser errors."""
    diags = Diagnostics(source)
    tokens = tokenize(source, diags)
    diags.raise_if_any()
    tree = parse_tokens(tokens, diags)
    diags.raise_if_any()
    assert tree is not None
    return tree


def _implied_root(path: Path, name: str) -> Path | None:
    parts = name.split(".")
    stem = path.with_suffix("")
    if len(stem.parts) > len(parts) and list(stem.parts[-len(parts) :]) == parts:
        return Path(*stem.parts[: -len(parts)])
    return None


class _Loader:
    def __init__(self, entry_dir: Path, roots: list[Path]) -> None:
        self.entry_dir = entry_dir
        self.roots = roots
        self.units: dict[str, ModuleUnit] = {}

    def candidates(self, segs: tuple[str, ...]) -> list[Path]:
        out: list[Path] = []
        roots = [*self.roots, self.entry_dir]
        if segs[0] == "os" and len(segs) >= 3:
            out += [
                r / "os" / segs[1] / Path(*segs[2:]).with_suffix(".tri")
                for r in roots
                if (r / "os" / segs[1]).is_dir()
            ]
        if segs[0] in ("vm", "std", "os") and len(segs) >= 2:
            out += [r / segs[0] / Path(*segs[1:]).with_suffix(".tri") for r in roots]
        out += [r / Path(*segs).with_suffix(".tri") for r in [self.entry_dir, *self.roots]]
        seen: list[Path] = []
        for p in out:
            if p not in seen:
                seen.append(p)
        return seen

    def load(self, unit: ModuleUnit) -> None:
        self.units[unit.name] = unit
        for use in unit.ast.uses:
            name = use.dotted
            if name in self.units:
                continue
            found = self.find(use, unit)
            source = Source(str(found), found.read_text(encoding="utf-8", errors="replace"))
            tree = parse_source(source)
            if tree.kind != "module" or tree.name != name:
                what = "a program" if tree.kind == "program" else f"module '{tree.name}'"
                raise source.error(
                    f"'{found}' declares {what}, but is imported as module '{name}'",
                    tree.name_pos,
                    help=f"the header must read: module {name}",
                )
            self.load(ModuleUnit(name, found, source, tree, [u.dotted for u in tree.uses]))

    def find(self, use: A.Use, unit: ModuleUnit) -> Path:
        segs = use.path
        tried = self.candidates(segs)
        for path in tried:
            if path.is_file():
                return path
        shown = ", ".join(f"'{p}'" for p in tried[:4])
        raise unit.source.error(f"cannot find module '{use.dotted}' (looked at {shown})", use.pos)

    def order(self, entry: str) -> list[ModuleUnit]:
        """Post-order DFS from every module name in sorted order (deps in ``use`` order)."""
        done: set[str] = set()
        active: list[str] = []
        out: list[ModuleUnit] = []

        def visit(name: str, via: tuple[ModuleUnit, A.Use] | None) -> None:
            if name in done:
                return
            if name in active:
                assert via is not None
                unit, use = via
                cycle = " -> ".join([*active[active.index(name) :], name])
                raise unit.source.error(
                    f"circular dependency detected involving module '{name}' ({cycle})", use.pos
                )
            active.append(name)
            unit = self.units[name]
            for use in unit.ast.uses:
                visit(use.dotted, (unit, use))
            active.pop()
            done.add(name)
            out.append(unit)

        for name in sorted(self.units, key=lambda s: s.encode()):
            visit(name, None)
        assert out[-1].name == entry or entry not in done
        return out


def load_project(
    entry: Source, entry_path: Path | None, search_path: Sequence[str | Path] = ()
) -> list[ModuleUnit]:
    """Parse ``entry`` and every module it reaches; dependencies first, the entry last.

    Raises:
        FrontendError: lexer/parser errors of the first failing module; cannot find module
            (with the paths tried); circular dependency; header name differs from the import
            path (spec §2.2, §9 "resolve").
    """
    tree = parse_source(entry)
    entry_dir = entry_path.parent if entry_path is not None else Path.cwd()
    roots = [Path(p) for p in search_path]
    if entry_path is not None and tree.kind == "module":
        implied = _implied_root(entry_path, tree.name)
        if implied is not None and implied not in roots:
            roots.append(implied)
    if entry_path is None and not search_path:
        roots.append(Path.cwd())
    loader = _Loader(entry_dir if entry_path is not None or not roots else roots[0], roots)
    loader.load(ModuleUnit(tree.name, entry_path, entry, tree, [u.dotted for u in tree.uses]))
    return loader.order(tree.name)


def read_entry(path: str | Path) -> tuple[Source, Path]:
    """The entry file as a `Source`. Raises `FrontendError` if it cannot be read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise FrontendError(f"cannot read entry file: {exc.strerror or exc}", str(p)) from None
    return Source(str(p), text), p
