"""Load run against a real uvicorn: N compile requests at concurrency C from an httpx async
client; counts 5xx answers and BuildResults lost (served but not in the database once the
spool is empty), and prints throughput and P50/P90/P99 latency. Usage::

    python benchmarks/load.py                                  # spawns uvicorn on a temp SQLite
    python benchmarks/load.py --database-url postgresql://postgres@127.0.0.1/tasmopt
    python benchmarks/load.py --url http://127.0.0.1:8000 --database-url postgresql://...
    python benchmarks/load.py --requests 2000 --concurrency 32 --out var/load.json
    python benchmarks/load.py --levels 4,16,60 --duration 20    # overload and abandonment

With ``--levels``, each level runs ``--duration`` seconds of closed-loop clients (three small
requests to one real module of ``../shared/data/trident-std`` with its compiler baseline), while
a prober asks ``/healthz`` every 50 ms; then every client disconnects with its request in
flight, and the API process's CPU is sampled for 10 s (target: idle, since an abandoned compile
is cancelled). It prints per level throughput, P50/P90/P99 of answered requests, the 503s
(overload, with Retry-After), the slowest ``/healthz`` (target < 100 ms) and the CPU share
left busy after the disconnect.

Loopback only. The request mix is small real TIR functions (spec/tir.md §2.1 example A and
variants) with 16 witness seeds: every request is compiled and verified, while the block
search answers repeated blocks from its cache. The timed run follows one sequential pass over
the 16 distinct requests (`--warmup`), so it measures the warm service; the first requests
of a cold process wait for the search and are not representative of steady state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]

#: spec/tir.md §2.1 example A and small variants (straight-line, one function each).
PROGRAMS = [
    [
        {"FnStart": "add_mul"},
        {"Dup": 1},
        {"Dup": 1},
        "Add",
        {"Dup": 0},
        {"Dup": 3},
        "Mul",
        {"Swap": 3},
        {"Pop": 3},
        "Return",
        "FnEnd",
    ],
    [
        {"FnStart": "sum3"},
        {"Dup": 2},
        {"Dup": 2},
        "Add",
        {"Dup": 1},
        "Add",
        {"Swap": 3},
        {"Pop": 3},
        "Return",
        "FnEnd",
    ],
    [{"FnStart": "sq"}, {"Dup": 0}, {"Dup": 0}, "Mul", {"Swap": 1}, {"Pop": 1}, "Return", "FnEnd"],
    [
        {"FnStart": "k"},
        {"Push": 7},
        {"Push": 5},
        "Add",
        {"Dup": 1},
        "Mul",
        {"Swap": 1},
        {"Pop": 1},
        "Return",
        "FnEnd",
    ],
]


@dataclass
class LoadReport:
    """Figures of one run (latencies in seconds, throughput in requests per second)."""

    requests: int
    concurrency: int
    warmup: int
    seconds: float
    throughput_rps: float
    p50_s: float
    p90_s: float
    p99_s: float
    status_counts: dict[str, int]
    server_errors: int
    transport_errors: int
    rows_served: int
    rows_persisted: int | None
    rows_lost: int | None
    stored: dict[str, int] = field(default_factory=dict)


def quantile(xs: list[float], q: float) -> float:
    """Nearest-rank quantile of `xs` (q in [0, 1])."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs) + 0.5) - 1))]


#: Distinct requests in the mix.
DISTINCT = 16


def body(i: int) -> dict:
    """The i-th request of the mix."""
    return {"tir": PROGRAMS[i % len(PROGRAMS)], "options": {"seed": i % DISTINCT}}


async def drive(
    url: str, n: int, concurrency: int, timeout_s: float = 60.0
) -> tuple[list[float], dict[str, int], list[str], dict[str, int], int, float]:
    """Send `n` requests with `concurrency` in flight.

    Returns:
        (latencies, status counts, build_result_ids served, `stored` counts, transport
        errors, wall seconds).
    """
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    ids: list[str] = []
    stored: dict[str, int] = {}
    errors = 0
    counter = iter(range(n))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal errors
        for i in counter:
            t0 = time.perf_counter()
            try:
                r = await client.post("/compile", json=body(i))
            except httpx.HTTPError:
                errors += 1
                continue
            latencies.append(time.perf_counter() - t0)
            statuses[str(r.status_code)] = statuses.get(str(r.status_code), 0) + 1
            if r.status_code == 200:
                out = r.json()
                ids.extend(out["build_result_ids"])
                stored[out["stored"]] = stored.get(out["stored"], 0) + 1

    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return latencies, statuses, ids, stored, errors, wall


