"""The one-way dependency of design §6: `tasmopt` imports neither the service nor the worker,
nor their frameworks."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import tasmopt


def test_tasmopt_imports_no_service_layer():
    modules = sorted(m.name for m in pkgutil.walk_packages(tasmopt.__path__, "tasmopt."))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted({n.split('.')[0] for n in sys.modules} & "
        "{'service', 'worker', 'fastapi', 'starlette', 'rq', 'uvicorn'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == ""
