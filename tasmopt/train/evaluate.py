"""Evaluation of a checkpoint on a split of a pairs directory (default: holdout), design §4.

For every block the model decodes K hypotheses (beam search, all blocks of a function in
one batch), and optionally S more drawn by temperature sampling for diversity (design §3;
seeded, duplicates of the beam's removed); every hypothesis is verified against the block's
baseline with `tasmopt.vm.equivalence.check_block`. Per block:

* ``valid`` — at least one hypothesis is proven equivalent (what the service can use);
  ``top1_valid`` — the model's most likely hypothesis is; ``novel_valid`` — a valid
  hypothesis differs from the baseline (a copy of the baseline is trivially valid, so this
  and ``beats_compiler`` are what show the model doing more than copying);
* ``accepted`` — a valid hypothesis also meets the optimizer's acceptance rule (cycles <=
  baseline, no table taller); ``best_cycles`` — the cheapest accepted one;
* ``beats_compiler`` — ``best_cycles < baseline_cycles``; ``reduction`` —
  ``(baseline - best) / baseline`` (0 if nothing was accepted).

Per function the same over its blocks (valid = every block valid; reduction over the summed
block cycles). Shares come with 90 % bootstrap confidence intervals (1000 resamples,
percentile, scipy). Rows from the real toolchain and from our corpus are reported apart.
The Phase A gate (claimed on validity excluding copies of the baseline, on the template-split
holdout): validity >= 80 % and the CI's lower bound >= 70 %.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tasmopt.isa import IsaVariant
from tasmopt.model.beam import beam_search, merged, sample
from tasmopt.model.checkpoint import load_model, read_config
from tasmopt.model.config import GREEDY_MAX_PASSES
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode
from tasmopt.train.dataset import PairRow, read_pairs
from tasmopt.train.phase import PHASE_A_CI_LOW, PHASE_A_VALIDITY, phase_a_exit
from tasmopt.vm.equivalence import BlockCheck, check_block, no_taller

__all__ = [
    "BlockResult",
    "evaluate_rows",
    "evaluate",
    "bootstrap_ci",
    "summarize",
    "PHASE_A_VALIDITY",
    "PHASE_A_CI_LOW",
    "write_report",
    "record_metrics",
]

log = logging.getLogger(__name__)


@dataclass
class BlockResult:
    """Evaluation of one block (see the module docstring). Latency is the seconds of the
    function batch the block was decoded in, divided by its blocks."""

    id: str
    origin: str
    module: str
    function: str
    lines: int
    hypotheses: int
    valid_hypotheses: int
    valid: bool
    top1_valid: bool
    novel_valid: bool
    accepted: bool
    beats_compiler: bool
    baseline_cycles: int
    target_cycles: int
    best_cycles: int
    reduction: float
    latency_s: float
    best: list[str] = field(default_factory=list)


def bootstrap_ci(
    values: Sequence[float], *, confidence: float = 0.9, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (scipy.stats.bootstrap); ``(nan, nan)`` for no
    values, the value itself when all values are equal."""
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = bootstrap(
        (x,),
        np.mean,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _verify(
    row: PairRow, hyps: Sequence[Sequence[str]], witnesses: int, isa: IsaVariant
) -> tuple[int, bool, bool, bool, int, list[str]]:
    """(valid count, top-1 valid, novel valid, accepted, best cycles, best lines)."""
    base = tuple(row.baseline)
    bv = check_block(BlockCheck(base, base, isa, witnesses))
    best_cycles, best_lines, n_valid, top1, accepted = (
        row.baseline_cycles,
        list(base),
        0,
        False,
        False,
    )
    novel = False
    for i, lines in enumerate(hyps):
        v = check_block(BlockCheck(base, tuple(lines), isa, witnesses))
        if not v.equivalent:
            continue
        n_valid += 1
        top1 = top1 or i == 0
        novel = novel or tuple(lines) != base
        ok = v.cycles <= row.baseline_cycles and (
            not bv.equivalent or no_taller(v.heights, bv.heights)
        )
        if ok:
            if not accepted or v.cycles < best_cycles:
                best_cycles, best_lines = v.cycles, list(lines)
            accepted = True
    return n_valid, top1, novel, accepted, best_cycles, best_lines


def evaluate_rows(
    model: TasmModel,
    rows: Sequence[PairRow],
    *,
    k: int = 32,
    witnesses: int = 16,
    progress: bool = False,
    samples: int = 0,
    temperature: float = 1.0,
    seed: int = 0,
) -> list[BlockResult]:
    """Decode and verify every row; blocks are batched per function.

    ``samples`` > 0 adds that many temperature-sampled hypotheses per block after the
    ``k`` beams (the beam's top-1 stays first; samples equal to a beam are dropped), drawn
    from one ``torch.Generator`` seeded with ``seed`` so a run repeats exactly. With
    ``k == 1`` greedy decoding stops after `GREEDY_MAX_PASSES` forward passes, as the
    service's model source does."""
    isa = model.config.isa
    device = next(model.parameters()).device
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    groups: dict[tuple[str, str], list[PairRow]] = defaultdict(list)
    for r in rows:
        groups[(r.module, r.function)].append(r)
    out: list[BlockResult] = []
    items = list(groups.items())
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="functions", unit="fn")
    for (_module, _fn), fn_rows in items:
        datas, imms = [], []
        for r in fn_rows:
            base = parse_instructions("\n".join(r.baseline), isa)
            d, m = block_data(
                decode(r.tir),
                r.entry_depth,
                r.net_effect,
                base,
                max_len=model.config.max_len,
                isa=isa,
            )
            datas.append(d)
            imms.append(m)
        t0 = time.perf_counter()
        batch = batch_graphs(datas).to(device)
        hyps = beam_search(model, batch, imms, k=k, max_passes=GREEDY_MAX_PASSES)
        if samples:
            drawn = sample(
                model, batch, imms, k=samples, temperature=temperature, generator=generator
            )
            hyps = [merged(beam, extra) for beam, extra in zip(hyps, drawn)]
        if device.type == "cuda":
            torch.cuda.synchronize()
        latency = (time.perf_counter() - t0) / len(fn_rows)
        for r, hs in zip(fn_rows, hyps):
            lines = [[str(i) for i in h.instrs] for h in hs]
            n_valid, top1, novel, accepted, best, best_lines = _verify(r, lines, witnesses, isa)
            out.append(
                BlockResult(
                    id=r.id,
                    origin=r.origin,
                    module=r.module,
                    function=r.function,
                    lines=len(r.baseline),
                    hypotheses=len(hs),
                    valid_hypotheses=n_valid,
                    valid=n_valid > 0,
                    top1_valid=top1,
                    novel_valid=novel,
                    accepted=accepted,
                    beats_compiler=accepted and best < r.baseline_cycles,
                    baseline_cycles=r.baseline_cycles,
                    target_cycles=r.target_cycles,
                    best_cycles=best,
                    reduction=(r.baseline_cycles - best) / r.baseline_cycles
                    if accepted and r.baseline_cycles
                    else 0.0,
                    latency_s=latency,
                    best=best_lines,
                )
            )
    return out


