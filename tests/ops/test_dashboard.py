"""Every PromQL query of the Grafana dashboard names a metric that the API or a worker really
exports, once the code has run: a compile (sync and async), an RQ job on a metered worker,
and a finetune check."""

from __future__ import annotations

import json

import pytest
from opskit import DASHBOARD, dashboard_exprs, exposition_names, promql_metric_names


def test_promql_parser():
    expr = (
        'histogram_quantile(0.9, sum by (le, stage) (rate(a_seconds_bucket{route="/x",'
        'method=~"P.*"}[5m]))) / ignoring(source) group_left sum(rate(b_total[1d] '
        "offset 1h)) > bool 0.5 and max by (version) (c_info) == 1"
    )
    assert promql_metric_names(expr) == {"a_seconds_bucket", "b_total", "c_info"}


def test_dashboard_panels_and_datasource():
    dash = json.loads(DASHBOARD.read_text())
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for needed in (
        "latency",
        "throughput",
        "accepted source",
        "cycle reduction",
        "fallback",
        "candidate validity",
        "queue depth",
        "model version",
    ):
        assert needed in titles, needed
    for p in dash["panels"]:
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "prometheus"
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


@pytest.mark.usefixtures("redis_conn")
def test_every_query_names_an_exported_metric(tmp_path, pg_database_factory, redis_url, redis_conn):
    from fastapi.testclient import TestClient
    from prometheus_client import REGISTRY, generate_latest
    from rq import SimpleWorker

    from service.core.config import Settings
    from service.main import create_app
    from worker import context
    from worker.jobs import finetune_job
    from worker.metrics import MeteredSimpleWorker
    from worker.queue import LEARN_QUEUE, SERIALIZER, VERIFY_QUEUE, named_queue

    pg_url = pg_database_factory()
    settings = Settings(
        database_url=pg_url,
        redis_url=redis_url,
        spool_dir=tmp_path / "spool",
        model_store=tmp_path / "store",
        admin_token="dashboard-admin-token-0123456789",
        verify_deadline_s=0.05,
    )  # no workers: check in-process at once
    tir = [
        {"FnStart": "f"},
        {"Dup": 1},
        {"Dup": 1},
        "Add",
        {"Swap": 2},
        {"Pop": 2},
        "Return",
        "FnEnd",
    ]
    with TestClient(create_app(settings)) as client:
        assert client.post("/compile", json={"tir": tir}).status_code == 200
        api_names = exposition_names(client.get("/metrics").text)

    context.configure(database_url=pg_url)
    named_queue(redis_conn, VERIFY_QUEUE).enqueue("worker.jobs.check_blocks_job", args=([],))
    named_queue(redis_conn, LEARN_QUEUE).enqueue(finetune_job)
    MeteredSimpleWorker(
        [named_queue(redis_conn, q) for q in (VERIFY_QUEUE, LEARN_QUEUE)],
        connection=redis_conn,
        serializer=SERIALIZER,
    ).work(burst=True, logging_level="WARNING")
    assert SimpleWorker  # the worker's registry is this process's default one
    worker_names = exposition_names(generate_latest(REGISTRY).decode())

    exported = api_names | worker_names
    missing = {}
    for expr in dashboard_exprs():
        names = promql_metric_names(expr)
        assert names, f"no metric in {expr!r}"
        if names - exported:
            missing[expr] = sorted(names - exported)
    assert not missing, missing
