"""Latency of a build against a running server, and how fast background deepening settles.

Sends the 30 real modules of ``../shared/data/trident-std`` (TIR, with the upstream
compiler's TASM as the client's baseline) one after the other, in a random order (``--seed``),
to ``tasmopt serve`` started here on an empty database (the server's working directory is a
temporary directory, so that the model and the other defaults are the installation's, not the
checkout's by accident). Passes:

1. **cold** — empty result cache, the server's default deadline: what a first build gets;
2. **settled** — once the background deepening has settled (its queue empty and nothing
   running; at most ``--settle-timeout``), the same requests again: cache hits;
3. **after restart** — the server is stopped, started again on the same database, and asked
   again (embedded mode only).

The settle time is counted from the first cold request (``settle``) and from the end of the
cold pass (``after cold``). Per pass it prints P50/P90/P99 of the wall time per request (client
side) and per function (the request's time divided by its functions: what one function of a
build waits), the cache hits, the functions still ``improving``, and the cycle totals of the
returned programs; then the share of the settled saving that the cold answers already carry.
The cycles are measured here, not taken from the responses: every function of every returned
module is run against the client's baseline on the verifier's witnesses (the same seed for all
passes), which also re-checks it: ``differ`` counts functions a witness shows to behave unlike
the client's (a verifier bug: must be 0), ``unreached`` those on which no random or
guard-directed witness runs the client's baseline to its return (their cycles are those of the
failing runs, the same measurement in every pass).

**Scale-out** (``--workers 1,2,4``): deepening on the RQ queue ``deepen`` instead of the
embedded child process. For each worker count, a fresh PostgreSQL database
(``--database-url``, an admin URL: a database is created and dropped per run), the Redis
database of ``--redis`` emptied, the server with ``REDIS_URL`` and that many ``tasmopt worker``
processes; the cold pass, the settle time (``deepen`` queue empty and its started registry
empty), the settled pass. The table then shows the settle time per worker count and the
speed-up against the first. Usage::

    python benchmarks/latency.py                          # embedded: cold, settled, restart
    python benchmarks/latency.py --deadline-ms 300 --deepen-budget 1 --settle-timeout 900
    python benchmarks/latency.py --workers 1,2,4 --redis redis://127.0.0.1:6379/14
    python benchmarks/latency.py --out var/latency.json

Targets on the 2-core development machine (issue 34): cold P90 <= the default deadline +
100 ms; settled and after-restart P90 <= 50 ms per request; cold answers carry >= 50% of the
settled saving; deepening settles in <= 120 s with one worker process, and the settle time
falls near-linearly with worker processes (while there are cores for them).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Server:
    """``tasmopt serve`` in a subprocess, in its own working directory."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir, self.env = workdir, env
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> None:
        log = open(self.workdir / f"server-{self.port}.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tasmopt.cli", "serve", "--port", str(self.port)],
            cwd=self.workdir,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {log.name}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError("server not ready in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def queue_depths(self) -> dict[str, float]:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return {
            m.group(1): float(m.group(2))
            for m in re.finditer(r'^tasmopt_queue_depth\{queue="(\w+)"\} (\S+)$', text, re.M)
        }


class Workers:
    """``n`` ``tasmopt worker`` processes (all queues) on the server's Redis and database."""

    def __init__(self, n: int, workdir: Path, env: dict[str, str]) -> None:
        self.n, self.workdir, self.env = n, workdir, env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for i in range(self.n):
            log = open(self.workdir / f"worker-{i}.log", "ab")  # noqa: SIM115 - lives with the process
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tasmopt.cli", "worker", "--metrics-port", "0"],
                    cwd=self.workdir,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def run_pass(server: Server, modules: dict[str, dict[str, Any]], order: list[str]) -> dict:
    per_request: list[float] = []
    per_function: list[float] = []
    answers: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=600) as http:
        for name in order:
            d = modules[name]
            body = {"tir": d["tir"], "baseline_tasm": d["compiler_tasm"]}
            t = time.perf_counter()
            r = http.post(f"{server.url}/compile", json=body)
            dt = time.perf_counter() - t
            r.raise_for_status()
            out = r.json()
            answers[name] = out
            per_request.append(dt)
            out["_client_s"] = dt
            n = max(1, len(out["functions"]))
            per_function.extend([dt / n] * n)
    fns = [f for a in answers.values() for f in a["functions"]]
    return {
        "answers": answers,
        "per_request": per_request,
        "per_function": per_function,
        "hits": sum(f["cache"] == "hit" for f in fns),
        "improving": sum(f["status"] == "improving" for f in fns),
        "functions": len(fns),
    }


