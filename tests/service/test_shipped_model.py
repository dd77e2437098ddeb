"""The embedded default serves the checkpoint shipped in `model_store/`: it is registered and
promoted at start, loaded through the real loader, and `/compile` reports which candidates
came from the model, the search and the rules."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (ROOT / "model_store").glob("*/model.safetensors"))

pytestmark = pytest.mark.skipif(not SHIPPED, reason="no checkpoint in model_store/")


def test_embedded_service_serves_the_shipped_checkpoint(make_client, tmp_path):
    client = make_client(
        database_url=f"sqlite:///{tmp_path / 'embedded.db'}",
        model_store=ROOT / "model_store",
        admin_token=None,
    )
    request = json.loads((ROOT / "examples" / "u32_ops.json").read_text())
    request["options"] = {"sources": ["rules", "search", "model"]}
    deadline = time.monotonic() + 120
    while True:  # the watcher loads the checkpoint in the background
        r = client.post("/compile", json=request)
        assert r.status_code == 200, r.text
        out = r.json()
        if out.get("model_version") or time.monotonic() > deadline:
            break
        time.sleep(1)
    versions = {p.parent.name for p in SHIPPED}
    assert out["model_version"] in versions
    generated = {
        src
        for f in out["functions"]
        for b in f["blocks"]
        for src, st in b["candidates"].items()
        if st["generated"]
    }
    assert {"rules", "search", "model"} <= generated, generated
    fn = out["functions"][0]
    assert fn["cycles"] <= fn["baseline_cycles"]
