"""Files, modules and resolution (spec/trident-language.md §2): the std./vm./os. prefixes
under library roots, local modules next to the entry, dependency order, names across
modules, and the resolve errors (missing module, cycle, header mismatch)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from frontend_util import FIXTURES, LIB, functions, show

from tasmopt.errors import FrontendError
from tasmopt.frontend import compile_modules, compile_project, compile_source


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_project_order_and_shape_spec_10_20():
    mods = compile_modules(FIXTURES / "app" / "main.tri", [LIB])
    # DFS from main_app (sorted first) visits its uses in order; vm.io.io contributes
    # nothing (bodiless intrinsics); dependencies first, entry last
    assert [m.name for m in mods] == ["vm.io.io", "util.mathx", "main_app"]
    assert mods[0].ops == ()
    ops = compile_project(FIXTURES / "app" / "main.tri", [LIB])
    main = functions(ops)["main"]
    assert show(main) == (
        "ReadIo(1) Dup(0) Call(@util_mathx__triple) Dup(0) Dup(2) Add WriteIo(1) Pop(2)"
    )


def test_entry_comes_after_dependencies_and_before_program_functions():
    ops = compile_project(FIXTURES / "app" / "main.tri", [LIB])
    kinds = [(op.kind, op.value) for op in ops if op.kind in ("FnStart", "Entry")]
    assert kinds == [
        ("FnStart", "triple"),
        ("FnStart", "divmod"),
        ("Entry", "main"),
        ("FnStart", "main"),
    ]


def test_std_vm_os_prefixes_resolve_under_the_library_root():
    mods = compile_modules(LIB / "os" / "neptune" / "kernel" / "meta.tri")
    # the root is implied by the entry's own module name (os.neptune.kernel.meta)
    assert [m.name for m in mods] == [
        "vm.io.io",
        "vm.crypto.hash",
        "vm.core.assert",
        "std.crypto.auth",
        "os.neptune.kernel.meta",
    ]


def test_dfs_from_sorted_names_postorder(tmp_path):
    write(
        tmp_path,
        {
            "main.tri": "program main\nuse zeta\nuse alpha\nfn main() { }",
            "zeta.tri": "module zeta\nuse beta\npub fn z() { }",
            "alpha.tri": "module alpha\npub fn a() { }",
            "beta.tri": "module beta\nuse alpha\npub fn b() { }",
        },
    )
    mods = compile_modules(tmp_path / "main.tri")
    assert [m.name for m in mods] == ["alpha", "beta", "zeta", "main"]


def test_missing_module_names_the_paths_tried(tmp_path):
    write(tmp_path, {"main.tri": "program main\nuse std.nothing.here\nfn main() { }"})
    with pytest.raises(FrontendError) as info:
        compile_project(tmp_path / "main.tri", [LIB])
    err = info.value
    assert (err.file, err.line, err.col) == (str(tmp_path / "main.tri"), 2, 1)
    assert err.message.startswith("cannot find module 'std.nothing.here' (looked at ")
    assert str(LIB / "std" / "nothing" / "here.tri") in err.message


def test_circular_dependency(tmp_path):
    write(
        tmp_path,
        {
            "main.tri": "program main\nuse a\nfn main() { }",
            "a.tri": "module a\nuse b\npub fn f() { }",
            "b.tri": "module b\n\nuse a\npub fn g() { }",
        },
    )
    with pytest.raises(FrontendError) as info:
        compile_project(tmp_path / "main.tri")
    err = info.value
    assert "circular dependency detected involving module 'a'" in err.message
    assert (Path(err.file).name, err.line, err.col) == ("b.tri", 3, 1)


def test_header_must_match_import_path(tmp_path):
    write(
        tmp_path,
        {
            "main.tri": "program main\nuse lib.x\nfn main() { }",
            "lib/x.tri": "module lib.y\npub fn f() { }",
        },
    )
    with pytest.raises(FrontendError) as info:
        compile_project(tmp_path / "main.tri")
    assert (Path(info.value.file).name, info.value.line, info.value.col) == ("x.tri", 1, 8)
    assert "imported as module 'lib.x'" in info.value.message


def test_importing_a_program_is_an_error(tmp_path):
    write(
        tmp_path,
        {
            "main.tri": "program main\nuse other\nfn main() { }",
            "other.tri": "program other\nfn main() { }",
        },
    )
    with pytest.raises(FrontendError, match="declares a program"):
        compile_project(tmp_path / "main.tri")


def test_unreadable_entry():
    with pytest.raises(FrontendError, match="cannot read entry file"):
        compile_project("/nonexistent/x.tri")


def test_stop_at_first_failing_module(tmp_path):
    write(
        tmp_path,
        {
            "main.tri": "program main\nuse a\nfn main() { let x: U32 = 1 }",
            "a.tri": "module a\npub fn f() -> Field { 1 - 1 }",
        },
    )
    with pytest.raises(FrontendError) as info:
        compile_project(tmp_path / "main.tri")
    assert Path(info.value.file).name == "a.tri" and len(info.value.errors) == 1


def test_alias_is_the_last_segment_and_collisions_are_errors(tmp_path):
    write(
        tmp_path,
        {
            "x/m.tri": "module x.m\npub fn f() -> Field { 1 }",
            "y/m.tri": "module y.m\npub fn f() -> Field { 2 }",
        },
    )
    src = "program p\nuse x.m\nuse y.m\nfn main() { pub_write(m.f()) }"
    with pytest.raises(FrontendError, match="'m' is imported twice"):
        compile_source(src, "p.tri", [tmp_path])


def test_full_module_path_and_constants_across_modules(tmp_path):
    write(
        tmp_path,
        {
            "lib/k.tri": "module lib.k\npub const K: Field = 42\nconst H: Field = 1\n"
            "pub fn f() -> Field { K }"
        },
    )
    src = "program p\nuse lib.k\nfn main() { pub_write(k.K)\n pub_write(lib.k.f()) }"
    ops = compile_source(src, "p.tri", [tmp_path])
    assert show(functions(ops)["main"]) == "Push(42) WriteIo(1) Call(@lib_k__f) WriteIo(1)"
    with pytest.raises(FrontendError, match="undefined variable 'k.H'"):
        compile_source(src.replace("k.K", "k.H"), "p.tri", [tmp_path])


def test_private_function_is_not_exported(tmp_path):
    write(tmp_path, {"lib/k.tri": "module lib.k\nfn hidden() -> Field { 1 }"})
    src = "program p\nuse lib.k\nfn main() { pub_write(k.hidden()) }"
    with pytest.raises(FrontendError, match="'hidden' is private in module 'lib.k'"):
        compile_source(src, "p.tri", [tmp_path])


def test_transitive_visibility_warns(tmp_path, caplog):
    # spec §2.3: `c.x` for a loaded module this file does not `use`: a warning, not an error
    write(
        tmp_path,
        {
            "lib/a.tri": "module lib.a\npub fn one() -> Field { 1 }",
            "lib/b.tri": "module lib.b\nuse lib.a\npub fn two() -> Field { a.one() }",
            "lib/c.tri": "module lib.c\nuse lib.b\npub fn three() -> Field { b.two() + a.one() }",
        },
    )
    with caplog.at_level(logging.WARNING, logger="tasmopt.frontend"):
        ops = compile_project(tmp_path / "lib" / "c.tri")
    assert "Call(@lib_a__one)" in show(functions(ops)["three"])
    assert any("module 'a' used without `use`" in r.getMessage() for r in caplog.records)


def test_struct_across_modules_with_real_width(tmp_path):
    # B1/B5: an imported struct is 3 wide; the call result is modelled 3 wide
    ops = compile_source(
        "program p\nuse std.math.poly\nfn main() {\n"
        "    let q = poly.Quad { a: 1, b: 2, c: 3 }\n"
        "    let d = poly.derive(q)\n"
        "    pub_write(poly.eval(d, 5))\n}",
        "p.tri",
        [LIB],
    )
    assert show(functions(ops)["main"]) == (
        "Push(1) Push(2) Push(3) Dup(2) Dup(2) Dup(2) Call(@std_math_poly__derive) "
        "Dup(2) Dup(2) Dup(2) Push(5) Call(@std_math_poly__eval) WriteIo(1) Pop(5) Pop(1)"
    )


def test_intrinsic_only_in_library_modules(tmp_path):
    err = pytest.raises(
        FrontendError, compile_source, "module mine\n#[intrinsic(pub_read)]\npub fn r() -> Field"
    ).value
    assert (err.line, err.col) == (2, 1) and "only allowed in std., vm., os." in err.message
