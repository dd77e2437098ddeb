"""The ``tasmopt`` command line: compile, run, and the help that teaches them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tasmopt.cli import main
from tasmopt.tasm.parser import parse

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


def test_compile_prints_tasm_then_a_cost_table(runner):
    r = runner.invoke(main, ["compile", str(EXAMPLES / "lock_generation.json")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("    call __main")
    table = [ln for ln in r.output.splitlines() if ln.startswith("// ")]
    assert table[0].split()[1:] == [
        "function",
        "source",
        "baseline",
        "cycles",
        "saved",
        "padded",
        "height",
    ]
    assert table[1].split()[1] == "main" and table[2].split()[1] == "total"
    parse(r.output)  # the table is made of comments: stdout is still valid TASM
    # a function that nothing improves gets a note saying why
    r = runner.invoke(main, ["compile", str(EXAMPLES / "std_io_storage.json")])
    assert r.exit_code == 0, r.output
    assert any(ln.startswith("// read: ") for ln in r.output.splitlines())


def test_compile_under_a_deadline_says_what_it_did_not_measure(runner):
    """``--deadline-ms``: a 1 ms deadline returns the baseline unchanged, and the cost table
    says 'not measured' instead of printing zeros; without a terminal no progress bar."""
    r = runner.invoke(
        main, ["compile", str(EXAMPLES / "lock_timelock.json"), "--deadline-ms", "1", "-q"]
    )
    assert r.exit_code == 0, r.output
    assert "not measured" in r.output and "total (1 not measured)" in r.output
    assert "stage/s" not in r.output
    full = runner.invoke(main, ["compile", str(EXAMPLES / "lock_timelock.json")])
    assert "not measured" not in full.output
    bad = runner.invoke(
        main, ["compile", str(EXAMPLES / "lock_timelock.json"), "--deadline-ms", "0"]
    )
    assert bad.exit_code == 2 and "deadline-ms" in bad.output


def test_compile_skips_a_pass_by_name_and_names_the_passes_on_a_typo(runner):
    ok = runner.invoke(main, ["compile", str(EXAMPLES / "lock_timelock.json"), "--skip", "inline"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(main, ["compile", str(EXAMPLES / "lock_timelock.json"), "--skip", "nope"])
    assert bad.exit_code == 2 and "unknown pass nope" in bad.output and "dots" in bad.output


def test_the_optimizer_tells_a_progress_callback_each_stage(add_mul_tir):
    from tasmopt.optimizer import compile as compile_tir
    from tasmopt.optimizer import progress

    seen: list[str] = []
    with progress(seen.append):
        compile_tir(add_mul_tir)
    assert {"lower", "candidates", "verify", "splice", "inline"} <= set(seen)
    told = len(seen)
    compile_tir(add_mul_tir)  # outside the block: nothing more is told
    assert len(seen) == told


def test_compile_bare_tir_to_file_and_json(runner, tmp_path, add_mul_tir):
    src = tmp_path / "f.json"
    src.write_text(json.dumps(add_mul_tir))
    out = tmp_path / "f.tasm"
    r = runner.invoke(main, ["compile", str(src), "-o", str(out), "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("__add_mul:") and r.output.startswith("// ")
    r = runner.invoke(main, ["compile", str(src), "--json"])
    report = json.loads(r.output)
    assert report["functions"][0]["name"] == "add_mul" and "tasm" in report


def test_compile_reports_bad_input(runner, tmp_path, add_mul_tir):
    bad = tmp_path / "bad.json"
    bad.write_text('{"tir": ["Foo"]}')
    r = runner.invoke(main, ["compile", str(bad)])
    assert r.exit_code == 1 and "tir[0]: unknown op 'Foo'" in r.output
    bad.write_text('{"tir": [}')
    r = runner.invoke(main, ["compile", str(bad)])
    assert r.exit_code == 1 and "bad.json:1:" in r.output
    bad.write_text(json.dumps({"tir": add_mul_tir, "options": {"fast": True}}))
    r = runner.invoke(main, ["compile", str(bad)])
    assert r.exit_code == 1 and "unknown option(s) ['fast']" in r.output


def test_run_prints_outputs_cycles_and_heights(runner, tmp_path):
    prog = tmp_path / "p.tasm"
    prog.write_text("    read_io 2\n    add\n    write_io 1\n    halt\n")
    r = runner.invoke(main, ["run", str(prog), "--input", "3,4"])
    assert r.exit_code == 0, r.output
    assert "status: halted" in r.output and "public output: 7" in r.output
    assert "clock cycles: 4" in r.output
    for table in (
        "program",
        "processor",
        "op_stack",
        "ram",
        "jump_stack",
        "hash",
        "u32",
        "cascade",
        "lookup",
    ):
        assert f"  {table} " in r.output
    assert "padded height: 256" in r.output


def test_run_reports_vm_errors(runner, tmp_path):
    prog = tmp_path / "p.tasm"
    prog.write_text("    read_io 1\n    halt\n")
    r = runner.invoke(main, ["run", str(prog)])
    assert r.exit_code == 1 and "status: error: EmptyPublicInput" in r.output
    prog.write_text("    push\n")
    r = runner.invoke(main, ["run", str(prog)])
    assert r.exit_code == 1 and "p.tasm:1:9: 'push' needs an argument" in r.output


@pytest.mark.parametrize("command", ["serve", "compile", "run", "worker"])
def test_help_has_examples(runner, command):
    r = runner.invoke(main, [command, "--help"])
    assert r.exit_code == 0 and "Examples:" in r.output
