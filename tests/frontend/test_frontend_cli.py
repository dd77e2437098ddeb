"""The frontend on the command line: ``tasmopt tir FILE.tri`` and ``tasmopt compile
FILE.tri`` (dispatch on the suffix), with diagnostics and exit status 1 on errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from frontend_util import FIXTURES, LIB

from tasmopt.cli import main
from tasmopt.tasm.parser import parse
from tasmopt.tir.codec import decode

APP = FIXTURES / "app" / "main.tri"


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


def test_tir_prints_the_project_tir_as_json(runner):
    r = runner.invoke(main, ["tir", str(APP), "-I", str(LIB)])
    assert r.exit_code == 0, r.output
    ops = decode(json.loads(r.stdout))
    assert [str(op.value) for op in ops if op.kind == "FnStart"] == ["triple", "divmod", "main"]
    assert {"Call": "@util_mathx__triple"} in json.loads(r.stdout)


def test_tir_linked_has_unique_labels(runner):
    r = runner.invoke(main, ["tir", str(APP), "--include", str(LIB), "--linked", "--indent", "1"])
    assert r.exit_code == 0, r.output
    tir = json.loads(r.stdout)
    assert tir[0] == {"Entry": "main_app__main"}
    assert {"Call": "util_mathx__triple"} in tir


def test_compile_tri_prints_tasm_and_cost_table(runner):
    r = runner.invoke(main, ["compile", str(APP), "-I", str(LIB), "--budget", "0"])
    assert r.exit_code == 0, r.output
    tasm = "\n".join(ln for ln in r.stdout.splitlines() if not ln.startswith("//"))
    parse(tasm)
    assert tasm.startswith("    call __main_app__main")
    table = [ln for ln in r.stdout.splitlines() if ln.startswith("// ")]
    assert table[0].split()[1:3] == ["function", "source"]
    assert any(ln.split()[1] == "total" for ln in table)


@pytest.mark.parametrize("command", ["tir", "compile"])
def test_errors_print_the_diagnostic_and_exit_1(runner, tmp_path, command):
    bad = tmp_path / "bad.tri"
    bad.write_text("program bad\nfn main() {\n    let x = 1 - 2\n}\n")
    r = runner.invoke(main, [command, str(bad)])
    assert r.exit_code == 1
    assert r.stderr.startswith(
        f"{bad}:3:15: error: there is no subtraction operator '-'\n"
        "      let x = 1 - 2\n                ^"
    )
    assert "Traceback" not in r.output


def test_compile_json_still_works(runner, tmp_path):
    req = tmp_path / "f.json"
    req.write_text(json.dumps([{"FnStart": "f"}, {"Push": 1}, {"Pop": 1}, "Return", "FnEnd"]))
    r = runner.invoke(main, ["compile", str(req), "--budget", "0"])
    assert r.exit_code == 0, r.output
    assert "__f:" in r.stdout


def test_spill_policy_option(runner, tmp_path):
    """``--spill next-use`` (the default of ``compile``) drops a dead value that ``lru``
    (the default of ``tir``, upstream's shape) stores to the spill region."""
    src = tmp_path / "p.tri"
    lets = "\n".join(f"    let v{i} = pub_read()" for i in range(16))
    total = " + ".join(f"v{i}" for i in range(16))
    src.write_text(
        f"program p\nfn main() {{\n    let d = pub_read()\n    pub_write(d)\n{lets}\n"
        f"    pub_write({total})\n}}\n"
    )
    writes = {}
    for spill in ("lru", "next-use"):
        r = runner.invoke(main, ["tir", str(src), "--spill", spill])
        assert r.exit_code == 0, r.output
        writes[spill] = sum(1 for op in json.loads(r.stdout) if op == {"WriteMem": 1})
    assert writes["lru"] > writes["next-use"]
    r = runner.invoke(main, ["tir", str(src), "--spill", "belady"])
    assert r.exit_code == 2 and "next-use" in r.output
    r = runner.invoke(main, ["compile", "--help"])
    assert "--spill [lru|next-use]" in r.output and "next-use" in r.output