def persisted(database_url: str, ids: list[str]) -> int:
    """How many of `ids` are BuildResult rows in the database."""
    from tasmopt.store import make_engine, make_sessionmaker
    from tasmopt.store.queries import existing_ids

    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return len(existing_ids(session, ids=[uuid.UUID(i) for i in ids]))
    finally:
        engine.dispose()


def wait_spool_empty(url: str, timeout_s: float = 60.0) -> None:
    """Wait until /readyz reports no spooled rows (the drainer caught up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).json().get("spooled_rows", 0) == 0:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def warm_up(url: str, n: int) -> list[str]:
    """`n` sequential requests before the timed run (first-use initialisation of the
    candidate sources is not what a load run measures); returns their BuildResult ids."""
    ids: list[str] = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for i in range(n):
            r = client.post("/compile", json=body(i))
            r.raise_for_status()
            ids.extend(r.json()["build_result_ids"])
    return ids


def run(
    url: str, *, requests: int, concurrency: int, database_url: str | None, warmup: int = DISTINCT
) -> LoadReport:
    """One load run against the API at `url` (after `warmup` sequential requests, whose rows
    are checked too)."""
    warm_ids = warm_up(url, warmup)
    latencies, statuses, ids, stored, errors, wall = asyncio.run(drive(url, requests, concurrency))
    ids = warm_ids + ids
    rows = None
    if database_url:
        wait_spool_empty(url)
        rows = persisted(database_url, ids)
    return LoadReport(
        requests=requests,
        concurrency=concurrency,
        warmup=warmup,
        seconds=round(wall, 3),
        throughput_rps=round(len(latencies) / wall, 1) if wall else 0.0,
        p50_s=round(quantile(latencies, 0.50), 4),
        p90_s=round(quantile(latencies, 0.90), 4),
        p99_s=round(quantile(latencies, 0.99), 4),
        status_counts=statuses,
        server_errors=sum(v for k, v in statuses.items() if k.startswith("5")),
        transport_errors=errors,
        rows_served=len(ids),
        rows_persisted=rows,
        rows_lost=None if rows is None else len(ids) - rows,
        stored=stored,
    )


def spawn_api(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """uvicorn on a free loopback port with `env`; returns (process, URL) once /healthz
    answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "service.main:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=ROOT,
        env={**os.environ, **env},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("uvicorn did not start")


# -- levels: health under load, and abandoned requests --------------------------------------


@dataclass
class LevelReport:
    """One concurrency level (seconds; CPU as a share of one core)."""

    concurrency: int
    seconds: float
    answered: int
    throughput_rps: float
    p50_s: float
    p90_s: float
    p99_s: float
    overloaded_503: int
    server_errors: int
    transport_errors: int
    healthz_max_s: float
    healthz_p99_s: float
    cpu_after_disconnect: float | None


def _real_bodies(data: Path, limit: int = 6) -> list[dict]:
    out = []
    for path in sorted(data.glob("*.json"))[:limit]:
        d = json.loads(path.read_text())
        out.append({"tir": d["tir"], "baseline_tasm": d.get("compiler_tasm")})
    return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _level(url: str, concurrency: int, duration: float, real: list[dict]) -> dict:
    latencies: list[float] = []
    health: list[float] = []
    counts = {"503": 0, "5xx": 0, "transport": 0}
    stop = time.monotonic() + duration
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency)

    async def client_loop(client: httpx.AsyncClient, k: int) -> None:
        i = k
        while time.monotonic() < stop:
            i += concurrency
            req = real[i % len(real)] if real and i % 4 == 3 else body(i)
            t0 = time.perf_counter()
            try:
                r = await client.post("/compile", json=req)
            except httpx.HTTPError:
                counts["transport"] += 1
                continue
            if r.status_code == 503:
                counts["503"] += 1
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))
            elif r.status_code >= 500:
                counts["5xx"] += 1
            else:
                latencies.append(time.perf_counter() - t0)

    # the prober is a process of its own: in this event loop, beside the clients, it would
    # measure this process's delays too
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    probe = ctx.Process(target=_probe, args=(url, duration, results))
    probe.start()
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        tasks = [asyncio.create_task(client_loop(client, k)) for k in range(concurrency)]
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
        health.extend(await asyncio.to_thread(results.get))
        probe.join()
        for t in tasks:  # every client leaves with its request in flight
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"latencies": latencies, "health": health, **counts}


def _probe(url: str, duration: float, out: multiprocessing.Queue) -> None:
    """``GET /healthz`` every 50 ms for ``duration`` seconds; puts the latencies on ``out``."""
    lat: list[float] = []
    stop = time.monotonic() + duration
    with httpx.Client(base_url=url, timeout=30) as probe:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            probe.get("/healthz")
            lat.append(time.perf_counter() - t0)
            time.sleep(0.05)
    out.put(lat)