def _share(flags: Sequence[bool], seed: int) -> dict[str, Any]:
    lo, hi = bootstrap_ci([float(f) for f in flags], seed=seed)
    return {
        "value": float(np.mean(flags)) if flags else float("nan"),
        "ci90": [lo, hi],
        "n": len(flags),
    }


def summarize(results: Sequence[BlockResult], *, seed: int = 0) -> dict[str, Any]:
    """Block- and function-level figures of some results (see the module docstring)."""
    if not results:
        return {"blocks": 0}
    valid = [r.valid for r in results]
    valid_red = [r.reduction for r in results if r.accepted]
    lat = [r.latency_s for r in results]
    fns: dict[tuple[str, str], list[BlockResult]] = defaultdict(list)
    for r in results:
        fns[(r.module, r.function)].append(r)
    fn_valid = [all(b.valid for b in bs) for bs in fns.values()]
    fn_novel = [any(b.novel_valid for b in bs) for bs in fns.values()]
    fn_red, fn_beats, fn_lat = [], [], []
    for bs in fns.values():
        base = sum(b.baseline_cycles for b in bs)
        best = sum(b.best_cycles if b.accepted else b.baseline_cycles for b in bs)
        fn_red.append((base - best) / base if base else 0.0)
        fn_beats.append(best < base)
        fn_lat.append(sum(b.latency_s for b in bs))
    accepted = [r for r in results if r.accepted]
    target_better = [r for r in results if r.target_cycles < r.baseline_cycles]
    validity = _share(valid, seed)
    novel = _share([r.novel_valid for r in results], seed)
    return {
        "blocks": len(results),
        "validity": validity,
        "top1_validity": _share([r.top1_valid for r in results], seed),
        "novel_validity": novel,
        "accepted": _share([r.accepted for r in results], seed),
        "beats_compiler": _share([r.beats_compiler for r in results], seed),
        "beats_compiler_of_valid": (
            sum(r.beats_compiler for r in accepted) / len(accepted) if accepted else float("nan")
        ),
        "matches_or_beats_target": (
            sum(r.accepted and r.best_cycles <= r.target_cycles for r in results) / len(results)
        ),
        "target_improvable_blocks": len(target_better),
        "found_target_improvement": (
            sum(r.beats_compiler for r in target_better) / len(target_better)
            if target_better
            else float("nan")
        ),
        "median_reduction_valid": statistics.median(valid_red) if valid_red else 0.0,
        "mean_reduction_valid": float(np.mean(valid_red)) if valid_red else 0.0,
        "median_reduction_beating": (
            statistics.median(r.reduction for r in results if r.beats_compiler)
            if any(r.beats_compiler for r in results)
            else 0.0
        ),
        "mean_reduction": float(np.mean([r.reduction for r in results])),
        "cycles": {
            "baseline": sum(r.baseline_cycles for r in results),
            "model": sum(r.best_cycles if r.accepted else r.baseline_cycles for r in results),
            "target": sum(r.target_cycles for r in results),
        },
        "latency_block_s": {
            "p50": float(np.percentile(lat, 50)),
            "p90": float(np.percentile(lat, 90)),
        },
        "functions": {
            "count": len(fns),
            "validity": _share(fn_valid, seed),
            "novel_validity": _share(fn_novel, seed),
            "beats_compiler": _share(fn_beats, seed),
            "median_reduction": statistics.median(fn_red),
            "latency_s": {
                "p50": float(np.percentile(fn_lat, 50)),
                "p90": float(np.percentile(fn_lat, 90)),
            },
        },
        "phase_a": {  # claimed on validity *excluding* copies of the baseline
            "validity": novel["value"],
            "ci90_low": novel["ci90"][0],
            "passed": bool(phase_a_exit(novel["value"], novel["ci90"][0])),
        },
    }