class Measure:
    """Cycles of returned modules, function by function, against the client's baseline."""

    def __init__(self, modules: dict[str, dict[str, Any]], witnesses: int = 16) -> None:
        from tasmopt.lower.triton import lower
        from tasmopt.module import ModuleText
        from tasmopt.optimizer.prepare import decode_tir

        self.modules, self.witnesses = modules, witnesses
        self.labels: dict[str, dict[str, str]] = {}
        for name, d in modules.items():
            ours = ModuleText.from_lowering(lower(decode_tir(d["tir"])))
            self.labels[name] = {n: f.label for n, f in ours.functions.items()}
        self._memo: dict[tuple[str, str, str], tuple[int, int, bool, bool]] = {}

    def module(self, name: str, tasm: str) -> tuple[int, int, int, int, int]:
        """(cycles, baseline cycles, functions measured, functions a witness shows to differ
        from the client's, functions no witness ran to their return: cycles of failing runs).
        """
        from tasmopt.module import ModuleText
        from tasmopt.optimizer.recheck import measure_as_returned

        labels = self.labels[name]
        client = ModuleText.from_text(self.modules[name]["compiler_tasm"], labels)
        out = ModuleText.from_text(tasm, labels)
        cyc = base = measured = wrong = blind = 0
        for fn in client.functions:
            if fn not in out.functions:
                continue
            key = (name, fn, out.closure_text(fn)[0])
            if key not in self._memo:
                v = measure_as_returned(client, out, fn, witnesses=self.witnesses, seed=0)
                if v is None:
                    continue  # upstream text of TIR that cannot be lowered: not measurable
                self._memo[key] = (v.cycles, v.baseline_cycles, v.witness >= 0, v.halted == 0)
            c, b, differs, unreached = self._memo[key]
            cyc, base, measured = cyc + c, base + b, measured + 1
            wrong, blind = wrong + differs, blind + unreached
        return cyc, base, measured, wrong, blind


def settle(server: Server, timeout: float, redis_url: str | None = None) -> float:
    """Seconds until deepening is idle (two looks in a row), inf after ``timeout``.

    Embedded: the server's ``deepen`` and ``followup`` depths (waiting or running). RQ: the
    server's follow-ups, and the ``deepen`` queue and its started-job registry in Redis.
    """
    started = None
    if redis_url is not None:
        from redis import Redis
        from rq.registry import StartedJobRegistry

        from worker.queue import DEEPEN_QUEUE, named_queue

        conn = Redis.from_url(redis_url)
        waiting = named_queue(conn, DEEPEN_QUEUE)
        started = StartedJobRegistry(DEEPEN_QUEUE, connection=conn)
    t = time.monotonic()
    idle = 0
    while time.monotonic() - t < timeout:
        depths = server.queue_depths()
        busy = depths.get("deepen", 0) + depths.get("followup", 0)
        if started is not None:
            busy += waiting.count + started.count
        idle = idle + 1 if busy == 0 else 0
        if idle >= 2:
            return time.monotonic() - t
        time.sleep(1)
    return float("inf")


