"""Property-based run of the OpenAPI schema (schemathesis) against a real uvicorn: no request
it generates gets a 5xx. Admin operations are called with the admin token so their bodies get
past authentication. Bounded: 100 examples per operation."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from opskit import ADMIN_TOKEN, AUTH, Stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def api_url(pg_database_factory, tmp_path_factory, redis_url):
    tmp = tmp_path_factory.mktemp("schemathesis")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "REDIS_", "ADMIN_", "SPOOL_", "MODEL_"))
    }
    env.update(
        DATABASE_URL=pg_database_factory(),
        ADMIN_TOKEN=ADMIN_TOKEN,
        SPOOL_DIR=str(tmp / "spool"),
        MODEL_STORE=str(tmp / "store"),
        LOG_LEVEL="WARNING",
        SEARCH_BUDGET_S="0.2",
        MAX_SEARCH_BUDGET_S="0.5",
    )
    (tmp / "logs").mkdir()
    stack = Stack(env=env, logs=tmp / "logs")
    try:
        yield stack.start_api()
    finally:
        stack.stop_all()
        print(stack.log("api")[-2000:])


@pytest.fixture(scope="module")
def api_schema(api_url):
    return schemathesis.openapi.from_url(f"{api_url}/openapi.json")


def test_no_5xx(api_schema, api_url):
    from hypothesis import given

    failures: list[str] = []
    calls = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=100,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case) -> None:
            nonlocal calls
            headers = dict(AUTH) if case.path.startswith("/admin") else None
            response = case.call(base_url=api_url, headers=headers, timeout=60)
            calls += 1
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} -> "
                    f"{response.status_code}: {response.text[:300]}"
                )

        run()
    print(f"\n[schemathesis] {calls} requests, {len(failures)} 5xx")
    assert calls > 100
    assert not failures, failures[:10]


def test_schema_lists_every_endpoint(api_schema):
    paths = set(api_schema.raw_schema["paths"])
    assert {
        "/compile",
        "/compile/jobs",
        "/compile/jobs/{job_id}",
        "/healthz",
        "/readyz",
        "/admin/checkpoints",
        "/admin/checkpoints/{version}/promote",
        "/admin/rollback",
        "/admin/phase",
        "/admin/finetune",
        "/admin/actions",
    } <= paths