def run_levels(
    url: str, levels: list[int], duration: float, data: Path, pid: int | None
) -> list[LevelReport]:
    real = _real_bodies(data)
    warm_up(url, DISTINCT)
    out = []
    for c in levels:
        t0 = time.perf_counter()
        res = asyncio.run(_level(url, c, duration, real))
        wall = time.perf_counter() - t0
        cpu = None
        if pid is not None:  # what the abandoned compiles still burn
            time.sleep(1.0)
            before = _cpu_seconds(pid)
            time.sleep(10.0)
            cpu = round((_cpu_seconds(pid) - before) / 10.0, 3)
        lat, health = res["latencies"], res["health"]
        out.append(
            LevelReport(
                concurrency=c,
                seconds=round(wall, 1),
                answered=len(lat),
                throughput_rps=round(len(lat) / wall, 2),
                p50_s=round(quantile(lat, 0.5), 3) if lat else 0.0,
                p90_s=round(quantile(lat, 0.9), 3) if lat else 0.0,
                p99_s=round(quantile(lat, 0.99), 3) if lat else 0.0,
                overloaded_503=res["503"],
                server_errors=res["5xx"],
                transport_errors=res["transport"],
                healthz_max_s=round(max(health), 4) if health else 0.0,
                healthz_p99_s=round(quantile(health, 0.99), 4) if health else 0.0,
                cpu_after_disconnect=cpu,
            )
        )
    return out


def format_levels(rows: list[LevelReport]) -> str:
    head = (
        "| clients | answered | req/s | P50 s | P90 s | P99 s | 503 | 5xx | /healthz max ms "
        "| CPU busy 1-11 s after disconnect |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        cpu = "n/a" if r.cpu_after_disconnect is None else f"{100 * r.cpu_after_disconnect:.0f}%"
        lines.append(
            f"| {r.concurrency} | {r.answered} | {r.throughput_rps} | {r.p50_s} | {r.p90_s} | "
            f"{r.p99_s} | {r.overloaded_503} | {r.server_errors} | "
            f"{1000 * r.healthz_max_s:.1f} | {cpu} |"
        )
    return "\n".join(lines)


def format_report(r: LoadReport) -> str:
    lost = "n/a" if r.rows_lost is None else str(r.rows_lost)
    return (
        f"{r.requests} requests, concurrency {r.concurrency}: {r.seconds:.1f} s, "
        f"{r.throughput_rps:.1f} req/s; latency P50 {1000 * r.p50_s:.1f} ms, "
        f"P90 {1000 * r.p90_s:.1f} ms, P99 {1000 * r.p99_s:.1f} ms; "
        f"5xx {r.server_errors}, transport errors {r.transport_errors}; BuildResults "
        f"served {r.rows_served}, persisted {r.rows_persisted}, lost {lost}; "
        f"statuses {r.status_counts}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="API already running (default: spawn uvicorn).")
    ap.add_argument(
        "--database-url",
        help="Database to check for lost rows (default: the spawned API's temporary SQLite).",
    )
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument(
        "--warmup", type=int, default=DISTINCT, help="Sequential requests before the timed run."
    )
    ap.add_argument("--levels", help="Comma-separated concurrency levels, e.g. 4,16,60.")
    ap.add_argument("--duration", type=float, default=20.0, help="Seconds per level.")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "trident-std")
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "var" / "load.json",
        help="Where to write the figures as JSON.",
    )
    args = ap.parse_args(argv)
    proc = None
    tmp = None
    url, database_url = args.url, args.database_url
    if url is None:
        tmp = tempfile.TemporaryDirectory()
        database_url = database_url or f"sqlite:///{tmp.name}/load.db"
        env = {
            "DATABASE_URL": database_url,
            "SPOOL_DIR": f"{tmp.name}/spool",
            "MODEL_STORE": f"{tmp.name}/store",
            "LOG_LEVEL": "WARNING",
        }
        if not database_url.startswith("sqlite"):
            env["ADMIN_TOKEN"] = "load-benchmark-admin-token"
        proc, url = spawn_api(env)
    try:
        if args.levels:
            levels = [int(x) for x in args.levels.split(",")]
            pid = proc.pid if proc is not None else None
            rows = run_levels(url, levels, args.duration, args.data, pid)
            print(format_levels(rows))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
            return 0 if all(r.server_errors == 0 for r in rows) else 1
        report = run(
            url,
            requests=args.requests,
            concurrency=args.concurrency,
            database_url=database_url,
            warmup=args.warmup,
        )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        if tmp is not None:
            tmp.cleanup()
    print(format_report(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(f"written to {args.out}")
    return 0 if report.server_errors == 0 and not report.rows_lost else 1


if __name__ == "__main__":
    sys.exit(main())
