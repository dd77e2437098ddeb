"""Compiles on a pool of processes (embedded mode, COMPILE_PROCESSES): a request's functions
are split over the processes and assembled in the API; every function is still proven, and a
dead process never fails a compile."""

from __future__ import annotations

import os
import signal
import time

from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText
from tasmopt.optimizer.prepare import decode_tir
from tasmopt.vm.equivalence import check_function


def _proven(tir, baseline: str, tasm: str) -> None:
    """Every function of the returned module against the client's, on witnesses."""
    labels = {
        n: f.label for n, f in ModuleText.from_lowering(lower(decode_tir(tir))).functions.items()
    }
    client = ModuleText.from_text(baseline, labels)
    out = ModuleText.from_text(tasm, labels)
    for fn in client.functions:
        v = check_function(client.harness(fn, "release"), out.harness(fn, "release"), seed=5)
        assert v.equivalent or v.witness < 0, (fn, v.reason)


def test_functions_are_compiled_on_the_pool_and_assembled(make_client, trident_std):
    d = trident_std["std_crypto_ecdsa"]
    client = make_client(compile_processes=2)
    pool = client.app.state.compile_pool
    assert pool is not None and pool.processes == 2
    body = {"tir": d["tir"], "baseline_tasm": d["compiler_tasm"], "options": {"use_cache": True}}
    r = client.post("/compile", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert "split" in out["timings"]  # assembled from the groups' results
    assert out["cycles"] < out["baseline_cycles"]
    assert len(out["functions"]) == 8 and {f["cache"] for f in out["functions"]} == {"off"}
    _proven(d["tir"], d["compiler_tasm"], out["tasm"])


def test_a_killed_compile_process_never_fails_a_compile(make_client, trident_std):
    d = trident_std["lock_multisig"]
    client = make_client(compile_processes=2)
    pool = client.app.state.compile_pool
    pool.warm_up()
    victim = next(iter(pool._pool._processes))  # a pid of the pool (test-only peek)
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.5)
    body = {"tir": d["tir"], "baseline_tasm": d["compiler_tasm"]}
    r = client.post("/compile", json=body)  # runs in the API process, the pool restarts
    assert r.status_code == 200, r.text
    _proven(d["tir"], d["compiler_tasm"], r.json()["tasm"])
    again = client.post("/compile", json=body)
    assert again.status_code == 200 and "split" in again.json()["timings"]  # the new pool
