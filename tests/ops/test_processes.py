"""The production processes, started natively the way docker-compose.yml starts them: the
migration, uvicorn, two RQ workers and the scheduler, on the machine's PostgreSQL and Redis,
driven over HTTP: a compile verified by the workers, an async job, a checkpoint registered
with the CLI and promoted through the admin API, the scheduled finetune check, and metrics
scraped from the API and from each worker (every dashboard query answered)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from opskit import (
    AUTH,
    REPO,
    dashboard_exprs,
    exposition_names,
    promql_metric_names,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@pytest.mark.slow
def test_native_stack(
    make_stack,
    pg_database_factory,
    redis_url,
    redis_conn,
    timelock_request,
    make_checkpoint,
    tmp_path,
):
    stack = make_stack(
        pg_database_factory(migrate=False),
        redis_url,
        VERIFY_DEADLINE_S="20",
        VERIFY_HARD_DEADLINE_S="30",
        # the first compile of a fresh stack answers in full (the 200 ms default would return
        # the baseline and deepen it in the background: tests/service/test_cache_service.py)
        DEFAULT_DEADLINE_MS="20000",
    )
    stack.migrate()  # compose: the migrate service, before api and workers
    stack.start_worker("worker1")
    stack.start_worker("worker2")
    stack.start_scheduler(interval_s=1)
    api = stack.start_api(MIGRATE_ON_START="false")
    http = httpx.Client(base_url=api, timeout=60)

    ready = http.get("/readyz").json()
    assert ready["ready"] and ready["redis"]["ok"] and ready["schema_revision"] == "0005"

    out = http.post("/compile", json=timelock_request).json()
    assert out["cycles"] < out["baseline_cycles"] and out["stored"] == "database"

    accepted = http.post("/compile/jobs", json=timelock_request).json()
    assert accepted["backend"] == "rq"
    assert wait_for(
        lambda: http.get(accepted["status_url"]).json()["status"] == "finished", timeout_s=60
    ), http.get(accepted["status_url"]).text
    job = http.get(accepted["status_url"]).json()
    assert job["result"]["tasm"] == out["tasm"]

    # a checkpoint registered with the CLI, promoted through the admin API
    directory = make_checkpoint("v1", store=tmp_path / "store")
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "tasmopt.cli",
            "checkpoint",
            "register",
            str(directory),
            "--reason",
            "first model",
        ],
        cwd=REPO,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0 and cli.stdout.startswith("v1: candidate"), cli.stderr
    r = http.post("/admin/checkpoints/v1/promote", json={"reason": "go live"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["production"]["version"] == "v1"
    phase = http.get("/admin/phase", headers=AUTH).json()
    assert phase["production"]["version"] == "v1"
    actions = http.get("/admin/actions", headers=AUTH).json()
    assert [(a["action"], a["actor"]) for a in actions[:2]] == [
        ("promote", "admin"),
        ("register", f"cli:{__import__('getpass').getuser()}"),
    ]

    # the scheduler enqueues the finetune check; a worker runs it
    assert wait_for(
        lambda: (
            (http.get("/admin/phase", headers=AUTH).json()["last_finetune"] or {}).get("trigger")
            == "cron"
        ),
        timeout_s=30,
    ), stack.log("scheduler")

    # metrics: the API, and each worker on its own port
    api_metrics = http.get("/metrics").text
    assert _value(api_metrics, "tasmopt_compiles_total", mode="sync") >= 1
    assert _value(api_metrics, "tasmopt_compile_stage_duration_seconds_count", stage="verify") >= 1
    worker_texts = [
        httpx.get(f"http://127.0.0.1:{p}/metrics", timeout=5).text
        for p in stack.worker_ports.values()
    ]
    jobs = {
        q: sum(
            _value(t, "tasmopt_worker_job_duration_seconds_count", queue=q) for t in worker_texts
        )
        for q in ("verify", "compile", "learn")
    }
    assert jobs["verify"] >= 1 and jobs["compile"] >= 1 and jobs["learn"] >= 1, jobs
    assert sum(_value(t, "tasmopt_compiles_total", mode="async") for t in worker_texts) >= 1
    assert sum(_value(t, "tasmopt_finetune_runs_total") for t in worker_texts) >= 1

    exported = exposition_names(api_metrics).union(*map(exposition_names, worker_texts))
    missing = {
        e: sorted(promql_metric_names(e) - exported)
        for e in dashboard_exprs()
        if promql_metric_names(e) - exported
    }
    assert not missing, missing
