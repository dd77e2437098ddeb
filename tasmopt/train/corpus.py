"""`tasmopt corpus build`: (TIR, baseline TASM, best verified TASM) pairs from our own Trident
corpus and from the real toolchain TIR, split by module, augmented, with a stats report.

Sources of rows (every function and every block):

* ``corpus`` — every module of ``corpus/`` compiled by our frontend
  (`tasmopt.frontend.compile_modules`, one module's own functions at a time, so a function
  belongs to the module that defines it);
* ``real`` — the Trident toolchain's TIR in ``shared/data/trident-std`` (tagged ``real`` and
  reported apart in every statistic).

Targets are the best verified TASM the optimizer finds offline (sources ``rules`` and
``search`` with a larger budget), cached by the module's TIR hash so a rebuild only redoes
what changed. Splits are by module: ``corpus/holdout.txt`` fixes the holdout modules, a hash
of the module name picks about 10% of the rest for validation, and a block whose TIR occurs
in a holdout (validation) module is never a training row. Training rows are then augmented
(`tasmopt.train.augment`) until the dataset reaches ``min_pairs``.

Output (a versioned directory): ``pairs.jsonl`` + ``manifest.json`` (`tasmopt.train.dataset`
format, block rows), ``functions.jsonl`` (function rows), ``stats.txt`` and ``stats.png``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import multiprocessing.pool
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tasmopt.lower.blocks import split_functions
from tasmopt.lower.triton import lower
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.prepare import blocks_with_loop_counters
from tasmopt.report import CompileOptions
from tasmopt.tir.codec import decode, encode, tir_hash
from tasmopt.tir.ops import Op
from tasmopt.train.augment import coverage, lower_block, reorder_variants, target_variants
from tasmopt.train.dataset import SPLITS, PairRow, choose_split, write_pairs
from tasmopt.vm.equivalence import BlockCheck, check_block

__all__ = ["FunctionRow", "BuildConfig", "build", "module_rows"]

log = logging.getLogger(__name__)

#: Bump when the rows a module produces change meaning (invalidates the caches). 2: rows use
#: the optimizer's block definitions (loop-counter decrements merged into loop bodies); 1
#: paired the plain lowering's blocks with the merged blocks' baselines.
CACHE_VERSION = 2


@dataclass
class FunctionRow:
    """One function: its TIR, the baseline and the best verified TASM of its whole body."""

    id: str
    tir_hash: str
    origin: str
    module: str
    function: str
    split: str
    tir: list[Any]
    baseline: list[str]
    target: list[str]
    target_source: str
    baseline_cycles: int
    target_cycles: int
    heights: dict[str, int] = field(default_factory=dict)
    baseline_heights: dict[str, int] = field(default_factory=dict)
    halted: int = 0


@dataclass(frozen=True)
class BuildConfig:
    """Knobs of a corpus build.

    Attributes:
        search_budget_s: search budget per module compile, seconds (offline: larger than
            the service's default).
        validation: share of non-holdout corpus modules for validation.
        min_pairs: augment training rows until the dataset holds at least this many rows.
        augment_rounds: rounds of augmentation at most (each asks every training row for
            up to two reordered inputs and one rescheduled target).
        seed: seed of splits, search and augmentation.
        jobs: worker processes for module compiles and augmentation.
    """

    search_budget_s: float = 6.0
    validation: float = 0.1
    min_pairs: int = 3000
    augment_rounds: int = 8
    seed: int = 0
    jobs: int = max(1, min(4, os.cpu_count() or 1))


def module_rows(
    ops: Sequence[Op], module: str, origin: str, split: str, *, options: CompileOptions
) -> tuple[list[PairRow], list[FunctionRow]]:
    """Block rows and function rows of one module's TIR (see module docstring)."""
    low = lower(ops, isa=options.isa)
    # the optimizer's block definitions (a loop's counter decrement joins its body's first
    # block), so each row's TIR, entry depth and baseline describe the same block
    where = {(f.name, b.index): b for f in low.functions for b in blocks_with_loop_counters(low, f)}
    chunks = {c.name: c.ops for c in split_functions(ops)}
    result = compile_tir(ops, options=options)
    base_fn = {f.name: [low.lines[a:b] for a, b in f.sections] for f in low.functions}
    blocks: list[PairRow] = []
    functions: list[FunctionRow] = []
    for fn in result.functions:
        if fn.unlowerable or fn.mismatch is not None:
            continue
        base_lines = [ln for sec in base_fn.get(fn.name, []) for ln in sec]
        functions.append(
            FunctionRow(
                id=f"{origin}:{module}:{fn.name}",
                tir_hash=fn.tir_hash,
                origin=origin,
                module=module,
                function=fn.name,
                split=split,
                tir=encode(chunks.get(fn.name, ())),
                baseline=base_lines,
                target=list(fn.tasm),
                target_source=fn.source,
                baseline_cycles=fn.baseline_cycles,
                target_cycles=fn.cycles,
                heights=dict(fn.heights),
                baseline_heights=dict(fn.baseline_heights),
                halted=fn.halted,
            )
        )
        for rep in fn.blocks:
            block = where.get((fn.name, rep.index))
            if block is None or not rep.baseline_tasm:
                continue
            blocks.append(
                PairRow(
                    id=f"{origin}:{module}:{fn.name}:{rep.index}",
                    tir_hash=rep.tir_hash,
                    origin=origin,
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
    return blocks, functions


def _validation(module: str, share: float, seed: int) -> bool:
    u = int(hashlib.sha256(f"{seed}:{module}".encode()).hexdigest()[:8], 16) / 2**32
    return u < share


def _cached_rows(cache: Path | None, key: str, make) -> tuple[list[PairRow], list[FunctionRow]]:
    path = cache / key[:2] / f"{key}.json" if cache else None
    if path is not None and path.exists():
        data = json.loads(path.read_text())
        return (
            [PairRow.from_dict(d) for d in data["blocks"]],
            [FunctionRow(**d) for d in data["functions"]],
        )
    blocks, functions = make()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {"blocks": [asdict(r) for r in blocks], "functions": [asdict(f) for f in functions]}
            )
        )
        tmp.replace(path)
    return blocks, functions


def _module_job(args: tuple) -> tuple[list[PairRow], list[FunctionRow]]:
    origin, module, ops, options, cache_dir, key = args
    return _cached_rows(
        cache_dir, key, lambda: module_rows(ops, module, origin, "train", options=options)
    )


def _units(
    corpus_dir: Path | None, real_dir: Path | None, skipped: list[str]
) -> list[tuple[str, str, tuple[Op, ...]]]:
    """``(origin, module, ops)`` for every module's own functions; corpus files that do not
    compile are appended to ``skipped``."""
    units: list[tuple[str, str, tuple[Op, ...]]] = []
    if corpus_dir is not None:
        from tasmopt.errors import FrontendError
        from tasmopt.frontend import compile_modules

        done: set[str] = set()
        for path in sorted(corpus_dir.rglob("*.tri")):
            try:
                mods = compile_modules(path, [corpus_dir])
            except FrontendError as exc:
                log.warning("skipping %s: %s", path, str(exc).splitlines()[0])
                skipped.append(f"{path}: {str(exc).splitlines()[0]}")
                continue
            for mod in mods:
                # programs are named by file (their header names need not be unique)
                name = (
                    mod.name
                    if mod.kind == "module"
                    else "program:" + path.relative_to(corpus_dir).with_suffix("").as_posix()
                )
                if name in done:
                    continue
                done.add(name)
                units.append(("corpus", name, tuple(mod.ops)))
    if real_dir is not None:
        for path in sorted(real_dir.glob("*.json")):
            data = json.loads(path.read_text())
            units.append(("real", data.get("module", path.stem), decode(data["tir"])))
    return units


def _holdout(corpus_dir: Path | None) -> set[str]:
    if corpus_dir is None or not (corpus_dir / "holdout.txt").exists():
        return set()
    names = set()
    for line in (corpus_dir / "holdout.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line.removesuffix(".tri").replace("/", "."))
    return names


def holdout_modules(corpus_dir: Path) -> list[tuple[str, Path]]:
    """``(module, source file)`` of every holdout module named in ``corpus/holdout.txt``
    (e.g. ``field.ntt`` -> ``corpus/field/ntt.tri``), in file order; names without a file
    are left out with a warning."""
    out = []
    for name in sorted(_holdout(corpus_dir)):
        path = corpus_dir / (name.replace(".", "/") + ".tri")
        if path.is_file():
            out.append((name, path))
        else:
            log.warning("holdout module %s has no file %s", name, path)
    return out


def holdout_rows(corpus_dir: Path, *, cache: Path | None = None) -> list[PairRow]:
    """Block rows of every holdout module (``corpus/holdout.txt``: whole modules, so the
    near-identical programs of one template never straddle the split) through our
    frontend, with the rules' best as target, sorted by id. Kept in the directory ``cache``
    (`_cached_rows`) under a key that hashes the holdout sources (an edited module is
    compiled again)."""
    from tasmopt.frontend import compile_modules

    modules = holdout_modules(corpus_dir)
    digest = hashlib.sha256()
    for module, path in modules:
        digest.update(module.encode() + b"\0" + path.read_bytes())
    return _eval_rows(
        cache,
        f"holdout-v{CACHE_VERSION}-{digest.hexdigest()[:16]}",
        lambda: [
            row
            for module, path in modules
            for mod in compile_modules(path, [corpus_dir])
            if mod.kind == "module"
            for row in module_rows(mod.ops, module, "corpus", "holdout", options=_RULES)[0]
        ],
    )


def real_rows(real_dir: Path, *, cache: Path | None = None) -> list[PairRow]:
    """Block rows of the real toolchain modules (``../shared/data/trident-std``, our lowering
    of their TIR), the rules' best as target, split ``holdout``, sorted by id; cached like
    `holdout_rows`."""
    files = sorted(real_dir.glob("*.json"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())

    def make() -> list[PairRow]:
        rows = []
        for path in files:
            data = json.loads(path.read_text())
            module = data.get("module", path.stem)
            rows += module_rows(decode(data["tir"]), module, "real", "holdout", options=_RULES)[0]
        return rows

    return _eval_rows(cache, f"real-v{CACHE_VERSION}-{digest.hexdigest()[:16]}", make)


#: Targets of the evaluation rows: the rules' best (the evaluation measures the model).
_RULES = CompileOptions(sources=("rules",), inline=False, use_cache=False)


def _eval_rows(cache: Path | None, key: str, make: Callable[[], list[PairRow]]) -> list[PairRow]:
    """``make()`` sorted by id, through the module-row cache (`_cached_rows`)."""
    blocks, _ = _cached_rows(cache, key, lambda: (sorted(make(), key=lambda r: r.id), []))
    return blocks


def _split_of(
    origin: str, module: str, holdout: set[str], cfg: BuildConfig, real_splits: dict[str, str]
) -> str:
    if origin == "real":
        return real_splits.get(module, "train")
    short = module.removeprefix("corpus.")
    if module.startswith("program:"):
        # corpus/<domain>/tests/t_<module>.tri tests module <domain>.<module>: same split
        parts = module.removeprefix("program:").split("/")
        if len(parts) >= 3 and parts[-2] == "tests" and parts[-1].startswith("t_"):
            short = f"{parts[-3]}.{parts[-1][2:]}"
    if module in holdout or short in holdout:
        return "holdout"
    return "validation" if _validation(module, cfg.validation, cfg.seed) else "train"


def _variants(args: tuple[PairRow, int, int]) -> list[PairRow]:
    """Verified variants of one training row for augmentation round ``rnd`` (picklable)."""
    row, rnd, seed = args
    out: list[PairRow] = []
    for k, new in enumerate(reorder_variants(decode(row.tir), count=2, seed=seed)):
        lines = lower_block(new)
        if len(row.target) > len(lines):
            continue
        # the new TIR means the same as the old one, but its baseline may reach less deep:
        # the target must be a verified answer for *this* baseline too
        if not check_block(BlockCheck(tuple(lines), tuple(row.target), seed=seed)).equivalent:
            continue
        out.append(
            replace(
                row,
                id=f"{row.id}#r{rnd}.{k}",
                tir_hash=tir_hash(new),
                tir=encode(new),
                baseline=lines,
                baseline_cycles=len(lines),
                target_source=f"{row.target_source}+reorder",
            )
        )
    if row.target_cycles < row.baseline_cycles:
        for k, alt in enumerate(target_variants(row.baseline, row.target, count=1, seed=seed)):
            # same TIR, another verified target: a distinct hash keeps both rows
            h = hashlib.sha256((row.tir_hash + "\n".join(alt)).encode()).hexdigest()
            out.append(
                replace(
                    row,
                    id=f"{row.id}#t{rnd}.{k}",
                    tir_hash=h,
                    target=alt,
                    target_cycles=len(alt),
                    target_source=f"{row.target_source}+resched",
                )
            )
    return out


@contextlib.contextmanager
def _pool(jobs: int) -> Iterator[multiprocessing.pool.Pool | None]:
    """A fork pool of ``jobs`` processes, or None for ``jobs <= 1`` (work runs in-process).

    Workers are let go with close + join once the work is done. `Pool.terminate` (what
    ``with Pool()`` does) sends SIGTERM, which a worker ignores if it inherited a Python
    SIGTERM handler from its parent (a server or RQ worker in the same process): then the
    join hangs for ever (seen once in the test suite). Terminate only on an error.
    """
    if jobs <= 1:
        yield None
        return
    pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()


def _augment(rows: list[PairRow], cfg: BuildConfig, progress: bool, jobs: int) -> list[PairRow]:
    """Training rows plus verified variants, until ``cfg.min_pairs`` rows in all."""
    train = [r for r in rows if r.split == "train"]
    extra: list[PairRow] = []
    seen = {r.tir_hash for r in rows}
    need = cfg.min_pairs - len(rows)
    with _pool(jobs) as pool:
        for rnd in range(cfg.augment_rounds):
            if len(extra) >= need:
                break
            work = [(r, rnd, cfg.seed + 1_000_003 * rnd + i) for i, r in enumerate(train)]
            it = pool.imap(_variants, work, chunksize=8) if pool else map(_variants, work)
            for found in tqdm(
                it,
                total=len(work),
                desc=f"augment round {rnd + 1}",
                disable=not progress,
                unit="row",
            ):
                for v in found:
                    if v.tir_hash not in seen:
                        seen.add(v.tir_hash)
                        extra.append(v)
    return rows + extra[: max(0, need)]


def _histogram(values: Sequence[int], edges: Sequence[int]) -> list[tuple[str, int]]:
    out = []
    for lo, hi in zip(edges, list(edges[1:]) + [None]):
        n = sum(1 for v in values if v >= lo and (hi is None or v < hi))
        out.append((f"{lo}-{hi - 1}" if hi is not None else f">={lo}", n))
    return out


def _stats(
    rows: list[PairRow],
    functions: list[FunctionRow],
    cov_before: dict,
    cov_after: dict,
    seconds: float,
    skipped: Sequence[str] = (),
) -> str:
    lines = [
        f"tasmopt corpus build: {len(rows)} block pairs, {len(functions)} function "
        f"pairs, built in {seconds:.0f} s",
        "",
    ]
    for origin in ("corpus", "real"):
        rs = [r for r in rows if r.origin == origin]
        fs = [f for f in functions if f.origin == origin]
        if not rs and not fs:
            continue
        lines.append(f"[{origin}]")
        for split in SPLITS:
            sr = [r for r in rs if r.split == split]
            sf = [f for f in fs if f.split == split]
            mods = len({r.module for r in sr} | {f.module for f in sf})
            aug = sum(1 for r in sr if "#" in r.id)
            imp = sum(1 for f in sf if f.target_cycles < f.baseline_cycles)
            reds = [
                (f.baseline_cycles - f.target_cycles) / f.baseline_cycles
                for f in sf
                if f.baseline_cycles
            ]
            med = 100 * statistics.median(reds) if reds else 0.0
            lines.append(
                f"  {split:10s} modules {mods:3d}  functions {len(sf):4d} "
                f"(improved {imp}, median reduction {med:.1f}%)  blocks {len(sr):5d} "
                f"(augmented {aug})"
            )
        sizes = [len(r.baseline) for r in rs if "#" not in r.id]
        lines.append(
            "  block size (baseline instructions): "
            + ", ".join(f"{k}: {n}" for k, n in _histogram(sizes, [1, 3, 6, 11, 21, 41, 81]))
        )
        fcyc = [f.baseline_cycles for f in fs]
        lines.append(
            "  function baseline cycles: "
            + ", ".join(f"{k}: {n}" for k, n in _histogram(fcyc, [0, 10, 30, 100, 300, 1000, 3000]))
        )
        lines.append("")
    if skipped:
        lines.append(f"skipped {len(skipped)} corpus files that do not compile:")
        lines += [f"  {s}" for s in skipped]
    lines.append(f"coverage before augmentation: {json.dumps(cov_before)}")
    lines.append(f"coverage after augmentation:  {json.dumps(cov_after)}")
    return "\n".join(lines) + "\n"


def _plot(rows: list[PairRow], functions: list[FunctionRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for origin, color in (("corpus", "tab:blue"), ("real", "tab:orange")):
        sizes = [len(r.baseline) for r in rows if r.origin == origin and "#" not in r.id]
        if sizes:
            axes[0].hist(sizes, bins=30, alpha=0.6, label=origin, color=color)
        fc = [f.baseline_cycles for f in functions if f.origin == origin and f.baseline_cycles]
        if fc:
            axes[1].hist(fc, bins=30, alpha=0.6, label=origin, color=color, log=True)
        red = [
            100 * (f.baseline_cycles - f.target_cycles) / f.baseline_cycles
            for f in functions
            if f.origin == origin and f.baseline_cycles
        ]
        if red:
            axes[2].hist(red, bins=30, alpha=0.6, label=origin, color=color)
    axes[0].set(title="block size", xlabel="baseline instructions", ylabel="blocks")
    axes[1].set(title="function cost", xlabel="baseline clock cycles", ylabel="functions")
    axes[2].set(title="best verified vs compiler", xlabel="cycle reduction %", ylabel="functions")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def build(
    out_dir: Path,
    *,
    corpus_dir: Path | None,
    real_dir: Path | None,
    name: str,
    cfg: BuildConfig = BuildConfig(),
    cache_dir: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build a pairs directory (see module docstring). Returns the manifest."""
    t0 = time.perf_counter()
    skipped: list[str] = []
    units = _units(corpus_dir, real_dir, skipped)
    holdout = _holdout(corpus_dir)
    real_mods = [m for o, m, _ in units if o == "real"]
    real_splits = choose_split({m: 1 for m in real_mods}, seed=cfg.seed) if real_mods else {}
    options = CompileOptions(
        sources=("rules", "search"), search_budget_s=cfg.search_budget_s, seed=cfg.seed
    )
    blocks: list[PairRow] = []
    functions: list[FunctionRow] = []
    work = [
        (
            origin,
            module,
            ops,
            options,
            cache_dir,
            hashlib.sha256(
                json.dumps(
                    [CACHE_VERSION, tir_hash(ops), origin, module, cfg.search_budget_s, cfg.seed]
                ).encode()
            ).hexdigest(),
        )
        for origin, module, ops in units
    ]
    with _pool(cfg.jobs) as pool:
        results = pool.imap(_module_job, work) if pool is not None else map(_module_job, work)
        for (origin, module, *_), (b, f) in zip(
            work, tqdm(results, total=len(work), desc="modules", disable=not progress, unit="mod")
        ):
            split = _split_of(origin, module, holdout, cfg, real_splits)
            blocks += [replace(r, split=split) for r in b]
            functions += [replace(x, split=split) for x in f]
    # a block seen in a holdout (validation) module never trains
    rank = {"holdout": 0, "validation": 1, "train": 2}
    best_split: dict[str, str] = {}
    for r in blocks:
        cur = best_split.get(r.tir_hash)
        if cur is None or rank[r.split] < rank[cur]:
            best_split[r.tir_hash] = r.split
    unique: dict[str, PairRow] = {}
    for r in blocks:
        if r.split == best_split[r.tir_hash] and r.tir_hash not in unique:
            unique[r.tir_hash] = r
    rows = list(unique.values())
    cov_before = coverage(r.target for r in rows if r.split == "train")
    rows = _augment(rows, cfg, progress, cfg.jobs)
    cov_after = coverage(r.target for r in rows if r.split == "train")
    out = Path(out_dir)
    manifest = write_pairs(
        out,
        rows,
        name=name,
        description="tasmopt corpus build: corpus + real toolchain TIR",
        extra={
            "config": asdict(cfg),
            "holdout_modules": sorted(holdout),
            "coverage": {"before": cov_before, "after": cov_after},
            "skipped": skipped,
            "functions": len(functions),
        },
    )
    with open(out / "functions.jsonl", "w") as fh:
        for fr in functions:
            fh.write(json.dumps(asdict(fr)) + "\n")
    seconds = time.perf_counter() - t0
    text = _stats(rows, functions, cov_before, cov_after, seconds, skipped)
    (out / "stats.txt").write_text(text)
    _plot(rows, functions, out / "stats.png")
    manifest["seconds"] = round(seconds, 1)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def iter_function_rows(directory: Path) -> Iterable[FunctionRow]:
    """The function rows of a built directory."""
    with open(Path(directory) / "functions.jsonl") as fh:
        for line in fh:
            if line.strip():
                yield FunctionRow(**json.loads(line))
