"""Fixtures: the real TIR of the Trident standard library (shared/data/trident-std)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

#: Where the 30 modules live; override with TASMOPT_TRIDENT_STD.
STD_DIR = Path(os.environ.get("TASMOPT_TRIDENT_STD", "/work/shared/data/trident-std"))
#: Module names, for parametrization (empty when the data is absent: those tests skip).
STD_MODULES = sorted(p.stem for p in STD_DIR.glob("*.json")) if STD_DIR.is_dir() else []


@pytest.fixture(scope="session")
def trident_std() -> dict[str, dict]:
    """Module name -> its JSON (``tir``, ``compiler_tasm``, ``functions``, ...)."""
    if not STD_MODULES:
        pytest.skip(f"trident-std data not found at {STD_DIR}")
    return {name: json.loads((STD_DIR / f"{name}.json").read_text()) for name in STD_MODULES}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes ``std_module`` runs once per trident-std module."""
    if "std_module" in metafunc.fixturenames:
        params = STD_MODULES or [pytest.param("", marks=pytest.mark.skip(
            reason=f"trident-std data not found at {STD_DIR}"))]
        metafunc.parametrize("std_module", params)
