"""The model's marginal contribution at equal wall-clock budget (issue 12, design §4).

For each module (TIR and the client's compiler TASM), three cold compiles: rules+search at
a search budget ``B``; rules+search+model at ``B``; and rules+search again with the model's
extra wall-clock time ``x = max(0, t_model - t_rules+search)`` spent on more search. The
search budget is a count of states, not a wall-clock bound, so the extra time is converted at
the rate the first run's candidate stage showed: ``B_eq = B * (t_c + x) / t_c`` (``t_c``:
seconds of the rules+search run's ``candidates`` stage; adding ``x`` seconds to ``B`` bought
several times more states than the time allows). Two ways to run it, and neither is exact:

* capped (default): the model run's wall time is the third run's deadline. A larger search
  also produces more candidates to verify, so the deadline can cut verification, and every
  cut function falls back to the baseline: the column can be *worse* than plain
  rules+search (std.crypto.keccak256: 8,720 cycles against 3,665), which flatters the model;
* uncapped: no deadline; the run takes longer than the model run (on five real modules,
  596 s against 167 s), which flatters the search.

Read the two together; ``seconds`` says how long each run took. A third reading avoids
both: `search_curve` compiles the same modules with rules+search alone at several budgets
(no deadline), and the model earns its time only where its run's (seconds, cycles) point
lies below that curve. On the five modules above (search budget 0.5 s, model decoding
blocks of >= 7 instructions) it does not: rules+search+model 9,324 cycles in 85 s with 32
beams and in 50 s with 8, rules+search alone 9,276 in 48 s at 1 s of budget and 9,221 in 88 s
at 2 s. At 2 s (background deepening's budget) the model adds 3 cycles (9,218) for 48 s more;
4 s of search is worse (9,245 in 167 s: this machine runs the states budget slower than
``STATES_PER_SECOND`` assumes, so the search's wall-clock guard cuts it). Every compile starts
cold
(fresh search and model caches, no memoized verdicts) after one warm-up compile of the
module, so that one-time costs (lowering, attestation, concolic caches) are not charged to
whichever run comes first.
Reported per module and in total: summed clock cycles of the three runs, blocks whose
chosen candidate came from the model, and blocks where the model run beats the
equal-budget run (and the reverse).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tasmopt.deadline import Deadline
from tasmopt.optimizer import compile as compile_tir
from tasmopt.report import CompileOptions, CompileResult
from tasmopt.rules import RulesSource
from tasmopt.search.source import SearchSource
from tasmopt.sources import CandidateSource, SourceSet
from tasmopt.vm.equivalence import clear_block_verdicts

__all__ = [
    "marginal_contribution",
    "marginal_markdown",
    "search_curve",
    "source_rates",
    "rates_markdown",
    "cold_answers",
    "cold_markdown",
    "record_rates",
]


def _cold(model: CandidateSource) -> SourceSet:
    """Fresh sources for a cold compile: the model's decode cache and every memoized block
    verdict cleared, a new search source."""
    clear = getattr(model, "clear_cache", None)
    if clear is not None:
        clear()
    clear_block_verdicts()
    return SourceSet([RulesSource(), SearchSource(), model])


def _cold_compile(
    model: CandidateSource, args: tuple[Any, Any], options: CompileOptions
) -> tuple[CompileResult, float]:
    """One cold compile of ``args`` (TIR, client TASM) with `_cold` sources: the result and
    its wall-clock seconds (the sources are made before the clock starts)."""
    sources = _cold(model)
    t0 = time.perf_counter()
    result = compile_tir(*args, options=options, sources=sources)
    return result, time.perf_counter() - t0


def _blocks(result: CompileResult) -> dict[tuple[str, int], Any]:
    return {(f.name, b.index): b for f in result.functions for b in f.blocks}


def marginal_contribution(
    model: CandidateSource,
    modules: Iterable[Path],
    *,
    budget_s: float = 0.5,
    seed: int = 0,
    progress: bool = False,
    cap: bool = True,
) -> list[dict[str, Any]]:
    """One row per module file (trident-std JSON: ``tir``, ``compiler_tasm``, ``module``):
    ``cycles`` (``rs``, ``all``, ``eq``), ``model_blocks``, ``model_beats_eq``,
    ``eq_beats_model``, ``model_wins`` (the blocks where rules+search+model is cheaper than
    rules+search: function, block, baseline ``instrs``, cycles of both, chosen source),
    ``seconds`` (per run), ``search_budget_eq_s`` and ``rs_candidates_s`` (``B_eq`` and
    ``t_c``). See the module docstring. ``cap=False``:
    the equal-budget run gets the extra search budget but no deadline (it then runs longer
    than the model run: the search budget does not bound verification)."""
    base = CompileOptions(
        sources=("rules", "search"), search_budget_s=budget_s, use_cache=False, seed=seed
    )
    out = []
    for path in tqdm(list(modules), desc="modules", unit="module", disable=not progress):
        mod = json.loads(Path(path).read_text())
        args = (mod["tir"], mod.get("compiler_tasm"))
        compile_tir(*args, options=replace(base, sources=("rules",)), sources=_cold(model))
        runs, times = {}, {}
        for label, opts in (("rs", base), ("all", replace(base, sources=(*base.sources, "model")))):
            runs[label], times[label] = _cold_compile(model, args, opts)
        extra = max(0.0, times["all"] - times["rs"])
        t_c = runs["rs"].timings.get("candidates", 0.0)
        budget_eq = budget_s * (t_c + extra) / t_c if t_c > 0 else budget_s + extra
        # the same wall clock: the model run's time is the deadline
        runs["eq"], times["eq"] = _cold_compile(
            model,
            args,
            replace(
                base, search_budget_s=budget_eq, deadline=Deadline(times["all"]) if cap else None
            ),
        )
        b_rs, b_all, b_eq = _blocks(runs["rs"]), _blocks(runs["all"]), _blocks(runs["eq"])
        out.append(
            {
                "module": mod.get("module", Path(path).stem),
                "cycles": {k: r.cycles for k, r in runs.items()},
                "model_blocks": sum(b.source == "model" for b in b_all.values()),
                "model_beats_eq": sum(
                    b.cycles < b_eq[k].cycles for k, b in b_all.items() if k in b_eq
                ),
                "eq_beats_model": sum(
                    b_eq[k].cycles < b.cycles for k, b in b_all.items() if k in b_eq
                ),
                "model_wins": [
                    {
                        "function": k[0],
                        "block": k[1],
                        "instrs": len(b_rs[k].baseline_tasm),
                        "rs": b_rs[k].cycles,
                        "all": b.cycles,
                        "source": b.source,
                    }
                    for k, b in sorted(b_all.items())
                    if k in b_rs and b.cycles < b_rs[k].cycles
                ],
                "seconds": times,
                "search_budget_eq_s": budget_eq,
                "rs_candidates_s": t_c,
                "capped": cap,
            }
        )
    return out


def marginal_markdown(rows: list[dict[str, Any]], budget_s: float) -> str:
    """The table: per module and in total."""
    capped = all(r.get("capped", True) for r in rows)
    eq = "equal time (capped)" if capped else "model's extra time, uncapped"
    lines = [
        f"## Marginal contribution of the model (search budget {budget_s:g} s; `eq`: "
        "rules+search with the model's extra time as search budget"
        + (", the model run's time as deadline)" if capped else ", no deadline)"),
        "",
        f"| module | rules+search | +model | rules+search, {eq} | model blocks | "
        "model beats eq | eq beats model | s (r+s / +model / eq) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in [*rows, None]:
        if r is None:
            if not rows:
                break
            r = {
                "module": "**total**",
                "cycles": {k: sum(x["cycles"][k] for x in rows) for k in ("rs", "all", "eq")},
                "seconds": {k: sum(x["seconds"][k] for x in rows) for k in ("rs", "all", "eq")},
                **{
                    k: sum(x[k] for x in rows)
                    for k in ("model_blocks", "model_beats_eq", "eq_beats_model")
                },
            }
        c, s = r["cycles"], r["seconds"]
        lines.append(
            f"| {r['module']} | {c['rs']} | {c['all']} | {c['eq']} | {r['model_blocks']} | "
            f"{r['model_beats_eq']} | {r['eq_beats_model']} | "
            f"{s['rs']:.1f} / {s['all']:.1f} / {s['eq']:.1f} |"
        )
    wins = [(r["module"], w) for r in rows for w in r.get("model_wins", [])]
    lines += [
        "",
        f"Blocks where rules+search+model is cheaper than rules+search: {len(wins)}"
        + (
            f", {sum(w['rs'] - w['all'] for _, w in wins)} cycles in one pass through each "
            "(the totals above are executed clock cycles: a block off the executed path, or "
            "one a function-level rewrite replaces, saves nothing there)"
            if wins
            else ""
        ),
    ]
    if wins:
        lines += ["", "| module | function:block | instructions | rules+search | +model |"]
        lines += ["|---|---|---|---|---|"]
        lines += [
            f"| {m} | {w['function']}:{w['block']} | {w['instrs']} | {w['rs']} | {w['all']} |"
            for m, w in wins
        ]
    return "\n".join(lines) + "\n"


def search_curve(
    modules: Iterable[Path], budgets: Iterable[float], *, seed: int = 0, progress: bool = False
) -> list[dict[str, Any]]:
    """Rules+search alone at each search budget (seconds, no deadline), cold, summed over
    ``modules``: one row per budget, ``budget_s``, ``cycles``, ``seconds`` (wall clock of the
    compiles). The curve the model run's (seconds, cycles) is read against."""
    files = list(modules)
    out = []
    for budget in budgets:
        cycles, seconds = 0, 0.0
        for path in tqdm(files, desc=f"budget {budget:g} s", unit="module", disable=not progress):
            mod = json.loads(Path(path).read_text())
            clear_block_verdicts()
            opts = CompileOptions(
                sources=("rules", "search"), search_budget_s=budget, use_cache=False, seed=seed
            )
            t0 = time.perf_counter()
            result = compile_tir(
                mod["tir"],
                mod.get("compiler_tasm"),
                options=opts,
                sources=SourceSet([RulesSource(), SearchSource()]),
            )
            seconds += time.perf_counter() - t0
            cycles += result.cycles
        out.append({"budget_s": budget, "cycles": cycles, "seconds": seconds})
    return out