def evaluate(
    checkpoint: Path,
    data: Path | Sequence[PairRow],
    *,
    split: str = "holdout",
    k: int = 32,
    witnesses: int = 16,
    device: str = "cpu",
    limit: int | None = None,
    progress: bool = False,
    seed: int = 0,
    data_name: str | None = None,
    samples: int = 0,
    temperature: float = 1.0,
) -> tuple[dict[str, Any], list[BlockResult]]:
    """Evaluate ``checkpoint`` on ``split`` of the pairs in ``data`` (a pairs directory, or
    the rows themselves, e.g. `tasmopt.train.corpus.holdout_rows` and ``real_rows``).

    Deterministic: beam search is, verification is per seed, the ``samples`` extra
    hypotheses per block (temperature ``temperature``) are drawn with ``seed``, and the
    bootstrap CIs (1000 resamples) use ``seed``.

    Returns:
        the report (``all``, and ``real``/``corpus`` where present) and the per-block results.
    """
    config = read_config(checkpoint)
    model = load_model(checkpoint, device)
    if isinstance(data, Path):
        manifest, rows = read_pairs(data, [split])
    else:
        manifest, rows = {"name": data_name or "rows"}, list(data)
    if limit is not None:
        rows = rows[:limit]
    t0 = time.perf_counter()
    results = evaluate_rows(
        model,
        rows,
        k=k,
        witnesses=witnesses,
        progress=progress,
        samples=samples,
        temperature=temperature,
        seed=seed,
    )
    report: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "version": config["version"],
        "data": str(data) if isinstance(data, Path) else manifest["name"],
        "data_name": manifest.get("name"),
        "split": split,
        "k": k,
        "samples": samples,
        "temperature": temperature,
        "witnesses": witnesses,
        "device": device,
        "seconds": time.perf_counter() - t0,
        "seed": seed,
        "all": summarize(results, seed=seed),
    }
    for origin in ("real", "corpus"):
        part = [r for r in results if r.origin == origin]
        if part:
            report[origin] = summarize(part, seed=seed)
    return report, results


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f}%"


