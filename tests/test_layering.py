"""The layers of design §6, enforced by import-linter (contracts in pyproject.toml,
``[tool.importlinter]``): run here so that the README's test command checks them too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports")
    assert exe is not None, "lint-imports not installed: pip install -e '.[dev]'"
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout.split("Contracts:")[-1]


def test_a_layer_violation_is_caught(tmp_path):
    # the contracts must be able to fail: a core module importing the service breaks them
    planted = ROOT / "tasmopt" / "tir" / "_planted_violation.py"
    planted.write_text("import service.main  # noqa: F401\n")
    try:
        out = subprocess.run(
            [shutil.which("lint-imports") or "lint-imports", "--no-cache"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        planted.unlink()
    assert out.returncode != 0
    assert "tasmopt.tir._planted_violation" in out.stdout