def source_rates(
    model: CandidateSource,
    modules: Iterable[Path],
    *,
    budget_s: float = 0.5,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """What each source saves per second of its own, on top of the rules (the anytime
    compile's quick tier): every module compiled cold with ``rules``, ``rules+search`` and
    ``rules+model`` (no deadline, search budget ``budget_s``).

    Returns:
        ``search`` and ``model``: ``saved`` (clock cycles below the rules-only answer, summed),
        ``extra_s`` (seconds beyond the rules-only compiles), ``cycles_per_s`` (their ratio;
        0 when nothing was saved); ``rules_cycles``, ``rules_s``, ``modules``, ``budget_s``
        and ``model_first`` (the model's rate beats the search's: under a deadline the
        model's tier goes first, `tasmopt.optimizer.tiers`).
    """
    base = CompileOptions(sources=("rules",), search_budget_s=budget_s, use_cache=False, seed=seed)
    cycles = {"rules": 0, "search": 0, "model": 0}
    seconds = {"rules": 0.0, "search": 0.0, "model": 0.0}
    files = list(modules)
    for path in tqdm(files, desc="modules", unit="module", disable=not progress):
        mod = json.loads(Path(path).read_text())
        args = (mod["tir"], mod.get("compiler_tasm"))
        compile_tir(*args, options=base, sources=_cold(model))  # warm-up: one-time costs
        for label, names in (
            ("rules", ("rules",)),
            ("search", ("rules", "search")),
            ("model", ("rules", "model")),
        ):
            result, took = _cold_compile(model, args, replace(base, sources=names))
            seconds[label] += took
            cycles[label] += result.cycles
    out: dict[str, Any] = {
        "modules": len(files),
        "budget_s": budget_s,
        "rules_cycles": cycles["rules"],
        "rules_s": seconds["rules"],
    }
    for label in ("search", "model"):
        saved = cycles["rules"] - cycles[label]
        extra = max(seconds[label] - seconds["rules"], 1e-3)
        out[label] = {
            "saved": saved,
            "extra_s": seconds[label] - seconds["rules"],
            "cycles_per_s": saved / extra if saved > 0 else 0.0,
        }
    out["model_first"] = out["model"]["cycles_per_s"] > out["search"]["cycles_per_s"]
    return out


def cold_answers(
    model: CandidateSource,
    modules: Iterable[Path],
    *,
    deadline_ms: int = 200,
    seed: int = 0,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Each module compiled cold under a ``deadline_ms`` deadline (the service's default
    synchronous compile) with rules+search and with rules+search+model (the model's tier
    where `tasmopt.optimizer.tiers` puts it): one row per module, ``module``,
    ``baseline_cycles``, ``cycles`` (``rs``, ``model``: the answer's clock cycles, a function
    returned unmeasured counted at its baseline) and ``seconds``."""
    rows = []
    for path in tqdm(list(modules), desc="modules", unit="module", disable=not progress):
        mod = json.loads(Path(path).read_text())
        args = (mod["tir"], mod.get("compiler_tasm"))
        measure = compile_tir(
            *args, options=CompileOptions(sources=(), use_cache=False), sources=_cold(model)
        )
        baseline = {f.name: f.baseline_cycles for f in measure.functions if f.measured}
        row: dict[str, Any] = {
            "module": mod.get("module", Path(path).stem),
            "baseline_cycles": sum(baseline.values()),
            "cycles": {},
            "seconds": {},
        }
        for label, names in (("rs", ("rules", "search")), ("model", ("rules", "search", "model"))):
            opts = CompileOptions(
                sources=names, use_cache=False, seed=seed, deadline=Deadline(deadline_ms / 1000)
            )
            result, row["seconds"][label] = _cold_compile(model, args, opts)
            row["cycles"][label] = sum(
                f.cycles if f.measured else baseline.get(f.name, 0) for f in result.functions
            )
        rows.append(row)
    return rows


def cold_markdown(rows: list[dict[str, Any]], deadline_ms: int) -> str:
    """The cold-answer table: per module and in total, cycles saved against the baseline
    without and with the model."""
    lines = [
        f"## Cold answers at a {deadline_ms} ms deadline (clock cycles; saved against the "
        "client's baseline)",
        "",
        "| module | baseline | rules+search | +model | saved without / with the model | "
        "s (without / with) |",
        "|---|---|---|---|---|---|",
    ]
    for r in [*rows, None]:
        if r is None:
            if not rows:
                break
            r = {
                "module": "**total**",
                "baseline_cycles": sum(x["baseline_cycles"] for x in rows),
                "cycles": {k: sum(x["cycles"][k] for x in rows) for k in ("rs", "model")},
                "seconds": {k: sum(x["seconds"][k] for x in rows) for k in ("rs", "model")},
            }
        b, c, s = r["baseline_cycles"], r["cycles"], r["seconds"]
        lines.append(
            f"| {r['module']} | {b} | {c['rs']} | {c['model']} | {b - c['rs']} / "
            f"{b - c['model']} | {s['rs']:.2f} / {s['model']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def rates_markdown(rates: dict[str, Any]) -> str:
    """The per-source rate table of `source_rates`."""
    lines = [
        f"## Saving per second over the rules ({rates['modules']} modules, search budget "
        f"{rates['budget_s']:g} s, cold, no deadline)",
        "",
        "| source | cycles saved | extra seconds | cycles per second |",
        "|---|---|---|---|",
    ]
    for label in ("search", "model"):
        x = rates[label]
        lines.append(f"| {label} | {x['saved']} | {x['extra_s']:.1f} | {x['cycles_per_s']:.1f} |")
    order = "before" if rates["model_first"] else "after"
    lines += ["", f"Under a deadline the model's tier runs {order} the search's."]
    return "\n".join(lines) + "\n"


def record_rates(checkpoint: Path, rates: dict[str, Any]) -> None:
    """Merge `source_rates` into the checkpoint's ``metrics.json`` under ``rates`` (what
    `tasmopt.model.source.load_model_source` reads to place the model's tier)."""
    path = Path(checkpoint) / "metrics.json"
    metrics = json.loads(path.read_text()) if path.exists() else {}
    metrics["rates"] = rates
    path.write_text(json.dumps(metrics, indent=2) + "\n")
