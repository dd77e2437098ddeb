"""Model inference cost: encoder and decoder time per step, beams/s, end-to-end latency per
function (P50/P90) at K=8 and K=32, peak memory.

Decodes every function of the real toolchain data (or of a pairs directory's split) as one
batch of its blocks, the way `tasmopt.model.source.ModelSource` does for a request. Usage::

    python benchmarks/model.py --checkpoint model_store/s1-real-v1
    python benchmarks/model.py --checkpoint DIR --data data/pairs/real-v1 --split holdout \\
        --k 8 32 --functions 40 --threads 2 --device cpu
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --marginal 30
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --marginal 30 --samples 32
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --marginal 1 --samples 32 \
        --modules std_crypto_keccak256 std_crypto_sha256
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --marginal 1 \
        --min-instrs 7 --curve 0.5 1 2 4 --modules std_crypto_keccak256 std_fhe_rlwe \
        std_crypto_sha256 std_crypto_auth coin
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --stage3 20
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --per-module --k 1 8 32 \
        --precision float32 int8 --min-instrs 8 --threads 2
    python benchmarks/model.py --checkpoint model_store/s1-corpus-v1 --stage2 10 --verify-workers 2

``--marginal N``: the model's marginal contribution on the N smallest real modules: cycles of
rules+search, of rules+search+model, and of rules+search given the model's extra wall-clock
time as search budget (equal budget), blocks the model won, seconds; ``--curve B...`` adds
rules+search alone at those budgets (the cost curve: the model earns its time only where its
run lies below it); ``--min-instrs N``: the model decodes only blocks of at least N
instructions; ``--beams K``: beams per block. ``--per-module``: every block of each real
module decoded as one request of the model source (the service's path: one batch, repeated
blocks once), per-module latency at each ``--k`` (K=1: greedy decoding with baseline drafts)
and ``--precision``. ``--stage3 STEPS``: the cost of one Stage 3 micro-finetune step;
``--stage2 STEPS``: of one Stage 2 step, split into sampling, verification and update.

Without ``--checkpoint`` a randomly initialized model of the default size is timed (the
cost does not depend on the weights, only on the hypotheses' lengths, which are bounded by
the baseline's). Peak memory is the process's max RSS on CPU and the allocator's peak on CUDA.
On a shared CPU, wall-clock latency swings with the other processes' load; the process CPU
time per function (all threads) is printed beside it as the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from tasmopt.model.beam import beam_search
from tasmopt.model.checkpoint import load_model
from tasmopt.model.config import ModelConfig
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "trident-std"


def functions_from_modules(directory: Path, limit: int) -> list[list[tuple]]:
    """Per function, its blocks as (ops, entry_depth, net_effect, baseline instrs)."""
    from tasmopt.lower.triton import lower

    out: list[list[tuple]] = []
    for path in sorted(directory.glob("*.json")):
        ops = decode(json.loads(path.read_text())["tir"])
        low = lower(ops)
        for f in low.functions:
            if f.unlowerable or not f.name:
                continue
            blocks = []
            for b in f.blocks:
                text = "\n".join(
                    ln
                    for ln in low.lines[b.start : b.end]
                    if ln.strip() and not ln.strip().startswith("//")
                )
                base = parse_instructions(text)
                if base:
                    blocks.append((b.ops, b.entry_depth, b.net_effect, base))
            if blocks:
                out.append(blocks)
    return out[:limit]


def functions_from_pairs(directory: Path, split: str, limit: int) -> list[list[tuple]]:
    from tasmopt.train.dataset import read_pairs

    _, rows = read_pairs(directory, [split])
    groups: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for r in rows:
        groups[(r.module, r.function)].append(
            (decode(r.tir), r.entry_depth, r.net_effect, parse_instructions("\n".join(r.baseline)))
        )
    return list(groups.values())[:limit]


def q(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) if xs else float("nan")


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def real_modules(smallest: int, names: list[str] | None = None) -> list[Path]:
    """The ``smallest`` smallest real module files, or the modules ``names`` (file stems)."""
    if not names:
        return sorted(SHARED.glob("*.json"), key=lambda p: p.stat().st_size)[:smallest]
    files = [SHARED / f"{n}.json" for n in names]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise SystemExit(f"no such real module: {', '.join(missing)}")
    return files


def marginal(
    checkpoint: Path,
    modules: int,
    budget_s: float,
    seed: int,
    cap: bool = True,
    samples: int = 0,
    temperature: float = 1.0,
    names: list[str] | None = None,
    min_instrs: int = 0,
    beams: int | None = None,
    precision: str = "float32",
    rates: bool = False,
) -> list[dict]:
    """The model's marginal contribution on the ``modules`` smallest real modules at equal
    wall-clock budget (`tasmopt.train.marginal`); prints the table. ``samples``: sampled
    hypotheses per block after the 32 beams, at ``temperature``. ``names``: these modules
    (file stems) instead of the smallest ones. ``min_instrs``: the model decodes only blocks
    of at least this many baseline instructions (MODEL_MIN_INSTRS). ``beams``: beams per block
    (default: the service's, SERVICE_BEAMS). ``precision``: the model's weights (float32 or
    int8). ``rates``: also print each source's saving per second over the rules and the cold
    answers at a 200 ms deadline with and without the model (`tasmopt eval --marginal`'s
    tables)."""
    from tasmopt.model.config import SERVICE_BEAMS
    from tasmopt.model.source import load_model_source
    from tasmopt.train.marginal import marginal_contribution, marginal_markdown

    files = real_modules(modules, names)
    source = load_model_source(
        checkpoint,
        k=beams or SERVICE_BEAMS,
        samples=samples,
        temperature=temperature,
        min_instrs=min_instrs,
        precision=precision,  # type: ignore[arg-type]  # argparse choices
    )
    progress = sys.stderr.isatty()
    rows = marginal_contribution(
        source, files, budget_s=budget_s, seed=seed, progress=progress, cap=cap
    )
    print(marginal_markdown(rows, budget_s))
    if rates:
        from tasmopt.train.marginal import cold_answers, cold_markdown, rates_markdown, source_rates

        print(rates_markdown(source_rates(source, files, budget_s=budget_s, seed=seed)))
        print(cold_markdown(cold_answers(source, files, seed=seed, progress=progress), 200))
    return rows


def curve(
    modules: int, budgets: list[float], seed: int, names: list[str] | None = None
) -> list[dict]:
    """Rules+search alone on the same modules as `marginal` at each budget
    (`tasmopt.train.marginal.search_curve`); prints budget, cycles, seconds."""
    from tasmopt.train.marginal import search_curve

    rows = search_curve(
        real_modules(modules, names), budgets, seed=seed, progress=sys.stderr.isatty()
    )
    print("| search budget (s) | rules+search cycles | seconds |\n|---|---|---|")
    for r in rows:
        print(f"| {r['budget_s']:g} | {r['cycles']} | {r['seconds']:.1f} |")
    return rows


def module_tasks(path: Path) -> list:
    """The `BlockTask` of every block of a real module's lowering (what a request of the
    module hands the candidate sources)."""
    from tasmopt.lower.triton import lower
    from tasmopt.sources import BlockTask
    from tasmopt.tir.codec import tir_hash

    low = lower(decode(json.loads(path.read_text())["tir"]))
    tasks = []
    for f in low.functions:
        if f.unlowerable or not f.name:
            continue
        for i, b in enumerate(f.blocks):
            text = "\n".join(
                ln
                for ln in low.lines[b.start : b.end]
                if ln.strip() and not ln.strip().startswith("//")
            )
            base = parse_instructions(text)
            if base:
                ops = tuple(b.ops)
                tasks.append(
                    BlockTask(
                        f.name,
                        i,
                        f"{f.name}/{i}",
                        ops,
                        tuple(base),
                        b.entry_depth,
                        b.net_effect,
                        tir_hash(ops),
                    )
                )
    return tasks


def per_module(
    checkpoint: Path | None,
    beams: list[int],
    precisions: list[str],
    min_instrs: int,
    device: str,
) -> list[dict]:
    """Every block of each of the 30 real modules decoded by the model source as one request
    (`ModelSource.propose`: one batch, repeated blocks once, cold cache), at each beam width
    and precision; prints a row per setting with the per-module latency P50/P90/max and the
    slowest module, and for every precision after the first, on how many blocks its
    candidates are the first precision's. Target (issue 35): P90 <= 100 ms at the service's
    K on 2 CPU cores."""
    from tasmopt.model.checkpoint import for_inference
    from tasmopt.model.source import ModelSource
    from tasmopt.report import CompileOptions

    base = load_model(checkpoint, device) if checkpoint else TasmModel(ModelConfig()).to(device)
    base.eval()
    modules = [(p.stem, module_tasks(p)) for p in sorted(SHARED.glob("*.json"))]
    print(
        f"{len(modules)} modules, {sum(len(t) for _, t in modules)} blocks; "
        f"min_instrs {min_instrs}; device {device}, threads {torch.get_num_threads()}"
    )
    out = []
    options = CompileOptions()
    first: dict[int, list] = {}  # per K, the first precision's candidates
    for precision in precisions:
        model = for_inference(base, precision)  # type: ignore[arg-type]  # argparse choices
        for k in beams:
            src = ModelSource(model, "bench", k=k, min_instrs=min_instrs)
            src.propose(modules[0][1], options)  # warm-up
            lat: dict[str, float] = {}
            got = []
            for name, tasks in modules:
                src.clear_cache()
                t0 = time.perf_counter()
                got.extend(src.propose(tasks, options))
                lat[name] = time.perf_counter() - t0
            xs = list(lat.values())
            worst = max(lat, key=lambda n: lat[n])
            row = {
                "precision": precision,
                "k": k,
                "p50_ms": 1000 * q(xs, 50),
                "p90_ms": 1000 * q(xs, 90),
                "max_ms": 1000 * max(xs),
                "slowest": worst,
                "total_s": sum(xs),
            }
            same = ""
            if k in first:  # the same candidates, in the same order, as the first precision's
                row["same_as_" + precisions[0]] = sum(a == b for a, b in zip(got, first[k]))
                same = f"  same as {precisions[0]}: {row['same_as_' + precisions[0]]}/{len(got)}"
            else:
                first[k] = got
            out.append(row)
            print(
                f"{precision:8s} K={k:3d}  per module P50 {row['p50_ms']:7.0f} ms  "
                f"P90 {row['p90_ms']:7.0f} ms  max {row['max_ms']:7.0f} ms ({worst})  "
                f"all 30: {row['total_s']:.1f} s{same}",
                flush=True,
            )
    return out


def stage3_step_cost(checkpoint: Path | None, steps: int, batch_size: int, device: str) -> float:
    """Seconds per Stage 3 micro-finetune step (teacher-forced cross-entropy, AdamW, batch
    of ``batch_size`` real-data blocks), median over ``steps`` steps after one warm-up."""
    from tasmopt.train.corpus import real_rows
    from tasmopt.train.dataset import PairDataset, collate

    model = load_model(checkpoint, device) if checkpoint else TasmModel(ModelConfig()).to(device)
    rows = real_rows(SHARED, cache=ROOT / "var" / "eval")
    ds = PairDataset(rows[: batch_size * (steps + 1)], max_len=model.config.max_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    times = []
    for s in range(steps + 1):
        batch, tokens, _ = collate([ds[(s * batch_size + i) % len(ds)] for i in range(batch_size)])
        batch, tokens = batch.to(device), tokens.to(device)
        t0 = time.perf_counter()
        _, loss = model(batch, tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if s:
            times.append(time.perf_counter() - t0)
    per = statistics.median(times)
    print(
        f"stage 3 step: {1000 * per:.0f} ms per step of {batch_size} blocks on {device} "
        f"({model.num_parameters() / 1e6:.2f}M parameters; 200 steps = {200 * per:.0f} s)"
    )
    return per


def stage2_step_cost(
    checkpoint: Path, steps: int, device: str, verify_workers: int
) -> dict[str, float]:
    """Seconds per Stage 2 step (8 real-data blocks x 8 sampled trajectories: sampling,
    verification of every new candidate, trajectory-balance update), medians over ``steps``
    steps after one warm-up; the checkpoint it writes goes to a temporary directory."""
    import tempfile

    from tasmopt.train.corpus import real_rows
    from tasmopt.train.gflownet import Stage2Config, train_stage2

    rows = real_rows(SHARED, cache=ROOT / "var" / "eval")
    cfg = Stage2Config(
        steps=steps + 1, device=device, verify_workers=verify_workers, partial_steps=0
    )
    with tempfile.TemporaryDirectory() as tmp:
        hist = train_stage2(checkpoint, rows, Path(tmp), "timing", cfg).history[1:]
    med = {
        k: statistics.median(h[k] for h in hist)
        for k in ("seconds", "sample_s", "verify_s", "update_s")
    }
    print(
        f"stage 2 step: {1000 * med['seconds']:.0f} ms per step of 8 blocks x 8 trajectories on "
        f"{device} (sampling {1000 * med['sample_s']:.0f} ms, verification "
        f"{1000 * med['verify_s']:.0f} ms with {verify_workers} worker processes, update "
        f"{1000 * med['update_s']:.0f} ms; 1000 steps = {1000 * med['seconds'] / 60:.1f} min)"
    )
    return med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--checkpoint", type=Path, help="checkpoint directory (default: random)")
    ap.add_argument("--data", type=Path, help="pairs directory (default: the real modules)")
    ap.add_argument("--split", default="holdout", help="split of --data (default holdout)")
    ap.add_argument("--k", type=int, nargs="+", default=[8, 32], help="beam widths")
    ap.add_argument("--functions", type=int, default=60, help="functions to decode")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument(
        "--marginal",
        type=int,
        metavar="N",
        help="print the marginal-contribution table on the N smallest real modules instead",
    )
    ap.add_argument("--budget", type=float, default=0.5, help="search budget (s) for --marginal")
    ap.add_argument(
        "--samples", type=int, default=0, help="--marginal: sampled hypotheses per block"
    )
    ap.add_argument(
        "--modules",
        nargs="+",
        metavar="NAME",
        help="--marginal: these real modules (file stems, e.g. std_crypto_keccak256) "
        "instead of the N smallest",
    )
    ap.add_argument(
        "--temperature", type=float, default=1.0, help="--marginal: sampling temperature"
    )
    ap.add_argument(
        "--curve",
        type=float,
        nargs="+",
        metavar="BUDGET",
        help="--marginal: also compile the same modules with rules+search alone at these "
        "search budgets (s, no deadline): the cost curve the model run is read against",
    )
    ap.add_argument(
        "--beams", type=int, help="--marginal: beams per block (default: the service's, 32)"
    )
    ap.add_argument(
        "--min-instrs",
        type=int,
        default=0,
        help="--marginal: the model decodes only blocks of at least this many instructions",
    )
    ap.add_argument(
        "--per-module",
        action="store_true",
        help="decode every block of each real module as one request of the model source "
        "(the service's path) at each --k and --precision; per-module latency",
    )
    ap.add_argument(
        "--precision",
        nargs="+",
        default=["float32"],
        choices=["float32", "int8"],
        help="--per-module: weight precisions (MODEL_PRECISION); --marginal: the first",
    )
    ap.add_argument(
        "--rates",
        action="store_true",
        help="--marginal: also each source's saving per second over the rules and the cold "
        "answers at a 200 ms deadline with and without the model",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--uncapped",
        action="store_true",
        help="--marginal: the equal-budget run gets the extra search budget but no deadline",
    )
    ap.add_argument(
        "--stage3", type=int, metavar="STEPS", help="time STEPS Stage 3 finetune steps instead"
    )
    ap.add_argument("--stage2", type=int, metavar="STEPS", help="time STEPS Stage 2 steps instead")
    ap.add_argument("--verify-workers", type=int, default=0, help="--stage2: verifier processes")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.marginal:
        if not args.checkpoint:
            ap.error("--marginal needs --checkpoint")
        rows = marginal(
            args.checkpoint,
            args.marginal,
            args.budget,
            args.seed,
            not args.uncapped,
            args.samples,
            args.temperature,
            args.modules,
            args.min_instrs,
            args.beams,
            args.precision[0],
            args.rates,
        )
        print(json.dumps(rows))
        if args.curve:
            print(json.dumps(curve(args.marginal, args.curve, args.seed, args.modules)))
        return 0
    if args.per_module:
        rows = per_module(args.checkpoint, args.k, args.precision, args.min_instrs, args.device)
        print(json.dumps(rows))
        return 0
    if args.stage2:
        if not args.checkpoint:
            ap.error("--stage2 needs --checkpoint")
        stage2_step_cost(args.checkpoint, args.stage2, args.device, args.verify_workers)
        return 0
    if args.stage3:
        stage3_step_cost(args.checkpoint, args.stage3, 16, args.device)
        return 0
    device = args.device
    model = (
        load_model(args.checkpoint, device)
        if args.checkpoint
        else TasmModel(ModelConfig()).to(device).eval()
    )
    fns = (
        functions_from_pairs(args.data, args.split, args.functions)
        if args.data
        else functions_from_modules(SHARED, args.functions)
    )
    max_len = model.config.max_len
    print(
        f"model: {model.num_parameters() / 1e6:.2f}M parameters, device {device}, "
        f"threads {torch.get_num_threads()}, {len(fns)} functions, "
        f"{sum(len(f) for f in fns)} blocks"
    )
    sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)
    rows_out = []
    if fns:  # warm-up: allocator, thread pool, lazy initializations
        datas, imms = zip(*(block_data(o, e, n, b, max_len=max_len) for o, e, n, b in fns[0]))
        beam_search(model, batch_graphs(list(datas)).to(device), list(imms), k=max(args.k))
    for k in args.k:
        lat: list[float] = []
        cpu: list[float] = []
        enc_t: list[float] = []
        step_t: list[float] = []
        beams = 0
        for blocks in fns:
            datas, imms = zip(*(block_data(o, e, n, b, max_len=max_len) for o, e, n, b in blocks))
            batch = batch_graphs(list(datas)).to(device)
            with torch.no_grad():
                sync()
                t0 = time.perf_counter()
                enc = model.encode(batch)
                sync()
                enc_t.append(time.perf_counter() - t0)
                rows, state, cache, tok = model.start(batch, enc, k, batch.limit)
                t1 = time.perf_counter()
                model.step(rows, state, cache, tok)
                sync()
                step_t.append(time.perf_counter() - t1)
            t0, c0 = time.perf_counter(), time.process_time()
            hyps = beam_search(model, batch, list(imms), k=k)
            sync()
            dt = time.perf_counter() - t0
            lat.append(dt)
            cpu.append(time.process_time() - c0)
            steps = int(batch.limit.max())
            beams += k * len(blocks) * steps
            del hyps
        total = sum(lat)
        row = {
            "k": k,
            "latency_p50_ms": 1000 * q(lat, 50),
            "latency_p90_ms": 1000 * q(lat, 90),
            "cpu_p50_ms": 1000 * q(cpu, 50),
            "cpu_p90_ms": 1000 * q(cpu, 90),
            "encoder_ms": 1000 * statistics.median(enc_t),
            "decoder_step_ms": 1000 * statistics.median(step_t),
            "beam_steps_per_s": beams / total if total else float("nan"),
            "peak_memory_mb": peak_memory_mb(device),
        }
        rows_out.append(row)
        print(
            f"K={k:3d}  function latency P50 {row['latency_p50_ms']:8.1f} ms  "
            f"P90 {row['latency_p90_ms']:8.1f} ms  (CPU time P50 {row['cpu_p50_ms']:.0f} / "
            f"P90 {row['cpu_p90_ms']:.0f} ms)  encoder {row['encoder_ms']:6.1f} ms  "
            f"decoder step {row['decoder_step_ms']:6.1f} ms  "
            f"beam-slots/s {row['beam_steps_per_s']:9.0f}  peak {row['peak_memory_mb']:.0f} MB"
        )
    print(json.dumps(rows_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
