"""Load: 2,000 compiles at concurrency 32 from an httpx async client against a real uvicorn on
PostgreSQL: zero 5xx, zero transport errors, zero BuildResults lost. Throughput and
P50/P90/P99 are printed and written to var/load.json (benchmarks/load.py does the work)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import pytest
from opskit import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import load  # noqa: E402  (benchmarks/load.py)

pytestmark = pytest.mark.slow


def test_load_2000_requests_at_concurrency_32(make_stack, pg_database_factory):
    db = pg_database_factory()
    stack = make_stack(db)
    url = stack.start_api()
    report = load.run(url, requests=2000, concurrency=32, database_url=db)
    print("\n[load] " + load.format_report(report))
    (REPO / "var").mkdir(exist_ok=True)
    (REPO / "var" / "load.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
    assert report.status_counts == {"200": 2000}
    assert report.server_errors == 0 and report.transport_errors == 0
    assert report.rows_served >= 2 * (2000 + report.warmup)
    assert report.rows_lost == 0 and report.rows_persisted == report.rows_served
