"""Training pairs from the real Trident toolchain data (``shared/data/trident-std/*.json``).

Each module is lowered and optimized with `tasmopt.optimizer.compile` (candidate sources
``rules`` and, when registered, ``search``; never ``model``, so targets never come from the
model being trained), and every block's best verified TASM becomes its target: never worse
than the baseline, since the optimizer only accepts verified candidates with cycles <= the
baseline's. Rows are deduplicated by ``tir_hash`` and split by module: a block whose TIR
occurs in a training module is only ever a training row, so validation and holdout hold
blocks the model has not seen.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasmopt.lower.triton import lower
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer import default_sources
from tasmopt.report import CompileOptions
from tasmopt.tir.codec import decode, encode
from tasmopt.train.dataset import SPLITS, PairRow, write_pairs

__all__ = ["module_split", "choose_split", "real_rows", "build_real_pairs"]

log = logging.getLogger(__name__)


def module_split(
    module: str, *, holdout: float = 0.2, validation: float = 0.15, seed: int = 0
) -> str:
    """Deterministic split of a module by a hash of its name: ``holdout`` and
    ``validation`` are the expected fractions of modules."""
    u = int(hashlib.sha256(f"{seed}:{module}".encode()).hexdigest()[:8], 16) / 2**32
    if u < holdout:
        return "holdout"
    if u < holdout + validation:
        return "validation"
    return "train"


def _available_sources(wanted: Sequence[str]) -> tuple[str, ...]:
    # targets come from the built-in sources only (never from the model being trained)
    builtin = default_sources()
    return tuple(s for s in wanted if s != "model" and builtin.get(s) is not None)


def real_rows(
    path: Path,
    split: str,
    *,
    sources: Sequence[str] = ("rules", "search"),
    search_budget_s: float = 2.0,
    seed: int = 0,
) -> list[PairRow]:
    """Rows of one module file (``{"module", "tir", ...}``), all in ``split``."""
    data = json.loads(path.read_text())
    module = data.get("module", path.stem)
    ops = decode(data["tir"])
    low = lower(ops)
    where = {(f.name, b.path): b for f in low.functions for b in f.blocks}
    options = CompileOptions(
        sources=_available_sources(sources), search_budget_s=search_budget_s, seed=seed
    )
    result = compile_tir(ops, options=options)
    rows: list[PairRow] = []
    for fn in result.functions:
        for rep in fn.blocks:
            block = where.get((fn.name, rep.path))
            if block is None or not rep.baseline_tasm:
                continue
            rows.append(
                PairRow(
                    id=f"{module}:{fn.name}:{rep.index}",
                    tir_hash=rep.tir_hash,
                    origin="real",
                    module=module,
                    function=fn.name,
                    block_index=rep.index,
                    path=rep.path,
                    split=split,
                    tir=encode(block.ops),
                    entry_depth=block.entry_depth,
                    net_effect=block.net_effect,
                    baseline=list(rep.baseline_tasm),
                    target=list(rep.tasm),
                    target_source=rep.source,
                    baseline_cycles=rep.baseline_cycles,
                    target_cycles=rep.cycles,
                    heights=dict(rep.heights),
                )
            )
    return rows


def choose_split(
    sizes: dict[str, int],
    *,
    holdout: float = 0.2,
    validation: float = 0.15,
    tolerance: float = 0.05,
    seed: int = 0,
    tries: int = 2000,
) -> dict[str, str]:
    """Module -> split, by `module_split` with the first seed (from ``seed`` on) whose
    holdout and validation shares of *rows* are within ``tolerance`` of the targets (module
    sizes differ by 100x, so a split by module count alone can be very lopsided).

    Args:
        sizes: module -> rows it contributes (after deduplication).
    """
    total = max(1, sum(sizes.values()))
    best: tuple[float, dict[str, str]] | None = None
    for s in range(seed, seed + tries):
        split = {m: module_split(m, holdout=holdout, validation=validation, seed=s) for m in sizes}
        share = {k: sum(n for m, n in sizes.items() if split[m] == k) / total for k in SPLITS}
        err = max(abs(share["holdout"] - holdout), abs(share["validation"] - validation))
        if best is None or err < best[0]:
            best = (err, split)
        if err <= tolerance:
            break
    assert best is not None
    return best[1]


def build_real_pairs(
    data_dir: Path,
    out_dir: Path,
    *,
    name: str,
    sources: Sequence[str] = ("rules", "search"),
    holdout: float = 0.2,
    validation: float = 0.15,
    seed: int = 0,
    search_budget_s: float = 2.0,
    splits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Build a pairs directory from every ``*.json`` module of ``data_dir``.

    Args:
        holdout, validation: target shares of rows (modules are assigned whole, by
            `choose_split`).
        splits: explicit module -> split assignments (overrides `choose_split`).

    Returns:
        the written manifest.
    """
    files = sorted(Path(data_dir).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no module files (*.json) in {data_dir}")
    per_module: dict[str, list[PairRow]] = {}
    for path in files:
        per_module[path.stem] = real_rows(
            path, "train", sources=sources, search_budget_s=search_budget_s, seed=seed
        )
        log.info("%s: %d blocks", path.stem, len(per_module[path.stem]))
    # sizes after deduplication in file order: a repeated block counts where first seen
    seen: set[str] = set()
    sizes: dict[str, int] = {}
    for module, rows in per_module.items():
        fresh = {r.tir_hash for r in rows} - seen
        sizes[module] = len(fresh)
        seen |= fresh
    assignment = choose_split(sizes, holdout=holdout, validation=validation, seed=seed)
    assignment.update(splits or {})
    by_split: dict[str, list[PairRow]] = {s: [] for s in SPLITS}
    for module, rows in per_module.items():
        for r in rows:
            r.split = assignment[module]
        by_split[assignment[module]].extend(rows)
    # a block seen in training is a training row only; likewise validation before holdout
    ordered = by_split["train"] + by_split["validation"] + by_split["holdout"]
    used = sorted(_available_sources(sources))
    return write_pairs(
        out_dir,
        ordered,
        name=name,
        description=f"real toolchain blocks from {data_dir}",
        extra={
            "source_dir": str(data_dir),
            "target_sources_used": used,
            "split_seed": seed,
            "search_budget_s": search_budget_s,
        },
    )
