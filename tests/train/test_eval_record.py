"""`tasmopt eval --record` stores the figures the service's learning phase reads, so it
refuses a decoding the service does not use (and says which option differs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tasmopt.cli import main
from tasmopt.model.config import SERVICE_BEAMS

CHECKPOINT = Path(__file__).resolve().parents[2] / "model_store" / "s1-corpus-v1"


@pytest.mark.parametrize(
    ("env", "extra", "named"),
    [
        ({}, ["--k", str(SERVICE_BEAMS * 2)], "--k"),
        ({"MODEL_BEAMS": "8"}, ["--k", str(SERVICE_BEAMS)], "--k"),
        ({}, ["--samples", "8"], "--samples"),
        ({"MODEL_SAMPLES": "8"}, [], "--samples"),
        ({"MODEL_SAMPLES": "8", "MODEL_TEMPERATURE": "1.5"}, ["--samples", "8"], "--temperature"),
    ],
)
def test_record_refuses_a_decoding_the_service_does_not_use(
    tmp_path, monkeypatch, env, extra, named
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    res = CliRunner().invoke(
        main,
        ["eval", "--checkpoint", str(CHECKPOINT), "--data", str(tmp_path), "--record", *extra],
    )
    assert res.exit_code == 2, res.output
    assert "decode as the service does" in res.output and named in res.output
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize(
    ("env", "extra"), [({}, []), ({"MODEL_BEAMS": "8"}, []), ({"MODEL_BEAMS": "8"}, ["--k", "8"])]
)
def test_record_accepts_the_service_decoding(tmp_path, monkeypatch, env, extra):
    """The defaults are the service's decoding (--k defaults to MODEL_BEAMS): the check lets
    them through (the empty pairs directory then fails for its own reason)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    res = CliRunner().invoke(
        main,
        ["eval", "--checkpoint", str(CHECKPOINT), "--data", str(tmp_path), "--record", *extra],
    )
    assert res.exit_code != 0
    assert "decode as the service does" not in res.output