def _ci(share: dict[str, Any]) -> str:
    lo, hi = share["ci90"]
    return f"{_pct(share['value'])} ({_pct(lo)}–{_pct(hi)})"


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table per origin."""
    lines = [
        f"# Evaluation of `{report['version']}` on {report['split']} of `{report['data_name']}`",
        "",
        f"K = {report['k']}, {report['witnesses']} witnesses, device {report['device']}.",
        "",
    ]
    head = (
        "| origin | blocks | validity (90% CI) | top-1 valid | valid, not a copy (90% CI) | "
        "beats compiler | "
        "median reduction (accepted / beating) | fn validity (90% CI) | "
        "fn valid, not a copy (90% CI) | fn beats | P50/P90 ms per fn | Phase A |"
    )
    lines += [head, "|---" * (head.count("|") - 1) + "|"]
    for origin in ("all", "real", "corpus"):
        s = report.get(origin)
        if not s or not s.get("blocks"):
            continue
        v = s["validity"]
        f = s["functions"]
        lines.append(
            f"| {origin} | {s['blocks']} | {_pct(v['value'])} ({_pct(v['ci90'][0])}–"
            f"{_pct(v['ci90'][1])}) | {_pct(s['top1_validity']['value'])} | "
            f"{_ci(s['novel_validity'])} | "
            f"{_pct(s['beats_compiler']['value'])} | {_pct(s['median_reduction_valid'])} / "
            f"{_pct(s['median_reduction_beating'])} | "
            f"{_ci(f['validity'])} | {_ci(f['novel_validity'])} | "
            f"{_pct(f['beats_compiler']['value'])} | "
            f"{1000 * f['latency_s']['p50']:.0f}/{1000 * f['latency_s']['p90']:.0f} | "
            f"{'passed' if s['phase_a']['passed'] else 'not passed'} |"
        )
    s = report["all"]
    lines += [
        "",
        f"Cycles over the blocks: baseline {s['cycles']['baseline']}, model "
        f"{s['cycles']['model']}, best known target {s['cycles']['target']}. "
        f"Blocks whose known target beats the compiler: {s['target_improvable_blocks']}, "
        f"of which the model found an improvement for "
        f"{_pct(s['found_target_improvement'])}.",
        "",
    ]
    return "\n".join(lines)


def write_report(report: dict[str, Any], results: Sequence[BlockResult], out: Path) -> None:
    """``report.json``, ``report.md``, ``blocks.jsonl`` and two plots into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(markdown(report))
    with open(out / "blocks.jsonl", "w") as f:
        for r in results:
            f.write(json.dumps(asdict(r)) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    by_len: dict[int, list[bool]] = defaultdict(list)
    for r in results:
        by_len[min(r.lines, 32) // 4 * 4].append(r.valid)
    xs = sorted(by_len)
    axes[0].bar([str(x) for x in xs], [np.mean(by_len[x]) for x in xs], color="tab:blue")
    axes[0].set_xlabel("baseline lines (bucket of 4, 32 = 32+)")
    axes[0].set_ylabel("validity")
    axes[0].set_ylim(0, 1)
    axes[0].set_title("validity by block length")
    red = [100 * r.reduction for r in results if r.accepted]
    axes[1].hist(red, bins=20, color="tab:green")
    axes[1].set_xlabel("cycle reduction of accepted blocks (%)")
    axes[1].set_ylabel("blocks")
    axes[1].set_title("cycle reduction")
    fig.tight_layout()
    fig.savefig(out / "report.png", dpi=100)
    plt.close(fig)


def record_metrics(checkpoint: Path, report: dict[str, Any]) -> None:
    """Merge a holdout evaluation into the checkpoint's ``metrics.json``: the keys the
    service's phase logic reads (``holdout_validity``, ``holdout_validity_ci_low``, as
    fractions: validity *excluding copies* of the baseline on the template-split corpus
    holdout, else on all rows) and the whole report under ``evaluation``."""
    path = Path(checkpoint) / "metrics.json"
    metrics = json.loads(path.read_text()) if path.exists() else {}
    s = report.get("corpus") or report["all"]
    metrics.update(
        {
            "holdout_validity": s["novel_validity"]["value"],
            "holdout_validity_ci_low": s["novel_validity"]["ci90"][0],
            "holdout_validity_with_copies": s["validity"]["value"],
            "holdout_beats_compiler": s["beats_compiler"]["value"],
            "holdout_median_reduction": s["median_reduction_valid"],
            "evaluation": report,
        }
    )
    path.write_text(json.dumps(metrics, indent=2) + "\n")
