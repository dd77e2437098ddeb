"""`GET /metrics`: compile stage latencies, candidates and accepted sources, fallbacks, cycle
reduction, BuildResult destinations, HTTP requests, and the gauges read at scrape time."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_compile_metrics(client, timelock_request):
    before = _samples(client.get("/metrics").text)
    out = client.post("/compile", json=timelock_request).json()
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    after = _samples(r.text)

    def delta(name, **labels):
        return _get(after, name, **labels) - _get(before, name, **labels)

    for stage in ("decode", "lower", "candidates", "verify", "rank", "persist", "total"):
        assert delta("tasmopt_compile_stage_duration_seconds_count", stage=stage) == 1, stage
    assert delta("tasmopt_compiles_total", mode="sync", outcome="optimized") == 1
    [fn] = out["functions"]
    assert delta("tasmopt_accepted_total", unit="function", source=fn["source"]) == 1
    blocks = fn["blocks"]
    assert sum(
        delta("tasmopt_accepted_total", unit="block", source=s)
        for s in ("compiler", "rules", "search", "model")
    ) == len(blocks)
    generated = sum(st["generated"] for b in blocks for st in b["candidates"].values())
    valid = sum(st["valid"] for b in blocks for st in b["candidates"].values())
    assert (
        sum(
            delta("tasmopt_candidates_generated_total", source=s)
            for s in ("rules", "search", "model")
        )
        == generated
        > 0
    )
    assert (
        sum(delta("tasmopt_candidates_valid_total", source=s) for s in ("rules", "search", "model"))
        == valid
        > 0
    )
    assert delta("tasmopt_cycle_reduction_ratio_count") == 1
    assert delta("tasmopt_cycle_reduction_ratio_sum") > 0
    assert delta("tasmopt_build_results_total", stored="database") == len(out["build_result_ids"])
    assert delta("tasmopt_http_requests_total", method="POST", route="/compile", status="200") == 1
    assert _get(after, "tasmopt_model_info", version="none") == 1
    assert _get(after, "tasmopt_phase", phase="A") == 1
    assert _get(after, "tasmopt_spool_rows") == 0
    assert ("tasmopt_queue_depth", (("queue", "compile"),)) in after


def test_fallback_metrics(make_client, add_mul_tir):
    from service.api.deps import get_compiler

    c = make_client()
    before = _samples(c.get("/metrics").text)

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    c.app.dependency_overrides[get_compiler] = lambda: broken
    assert c.post("/compile", json={"tir": add_mul_tir}).json()["fallback"]
    after = _samples(c.get("/metrics").text)
    assert (
        _get(after, "tasmopt_fallbacks_total", kind="request")
        - _get(before, "tasmopt_fallbacks_total", kind="request")
    ) == 1
    assert (
        _get(after, "tasmopt_compiles_total", mode="sync", outcome="fallback")
        - _get(before, "tasmopt_compiles_total", mode="sync", outcome="fallback")
    ) == 1


def test_queue_depth_from_redis(make_client, redis_url, redis_conn):
    from worker.queue import VERIFY_QUEUE, verify_queue

    c = make_client(redis_url=redis_url)
    verify_queue(redis_conn).enqueue("worker.jobs.check_blocks_job", args=([],))
    s = _samples(c.get("/metrics").text)
    assert _get(s, "tasmopt_queue_depth", queue=VERIFY_QUEUE) == 1
    assert _get(s, "tasmopt_queue_depth", queue="compile") == 0
    assert _get(s, "tasmopt_queue_depth", queue="learn") == 0


def test_unmatched_routes_do_not_explode_label_cardinality(client):
    client.get("/no/such/path/123")
    client.get("/no/such/path/456")
    s = _samples(client.get("/metrics").text)
    routes = {dict(k[1]).get("route") for k in s if k[0] == "tasmopt_http_requests_total"}
    assert "unmatched" in routes and not any(r and "123" in r for r in routes)
