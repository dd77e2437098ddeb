"""The service's result cache and background deepening, on the session's PostgreSQL: a
deepened result is served on the next request, a verifier-version change invalidates the
cache, a dead Redis turns deepening off without blocking compiles."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import delete, select

from service.core.deepen import Followup
from service.core.metrics import DEEPEN
from service.core.result_cache import ResultCache
from tasmopt.optimizer import keys as keys_module
from tasmopt.store import FunctionResult, count_function_results, purge_function_results
from tasmopt.vm.equivalence import VERIFIER_VERSION
from worker.deepen import RqDeepener
from worker.queue import connect


@pytest.fixture()
def cached_client(make_client, pg_session):
    """``cached_client(**settings)``: an app with the result cache on, on an empty table."""
    pg_session.execute(delete(FunctionResult))
    pg_session.commit()

    def make(**overrides):
        return make_client(**{"result_cache": True, "deepen": False, **overrides})

    yield make
    pg_session.execute(delete(FunctionResult))
    pg_session.commit()


def _settle(client, timeout: float = 120) -> None:
    """Wait until the follow-ups (cache writes) and the deepening runs are done."""
    state = client.app.state
    assert state.followup.wait_idle(timeout)
    if getattr(state, "deepener", None) is not None and hasattr(state.deepener, "wait_idle"):
        assert state.deepener.wait_idle(timeout)
    assert state.followup.wait_idle(timeout)


def test_a_deepened_result_is_served_on_the_next_request(cached_client, timelock_request):
    """Cold: a 1 ms deadline leaves no time to look at the function: the client's TASM,
    `improving`. Deepening (the embedded child process) runs it at the deepening budget and
    stores it; the same request then gets it from the cache, `final`, in milliseconds."""
    client = cached_client(deepen=True, deepen_budget_s=0.5)
    body = {**timelock_request, "options": {"deadline_ms": 1}}
    cold = client.post("/compile", json=body).json()
    (fn,) = cold["functions"]
    assert fn["status"] == "improving" and fn["fallback"] and fn["cache"] == "miss"
    assert cold["tasm"].strip() == timelock_request["baseline_tasm"].strip()
    _settle(client)
    warm = client.post("/compile", json=body).json()
    (fn,) = warm["functions"]
    assert fn["cache"] == "hit" and fn["status"] == "final"
    assert not fn["fallback"] and fn["cycles"] < fn["baseline_cycles"]
    assert warm["tasm"] != cold["tasm"]
    # the replay buffer stores what was served, hits included
    assert len(warm["build_result_ids"]) >= 1
    # final: a third request deepens nothing
    before = DEEPEN.labels("queued")._value.get()
    client.post("/compile", json=body)
    _settle(client)
    assert DEEPEN.labels("queued")._value.get() == before


def test_a_function_the_deadline_cut_reports_null_figures_not_zeros(
    cached_client, timelock_request
):
    """Issue 34 item 2: a function returned unchanged without running it has no cycles: the
    response says null (and why), the totals leave it out and count it as unmeasured."""
    client = cached_client()
    cut = client.post("/compile", json={**timelock_request, "options": {"deadline_ms": 1}})
    assert cut.status_code == 200
    body = cut.json()
    (fn,) = body["functions"]
    assert fn["measured"] is False and fn["fallback"]
    for k in ("cycles", "baseline_cycles", "cycle_reduction", "padded_height", "heights"):
        assert fn[k] is None, k
    assert "not measured" in fn["reason"] or "returned unchanged" in fn["reason"]
    assert body["unmeasured"] == 1
    assert body["cycles"] is None and body["baseline_cycles"] is None
    full = client.post(
        "/compile",
        json={**timelock_request, "options": {"deadline_ms": 20_000, "use_cache": False}},
    ).json()
    (fn,) = full["functions"]
    assert fn["measured"] is True and fn["cycles"] > 0 and fn["baseline_cycles"] > 0
    assert full["unmeasured"] == 0 and full["cycles"] == fn["cycles"]
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert "null if not measured" in schema["FunctionOut"]["properties"]["cycles"]["description"]
    assert "unmeasured" in schema["CompileResponse"]["properties"]


def test_a_verifier_version_change_invalidates_the_cache(
    cached_client, timelock_request, pg_session, monkeypatch
):
    client = cached_client()
    first = client.post("/compile", json=timelock_request).json()
    _settle(client)
    assert client.post("/compile", json=timelock_request).json()["functions"][0]["cache"] == "hit"
    monkeypatch.setattr(keys_module, "VERIFIER_VERSION", "a-later-version")
    again = client.post("/compile", json=timelock_request).json()
    assert again["functions"][0]["cache"] == "miss"
    assert again["tasm"] == first["tasm"]  # recomputed, same answer
    _settle(client)
    # the stale entries are purged by version (rows carry the version that proved them)
    assert purge_function_results(pg_session, keep_verifier_version="a-later-version") >= 1
    pg_session.commit()
    assert count_function_results(pg_session) == 0 or VERIFIER_VERSION == "a-later-version"


def test_a_dead_redis_turns_deepening_off_without_blocking_compiles(
    cached_client, timelock_request
):
    client = cached_client(deepen=True)
    state = client.app.state
    dead = RqDeepener(connect("redis://127.0.0.1:1/0"), state.settings, cooldown_s=60)
    state.followup = Followup(state.settings, state.result_cache, dead)
    before = DEEPEN.labels("unavailable")._value.get()
    t = time.perf_counter()
    r = client.post("/compile", json=timelock_request)  # searched briefly: improving
    elapsed = time.perf_counter() - t
    assert r.status_code == 200 and r.json()["functions"][0]["status"] == "improving"
    assert elapsed < 5  # the deepening submission happens after the response
    assert state.followup.wait_idle(30)
    assert DEEPEN.labels("unavailable")._value.get() == before + 1
    # off for the cool-down: the next submission does not even try Redis
    t = time.perf_counter()
    assert dead.submit({"kind": "deepen", "functions": {"main": "k"}}) == "unavailable"
    assert time.perf_counter() - t < 0.05
    # compiles go on, and what they computed is cached all the same
    again = client.post("/compile", json=timelock_request).json()
    assert again["functions"][0]["cache"] == "hit"
    assert again["tasm"] == r.json()["tasm"]


def test_rq_deepening_claims_each_function_once(redis_conn, redis_url, pg_url, make_client):
    """Two API replicas submitting the same function queue it once (claims in Redis); the
    queue cap drops work beyond it."""
    from worker.queue import DEEPEN_QUEUE, named_queue

    settings = make_client().app.state.settings.model_copy(update={"deepen_queue": 1})
    a = RqDeepener(connect(redis_url), settings)
    b = RqDeepener(connect(redis_url), settings)
    payload = {"kind": "deepen", "tir": [], "baseline_tasm": None, "isa": "release",
               "witnesses": 16, "functions": {"f": "key-f"}}  # fmt: skip
    assert a.submit(payload) == "queued"
    assert b.submit(payload) == "duplicate"
    assert named_queue(redis_conn, DEEPEN_QUEUE).count == 1
    other = {**payload, "functions": {"g": "key-g"}}
    assert a.submit(other) == "full"


def test_result_cache_reads_never_raise(pg_url):
    """A database that cannot answer gives no hits (and the breaker stops asking)."""
    from tasmopt.store import make_engine, make_sessionmaker

    broken = ResultCache(
        make_sessionmaker(make_engine("postgresql://nobody@127.0.0.1:1/none")), cooldown_s=60
    )
    t = time.perf_counter()
    assert broken.get_many(["k"]) == {}
    assert broken.get_many(["k"]) == {}  # breaker open: immediate
    assert time.perf_counter() - t < 10


def test_a_worker_deepens_from_the_rq_queue(
    cached_client, timelock_request, redis_url, spawn_worker
):
    """With Redis: the API queues the function on `deepen`, a real `tasmopt worker` runs it
    and stores the result in PostgreSQL, and the next request is a hit."""
    spawn_worker(DEEPEN_BUDGET_S="0.5")
    client = cached_client(redis_url=redis_url, deepen=True, deepen_budget_s=0.5)
    body = {**timelock_request, "options": {"deadline_ms": 1}}
    cold = client.post("/compile", json=body).json()
    assert cold["functions"][0]["status"] == "improving"
    assert client.app.state.followup.wait_idle(30)
    end = time.monotonic() + 90
    while time.monotonic() < end:
        fn = client.post("/compile", json=body).json()["functions"][0]
        if fn["cache"] == "hit" and fn["status"] == "final":  # the first hits: the placeholder
            break
        time.sleep(0.5)
    assert fn["cache"] == "hit" and fn["status"] == "final"
    assert fn["cycles"] < fn["baseline_cycles"]


def test_a_tampered_cache_row_is_served_until_a_spot_check_deletes_it(
    cached_client, timelock_request, pg_session
):
    """Adversarial: a row changed behind the service's back (or let in by a verifier bug)
    is served from the cache (it is trusted on the request path), and the spot check of that
    hit (CACHE_SPOT_CHECK = 1: every hit) proves it wrong on fresh witnesses and deletes it;
    the next request computes the function again."""
    from service.core.deepen import LocalDeepener, run_payload

    client = cached_client(deepen=True, cache_spot_check=1.0)
    state = client.app.state
    inline = LocalDeepener(
        state.settings,
        runner=lambda p: run_payload(
            p, cache=state.result_cache, sources=None, settings=state.settings
        ),
    )
    state.deepener = inline
    state.followup = Followup(state.settings, state.result_cache, inline)
    first = client.post("/compile", json=timelock_request).json()
    assert state.followup.wait_idle(30) and inline.wait_idle(120)  # stored, deepened
    row = pg_session.scalars(select(FunctionResult)).one()
    assert row.lines is not None
    poisoned = [*row.lines[:-1], "    push 1", "    add", row.lines[-1]]
    row.lines = poisoned
    key = row.key
    pg_session.commit()
    served = client.post("/compile", json=timelock_request).json()
    assert served["functions"][0]["cache"] == "hit" and "\n".join(poisoned) in served["tasm"]
    assert state.followup.wait_idle(30) and inline.wait_idle(60)
    pg_session.expire_all()
    assert pg_session.get(FunctionResult, key) is None  # deleted by the spot check
    after = client.post("/compile", json=timelock_request).json()
    assert after["functions"][0]["cache"] == "miss"
    assert after["tasm"] == first["tasm"]


def test_hits_a_request_could_not_measure_go_to_the_deepener_as_a_remeasure():
    """`CompileResult.unmeasured_hits` -> one REMEASURE payload with those functions (after
    the response, on the follow-up thread); a remeasure claims its functions only while it
    runs, so the same hits can be sent again once the cache changes (a deepening claims them
    for DEEPEN_CLAIM_S)."""
    from service.core.config import Settings
    from service.core.deepen import REMEASURE, LocalDeepener
    from service.core.schemas import CompileRequest
    from tasmopt.optimizer import compile as compile_tir

    settings = Settings(database_url="sqlite://", deepen=True)
    ran: list[dict] = []
    deepener = LocalDeepener(settings, runner=lambda p: ran.append(p) or {"main": "remeasured"})
    followup = Followup(settings, None, deepener)
    tir = [{"FnStart": "main"}, "Return", "FnEnd"]
    req = CompileRequest(tir=tir)
    result = compile_tir(tir)
    result.unmeasured_hits = {"main": "k" * 64}
    for _ in range(2):  # the second is not a duplicate: the first released its claim
        followup.after_compile(req, result)
        assert followup.wait_idle(30) and deepener.wait_idle(30)
    remeasures = [p for p in ran if p["kind"] == REMEASURE]
    assert len(remeasures) == 2
    assert all(p["functions"] == {"main": "k" * 64} and p["tir"] == tir for p in remeasures)
    followup.close()
