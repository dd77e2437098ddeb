"""/healthz answers while the process runs; /readyz reports each dependency."""

from __future__ import annotations


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_readyz_on_a_migrated_database(client):
    r = client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["ready"] and body["database"]["ok"]
    assert body["schema_revision"] == body["schema_head"] == "0005"
    assert body["redis"] is None and body["spooled_rows"] == 0


def test_readyz_with_redis(make_client, redis_url):
    body = make_client(redis_url=redis_url).get("/readyz").json()
    assert body["ready"] and body["redis"] == {"ok": True, "detail": None}


def test_readyz_on_an_unmigrated_database(make_client, pg_database_factory):
    c = make_client(database_url=pg_database_factory(migrate=False), migrate_on_start=False)
    r = c.get("/readyz")
    assert r.status_code == 503
    assert not r.json()["database"]["ok"] and "head is 0005" in r.json()["database"]["detail"]