def _pg_database(admin_url: str) -> tuple[str, Any]:
    """A fresh PostgreSQL database next to ``admin_url``: (its URL, a function dropping it)."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"tasmopt_latency_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), drop


def _base_env(args: argparse.Namespace, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
    env.update(SPOOL_DIR=str(work / "spool"), LOG_LEVEL="WARNING")
    if args.deadline_ms is not None:
        env["DEFAULT_DEADLINE_MS"] = str(args.deadline_ms)
    if args.deepen_budget is not None:
        env["DEEPEN_BUDGET_S"] = str(args.deepen_budget)
    return env


def _orders(modules: dict[str, Any], rng: random.Random, n: int) -> list[list[str]]:
    out = []
    for _ in range(n):
        order = list(modules)
        rng.shuffle(order)
        out.append(order)
    return out


def cold_then_settled(
    server: Server,
    modules: dict[str, Any],
    orders: list[list[str]],
    timeout: float,
    redis_url: str | None = None,
) -> tuple[dict[str, dict], float, float]:
    """The cold pass, the wait for deepening (`settle`), the settled pass: (the passes,
    seconds of the cold pass, seconds from its end until deepening was idle)."""
    passes: dict[str, dict] = {}
    t0 = time.monotonic()
    passes["cold"] = run_pass(server, modules, orders[0])
    cold_s = time.monotonic() - t0
    _say(f"cold pass done in {cold_s:.1f} s; waiting for deepening to settle")
    after = settle(server, timeout, redis_url)
    _say(f"settled {after:.0f} s after the cold pass; settled pass")
    passes["settled"] = run_pass(server, modules, orders[1])
    return passes, cold_s, after


def run_embedded(args: argparse.Namespace, modules: dict[str, Any]) -> dict[str, Any]:
    """Cold, settled and after-restart passes against one embedded server (SQLite)."""
    orders = _orders(modules, random.Random(args.seed), 3)
    work = Path(tempfile.mkdtemp(prefix="tasmopt-latency-"))
    env = _base_env(args, work)
    env["DATABASE_URL"] = f"sqlite:///{work / 'tasmopt.db'}"
    server = Server(work, env)
    try:
        server.start()
        _say(f"embedded server up ({work}); cold pass")
        passes, cold_s, after = cold_then_settled(server, modules, orders, args.settle_timeout)
        server.stop()
        server = Server(work, env)
        server.start()
        _say("restarted; after-restart pass")
        passes["after restart"] = run_pass(server, modules, orders[2])
    finally:
        server.stop()
    return {
        "mode": "embedded",
        "workdir": str(work),
        "settle_s": cold_s + after,
        "after_cold_s": after,
        "passes": passes,
    }


def run_rq(args: argparse.Namespace, modules: dict[str, Any], workers: int) -> dict[str, Any]:
    """Cold and settled passes against a server deepening on ``workers`` RQ workers."""
    from redis import Redis

    orders = _orders(modules, random.Random(args.seed), 2)
    work = Path(tempfile.mkdtemp(prefix=f"tasmopt-latency-rq{workers}-"))
    db_url, drop = _pg_database(args.database_url)
    Redis.from_url(args.redis).flushdb()
    env = _base_env(args, work)
    env.update(DATABASE_URL=db_url, REDIS_URL=args.redis, ADMIN_TOKEN=secrets.token_urlsafe(32))
    server, pool = Server(work, env), Workers(workers, work, env)
    try:
        server.start()
        pool.start()
        _say(f"server and {workers} RQ worker(s) up ({work}); cold pass")
        passes, cold_s, after = cold_then_settled(
            server, modules, orders, args.settle_timeout, args.redis
        )
    finally:
        pool.stop()
        server.stop()
        drop()
    return {
        "mode": f"rq x{workers}",
        "workdir": str(work),
        "workers": workers,
        "settle_s": cold_s + after,
        "after_cold_s": after,
        "passes": passes,
    }


def report(run: dict[str, Any], measure: Measure) -> dict[str, Any]:
    """Print one run's table; return its figures (JSON-able)."""
    print(
        f"\n{run['mode']}: deepening settled {run['settle_s']:.0f} s after the first cold request"
        f" ({run['after_cold_s']:.0f} s after the cold pass); server files in {run['workdir']}"
    )
    print(
        "| pass | req P50 | req P90 | req P99 | fn P50 | fn P90 | fn P99 | hits | improving |"
        " cycles (baseline) | differ | unreached |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    figures: dict[str, Any] = {k: run[k] for k in ("mode", "settle_s", "after_cold_s")}
    figures["passes"] = {}
    for label, p in run["passes"].items():
        tot = [0, 0, 0, 0, 0]
        for name, ans in p["answers"].items():
            for k, v in enumerate(measure.module(name, ans["tasm"])):
                tot[k] += v
        rq, fn = p["per_request"], p["per_function"]
        ms = [1000 * _pct(xs, q) for xs in (rq, fn) for q in (0.5, 0.9, 0.99)]
        print(
            f"| {label} | " + " | ".join(f"{x:.0f} ms" for x in ms) + f" | {p['hits']}/"
            f"{p['functions']} | {p['improving']} | {tot[0]} ({tot[1]}) | {tot[3]} | {tot[4]} |"
        )
        figures["passes"][label] = {
            "request_ms": {q: 1000 * _pct(rq, q) for q in (0.5, 0.9, 0.99)},
            "function_ms": {q: 1000 * _pct(fn, q) for q in (0.5, 0.9, 0.99)},
            "mean_request_ms": 1000 * statistics.fmean(rq),
            "hits": p["hits"],
            "improving": p["improving"],
            "functions": p["functions"],
            "cycles": tot[0],
            "baseline_cycles": tot[1],
            "functions_measured": tot[2],
            "differ": tot[3],
            "unreached": tot[4],
        }
    for label, p in run["passes"].items():
        slow = sorted(p["answers"].items(), key=lambda kv: -kv[1]["_client_s"])[:3]
        shown = []
        for name, ans in slow:
            stages = sorted(ans.get("timings", {}).items(), key=lambda kv: -kv[1])[:3]
            shown.append(
                f"{name} {1000 * ans['_client_s']:.0f} ms ("
                + ", ".join(f"{k} {1000 * v:.0f}" for k, v in stages)
                + ")"
            )
        print(f"slowest {label}: " + "; ".join(shown))
    f = figures["passes"]
    if "cold" in f and "settled" in f:
        per = figures["modules"] = {
            label: {
                name: measure.module(name, ans["tasm"])[:2]
                for name, ans in run["passes"][label]["answers"].items()
            }
            for label in ("cold", "settled")
        }
        gaps = sorted(
            (
                (s[1] - s[0]) - (c[1] - c[0]),
                name,
                c[1] - c[0],
                s[1] - s[0],
                run["passes"]["cold"]["answers"][name]["_client_s"],
            )
            for name in per["settled"]
            for c, s in [(per["cold"][name], per["settled"][name])]
        )
        shown = [
            f"{name} {cs}/{ss} ({1000 * t:.0f} ms)"
            for gap, name, cs, ss, t in sorted(gaps, reverse=True)[:8]
            if gap > 0
        ]
        print(
            "largest settled savings the cold answer lacks (cold/settled cycles saved, cold "
            "time): " + "; ".join(shown)
        )
        cold = f["cold"]["baseline_cycles"] - f["cold"]["cycles"]
        settled = f["settled"]["baseline_cycles"] - f["settled"]["cycles"]
        share = cold / settled if settled > 0 else float("nan")
        figures["cold_share"] = share
        print(
            f"cold answers save {cold} cycles, settled answers {settled}: the cold answer "
            f"carries {100 * share:.0f}% of the settled saving"
        )
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "trident-std")
    ap.add_argument("--seed", type=int, default=1, help="order of the requests in each pass")
    ap.add_argument("--deadline-ms", type=int, help="DEFAULT_DEADLINE_MS of the server")
    ap.add_argument("--deepen-budget", type=float, help="DEEPEN_BUDGET_S of the server")
    ap.add_argument(
        "--settle-timeout", type=float, default=1200, help="longest wait for deepening, s"
    )
    ap.add_argument(
        "--workers",
        help="comma-separated RQ worker counts, one run each (e.g. 1,2,4); default: embedded",
    )
    ap.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379/14",
        help="Redis database of the RQ runs (emptied at the start of each run)",
    )
    ap.add_argument(
        "--database-url",
        default=os.environ.get(
            "TASMOPT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="PostgreSQL admin URL of the RQ runs (a fresh database is created per run)",
    )
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    files = sorted(args.data.glob("*.json"))
    if not files:
        print(f"no module files in {args.data}", file=sys.stderr)
        return 1
    modules = {p.stem: json.loads(p.read_text()) for p in files}
    if args.workers:
        try:
            counts = [int(x) for x in args.workers.split(",") if x.strip()]
        except ValueError:
            ap.error(f"--workers wants comma-separated integers, got {args.workers!r}")
        if not counts or min(counts) < 1:
            ap.error("--workers wants counts >= 1")
        runs = [run_rq(args, modules, n) for n in counts]
    else:
        runs = [run_embedded(args, modules)]
    _say("measuring the answers' cycles")
    measure = Measure(modules)
    figures = [report(run, measure) for run in runs]
    if len(runs) > 1:
        first = figures[0]["settle_s"]
        print("\n| RQ workers | settle (s) | after cold pass (s) | speed-up | cold P90 (ms) |")
        print("|---|---|---|---|---|")
        for run, fig in zip(runs, figures, strict=True):
            print(
                f"| {run['workers']} | {fig['settle_s']:.0f} | {fig['after_cold_s']:.0f} | "
                f"{first / fig['settle_s']:.2f}x | "
                f"{fig['passes']['cold']['request_ms'][0.9]:.0f} |"
            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
