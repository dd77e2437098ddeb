"""Latency of a build against a running server, and what deepening buys: three passes.

Sends the 30 real modules of ``../shared/data/trident-std`` (TIR, with the upstream
compiler's TASM as the client's baseline) one after the other, in a random order (``--seed``),
to ``tasmopt serve`` started here on an empty embedded database (SQLite in a temporary
directory; the server's working directory is that directory too, so that the model and the
other defaults are the installation's, not the checkout's by accident):

1. **cold** — empty result cache;
2. **warm** — the same requests again (in a new random order);
3. **after restart** — the server is stopped once the background deepening has settled (or
   ``--settle-timeout`` passed), started again on the same database, and asked again.

Per pass it prints P50/P90/P99 of the wall time per request (client side) and per function
(the request's time divided by its functions: what one function of a build waits), the cache
hits, the functions still ``improving``, and the cycle totals of the returned programs. The
cycles are measured here, not taken from the responses: every function of every returned
module is run against the client's baseline on the verifier's witnesses (the same seed for
all passes), which also re-checks it: ``differ`` counts functions a witness shows to behave
unlike the client's (a verifier bug: must be 0), ``unreached`` those on which no random or
guard-directed witness runs the client's baseline to its return (their cycles are those of
the failing runs, the same measurement in every pass). Usage::

    python benchmarks/latency.py                       # defaults: DEFAULT_DEADLINE_MS, ...
    python benchmarks/latency.py --deadline-ms 300 --deepen-budget 1 --settle-timeout 900
    python benchmarks/latency.py --out var/latency.json

Targets on the 2-core development machine: warm P90 <= 50 ms per request, cold P90 <= the
default deadline + 100 ms; pass 3's cycles no worse than pass 1's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
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
        from tasmopt.errors import TasmSyntaxError
        from tasmopt.module import ModuleText
        from tasmopt.vm.equivalence import check_function

        labels = self.labels[name]
        client = ModuleText.from_text(self.modules[name]["compiler_tasm"], labels)
        out = ModuleText.from_text(tasm, labels)
        cyc = base = measured = wrong = blind = 0
        for fn in client.functions:
            if fn not in out.functions:
                continue
            key = (name, fn, out.closure_text(fn)[0])
            if key not in self._memo:
                try:
                    ref = client.harness(fn, "release")
                    cand = out.harness(fn, "release")
                except TasmSyntaxError:
                    continue  # upstream text of TIR that cannot be lowered: not measurable
                v = check_function(ref, cand, witnesses=self.witnesses, seed=0)
                self._memo[key] = (v.cycles, v.baseline_cycles, v.witness >= 0, v.halted == 0)
            c, b, differs, unreached = self._memo[key]
            cyc, base, measured = cyc + c, base + b, measured + 1
            wrong, blind = wrong + differs, blind + unreached
        return cyc, base, measured, wrong, blind


def settle(server: Server, timeout: float) -> float:
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        depths = server.queue_depths()
        if depths.get("deepen", 0) == 0 and depths.get("followup", 0) == 0:
            return time.monotonic() - t
        time.sleep(2)
    return float("inf")


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
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    files = sorted(args.data.glob("*.json"))
    if not files:
        print(f"no module files in {args.data}", file=sys.stderr)
        return 1
    modules = {p.stem: json.loads(p.read_text()) for p in files}
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="tasmopt-latency-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{work / 'tasmopt.db'}",
        SPOOL_DIR=str(work / "spool"),
        LOG_LEVEL="WARNING",
    )
    if args.deadline_ms is not None:
        env["DEFAULT_DEADLINE_MS"] = str(args.deadline_ms)
    if args.deepen_budget is not None:
        env["DEEPEN_BUDGET_S"] = str(args.deepen_budget)
    server = Server(work, env)
    passes: dict[str, dict] = {}
    settled = float("nan")
    try:
        server.start()
        for label in ("cold", "warm"):
            order = list(modules)
            rng.shuffle(order)
            passes[label] = run_pass(server, modules, order)
        settled = settle(server, args.settle_timeout)
        server.stop()
        server = Server(work, env)
        server.start()
        order = list(modules)
        rng.shuffle(order)
        passes["after restart"] = run_pass(server, modules, order)
    finally:
        server.stop()
    measure = Measure(modules)
    print(f"server: {work}; deepening settled {settled:.0f} s after the warm pass")
    print(
        "| pass | req P50 | req P90 | req P99 | fn P50 | fn P90 | fn P99 | hits | improving |"
        " cycles (baseline) | differ | unreached |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    figures: dict[str, Any] = {"settled_s": settled, "passes": {}}
    for label, p in passes.items():
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
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
