"""`tasmopt train ...` and `tasmopt eval`: build pairs, train and evaluate the neural
candidate source (design §4)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

__all__ = ["train", "eval_cmd"]


# -- train / eval (the neural candidate source) ------------------------------------------


@click.group(
    epilog="""\b
Examples:
  tasmopt train pairs-real --out data/pairs/real-v1     # pairs from the real toolchain data
  tasmopt train stage1 --data data/pairs/real-v1 --version s1-real-v1 --max-minutes 12
  tasmopt train stage2 --checkpoint model_store/s1-real-v1 --version s2-real-v1
"""
)
def train() -> None:
    """Build training pairs and train the model (design §4)."""


@train.command(
    "pairs-real",
    epilog="""\b
Compiles every module of DATA_DIR (default: ../shared/data/trident-std) with the rules and
search sources and writes one row per distinct block: its best verified TASM as target.
Modules are split whole into train / validation / holdout. One builder for all pairs:
`tasmopt corpus build` (`tasmopt.train.corpus.build`), here on these modules only and without
augmentation.
""",
)
@click.option(
    "--data-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("../shared/data/trident-std"),
    show_default=True,
    help='Directory of module files (*.json with "tir").',
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Pairs directory to write (pairs.jsonl + manifest.json).",
)
@click.option("--name", help="Dataset name for the manifest (default: the directory name).")
@click.option("--seed", type=int, default=0, show_default=True, help="Split and search seed.")
@click.option(
    "--budget",
    "search_budget_s",
    type=click.FloatRange(0),
    default=2.0,
    show_default=True,
    help="Search seconds per module.",
)
def train_pairs_real(
    data_dir: Path, out: Path, name: str | None, seed: int, search_budget_s: float
) -> None:
    """Write training pairs built from real toolchain modules."""
    from tasmopt.train.corpus import BuildConfig, build

    cfg = BuildConfig(search_budget_s=search_budget_s, seed=seed, min_pairs=0, augment_rounds=0)
    manifest = build(
        out, corpus_dir=None, real_dir=data_dir, name=name or out.name, cfg=cfg, progress=True
    )
    click.echo(
        json.dumps(
            {k: manifest[k] for k in ("name", "rows", "splits", "target_sources", "improved")},
            indent=2,
        )
    )


@train.command(
    "stage1",
    epilog="""\b
Examples:
  tasmopt train stage1 --data data/pairs/real-v1 --version s1-real-v1
  tasmopt train stage1 --data DIR --version v --epochs 100 --batch-size 64 --device cuda
  tasmopt train stage1 --data DIR --version tiny --set d_model=64 --set dec_layers=2
Writes OUT/VERSION/ (model.safetensors, config.json, metrics.json), OUT/metrics.jsonl and
OUT/loss.png; the checkpoint is the epoch with the best validation loss.
""",
)
@click.option(
    "--data",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Pairs directory.",
)
@click.option("--version", required=True, help="Checkpoint version (directory name).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("model_store"),
    show_default=True,
    help="Where the checkpoint directory goes.",
)
@click.option("--epochs", type=click.IntRange(1), default=60, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--lr", type=float, default=3e-4, show_default=True)
@click.option(
    "--patience",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Epochs without a better validation loss before stopping.",
)
@click.option("--max-minutes", type=click.FloatRange(0), help="Wall-clock budget.")
@click.option("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available).")
@click.option("--threads", type=click.IntRange(1), help="CPU threads for torch.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Model config override, e.g. d_model=128 (repeatable).",
)
@click.option(
    "--copies/--no-copies",
    default=True,
    show_default=True,
    help="Also train improved rows' baseline -> baseline (keeps a valid copy in the beam).",
)
def train_stage1_cmd(
    data: Path,
    version: str,
    out: Path,
    epochs: int,
    batch_size: int,
    lr: float,
    patience: int,
    max_minutes: float | None,
    device: str | None,
    threads: int | None,
    seed: int,
    overrides: tuple[str, ...],
    copies: bool,
) -> None:
    """Stage 1: supervised training (teacher forcing) on a pairs directory."""
    from tasmopt.model.config import ModelConfig
    from tasmopt.train.supervised import TrainConfig, train_stage1

    model: dict[str, Any] = {}
    defaults = ModelConfig().to_dict()
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in defaults:
            raise click.BadParameter(f"unknown model setting {key!r}; known: {sorted(defaults)}")
        model[key] = type(defaults[key])(value)
    cfg = TrainConfig(
        data=data,
        out_dir=out,
        version=version,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        patience=patience,
        max_minutes=max_minutes,
        device=device,
        threads=threads,
        seed=seed,
        model=model,
        copies=copies,
    )
    res = train_stage1(cfg, progress=sys.stderr.isatty())
    click.echo(
        json.dumps(
            {
                "checkpoint": str(res.checkpoint),
                "best_val_loss": res.best_val_loss,
                "best_epoch": res.best_epoch,
                "epochs_run": res.epochs_run,
                "seconds_per_epoch": round(res.seconds_per_epoch, 2),
                "coverage": res.coverage,
            },
            indent=2,
        )
    )


@train.command(
    "stage2",
    epilog="""\b
Examples:
  tasmopt train stage2 --checkpoint model_store/s1-corpus-v1 --version s2-v1 --steps 200
  tasmopt train stage2 --checkpoint DIR --data data/pairs/real-v1 --version v --device cuda
Trajectory balance with a conditional log Z head (tasmopt.train.gflownet): samples
candidates at a temperature annealed 1.0 -> 0.5 (design §4 says 2.0, which drifted
to invalid samples: see tasmopt.train.gflownet), rewards them with the verifier (design §4:
1 + relative cycle saving if proven equivalent, else 1e-3; partial credit during the first
--partial-steps), and writes OUT/VERSION (stage gflownet, parent = the checkpoint, with
logz.safetensors and stage2_metrics.jsonl). Blocks: the train split of --data, else the
replay buffer of the configured database (what `tasmopt serve` stored).
""",
)
@click.option(
    "--checkpoint",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Checkpoint to resume from.",
)
@click.option("--version", required=True, help="Version of the new checkpoint.")
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Pairs directory (its train split); default: the replay buffer.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("model_store"),
    show_default=True,
)
@click.option("--steps", type=click.IntRange(1), default=200, show_default=True)
@click.option("--blocks", type=click.IntRange(1), default=8, show_default=True, help="Per step.")
@click.option("--samples", type=click.IntRange(1), default=8, show_default=True, help="Per block.")
@click.option("--lr", type=float, default=1e-5, show_default=True)
@click.option("--partial-steps", type=click.IntRange(0), default=1000, show_default=True)
@click.option("--max-minutes", type=click.FloatRange(0), help="Wall-clock budget.")
@click.option("--device", help="cpu, cuda, ... (default: cuda if available).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--temperature",
    type=(click.FloatRange(min=0.05), click.FloatRange(min=0.05)),
    default=(1.0, 0.5),
    show_default=True,
    metavar="START END",
    help="Sampling temperature, annealed linearly from START to END.",
)
@click.option(
    "--anchors/--no-anchors",
    default=True,
    show_default=True,
    help="Also train on each picked block's verified target (off-policy trajectory).",
)
@click.option(
    "--verify-workers",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Processes verifying sampled candidates (0: in the training process).",
)
def train_stage2_cmd(
    checkpoint: Path,
    version: str,
    data: Path | None,
    out: Path,
    steps: int,
    blocks: int,
    samples: int,
    lr: float,
    partial_steps: int,
    max_minutes: float | None,
    device: str | None,
    seed: int,
    temperature: tuple[float, float],
    anchors: bool,
    verify_workers: int,
) -> None:
    """Stage 2: GFlowNet fine-tuning with trajectory balance."""
    from tasmopt.train.dataset import read_pairs
    from tasmopt.train.gflownet import Stage2Config, train_stage2

    if data is not None:
        _, rows = read_pairs(data, ["train"])
    else:
        from service.core.db import engine_from_settings
        from tasmopt.store import make_sessionmaker, replay_blocks
        from tasmopt.train.online import replay_rows

        with make_sessionmaker(engine_from_settings(_settings()))() as session:
            rows = replay_rows(replay_blocks(session))
    if not rows:
        raise click.UsageError("no blocks: pass --data DIR or serve some requests first")
    cfg = Stage2Config(
        steps=steps,
        blocks=blocks,
        samples=samples,
        lr=lr,
        partial_steps=partial_steps,
        max_minutes=max_minutes,
        device=device,
        seed=seed,
        verify_workers=verify_workers,
        temperature_start=temperature[0],
        temperature_end=temperature[1],
        anchors=anchors,
    )
    res = train_stage2(checkpoint, rows, out, version, cfg, progress=sys.stderr.isatty())
    last = res.history[-1] if res.history else {}
    click.echo(
        json.dumps(
            {
                "checkpoint": str(res.checkpoint),
                "steps": len(res.history),
                "last": last,
            }
        )
    )


@click.command(
    "eval",
    epilog="""\b
Examples:
  tasmopt eval                       # the production checkpoint on the standard holdout
                                     # (corpus/holdout.txt) and the real data
  tasmopt eval --checkpoint model_store/s1-corpus-v1 --k 8 --out reports/s1
  tasmopt eval --data data/pairs/real-v1 --split validation --limit 200
  tasmopt eval --samples 32          # 32 sampled hypotheses per block after the 32 beams
Without --data the rows are built (and cached under TASMOPT_HOME/var/eval): the holdout
modules of the corpus through our frontend (whole modules: generated programs of one
template never straddle the split) and the real toolchain modules (--real, default
../shared/data/trident-std). Without --checkpoint: the production checkpoint of the
configured registry (DATABASE_URL), else the newest one in MODEL_STORE.
Validity is reported with and without copies of the baseline (a copy is always valid),
per block and per function, with 90% bootstrap CIs (1000 resamples, --seed): the same
numbers on every run. Prints the Markdown table; --out also writes report.json,
report.md, blocks.jsonl and report.png. Exit status 0 whether or not the Phase A gate
passes (see report.json).
""",
)
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Pairs directory (default: build the standard holdout and real-data rows).",
)
@click.option(
    "--checkpoint",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Checkpoint directory (default: the production checkpoint).",
)
@click.option(
    "--real",
    type=click.Path(file_okay=False, path_type=Path),
    help="Real toolchain modules for the default rows (default: TASMOPT_TRIDENT_STD, else "
    "../shared/data/trident-std beside the checkout).",
)
@click.option(
    "--split",
    type=click.Choice(["train", "validation", "holdout"]),
    default="holdout",
    show_default=True,
)
@click.option(
    "--k",
    type=click.IntRange(1),
    help="Beams per block (default: MODEL_BEAMS, the service's, 32 unless configured).",
)
@click.option(
    "--samples",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Extra hypotheses per block drawn by temperature sampling after the beams "
    "(diversity; seeded by --seed).",
)
@click.option(
    "--temperature",
    type=click.FloatRange(0.05),
    default=1.0,
    show_default=True,
    help="Sampling temperature for --samples.",
)
@click.option("--witnesses", type=click.IntRange(16), default=16, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--limit", type=click.IntRange(1), help="Evaluate only the first N rows.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap and sampling seed.")
@click.option(
    "--marginal",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    metavar="N",
    help="Also compile the N smallest real modules with rules+search with and without the "
    "model at equal wall-clock budget (the model's marginal contribution; minutes), measure "
    "what search and the model each save per second over the rules, and answer each module "
    "cold at the service's default deadline with and without the model. The model decodes "
    "as the service's does (MODEL_BEAMS, MODEL_MIN_INSTRS, MODEL_PRECISION). With --record "
    "the rates go into metrics.json: the service runs the model's tier before the search's "
    "under a deadline only where the model's rate is the higher.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the report files.",
)
@click.option(
    "--record",
    is_flag=True,
    help="Write the holdout figures into the checkpoint's metrics.json (what the "
    "service reads for the learning phase).",
)
def eval_cmd(
    data: Path | None,
    checkpoint: Path | None,
    real: Path | None,
    split: str,
    k: int | None,
    samples: int,
    temperature: float,
    witnesses: int,
    device: str,
    limit: int | None,
    seed: int,
    marginal: int,
    out: Path | None,
    record: bool,
) -> None:
    """Evaluate a checkpoint: validity with and without copies, gains over the compiler,
    latency, Phase A gate, and (--marginal) the model's marginal contribution."""
    from tasmopt.train.evaluate import evaluate, markdown, record_metrics, write_report

    if record and (split != "holdout" or limit is not None):
        raise click.BadParameter("--record needs the whole holdout split (no --limit)")
    settings = _settings()
    k = k or settings.model_beams
    if record:
        _check_service_decoding(settings, k, samples, temperature)
    if checkpoint is None:
        checkpoint = _default_checkpoint(settings)
        click.echo(f"checkpoint: {checkpoint}", err=True)
    rows: Path | list[Any]
    if data is not None:
        rows, name = data, None
    else:
        rows, name = _standard_rows(settings, real), "standard holdout + real data"
        click.echo(f"rows: {len(rows)} blocks ({name})", err=True)
    report, results = evaluate(
        checkpoint,
        rows,
        split=split,
        k=k,
        witnesses=witnesses,
        device=device,
        limit=limit,
        progress=sys.stderr.isatty(),
        seed=seed,
        data_name=name,
        samples=samples,
        temperature=temperature,
    )
    if out is not None:
        write_report(report, results, out)
    if record:
        record_metrics(checkpoint, report)
    click.echo(markdown(report))
    if marginal:
        from tasmopt.model.source import load_model_source
        from tasmopt.train.marginal import (
            cold_answers,
            cold_markdown,
            marginal_contribution,
            marginal_markdown,
            rates_markdown,
            record_rates,
            source_rates,
        )

        files = sorted(_real_dir(settings, real).glob("*.json"), key=lambda p: p.stat().st_size)
        source = load_model_source(  # decoding only the blocks the service's model decodes
            checkpoint,
            device,
            k=k,
            samples=samples,
            temperature=temperature,
            min_instrs=settings.model_min_instrs,
            precision=settings.model_precision,
        )
        progress = sys.stderr.isatty()
        table = marginal_contribution(source, files[:marginal], seed=seed, progress=progress)
        click.echo(marginal_markdown(table, 0.5))
        rates = source_rates(source, files[:marginal], seed=seed, progress=progress)
        click.echo(rates_markdown(rates))
        cold = cold_answers(
            source,
            files[:marginal],
            deadline_ms=settings.default_deadline_ms,
            seed=seed,
            progress=progress,
        )
        click.echo(cold_markdown(cold, settings.default_deadline_ms))
        if out is not None:
            (out / "marginal.json").write_text(
                json.dumps({"marginal": table, "rates": rates, "cold": cold}, indent=2) + "\n"
            )
        if record:
            record_rates(checkpoint, rates)


def _check_service_decoding(settings: Any, k: int, samples: int, temperature: float) -> None:
    """``--record`` writes the figures the service's learning phase reads, so they must
    describe the decoding the service uses: MODEL_BEAMS beams, MODEL_SAMPLES samples at
    MODEL_TEMPERATURE. Raises click.BadParameter naming the difference."""
    want = {"--k": settings.model_beams, "--samples": settings.model_samples}
    got = {"--k": k, "--samples": samples}
    if settings.model_samples:
        want["--temperature"], got["--temperature"] = settings.model_temperature, temperature
    wrong = [f"{o} {got[o]} (the service: {want[o]})" for o in want if got[o] != want[o]]
    if wrong:
        raise click.BadParameter(
            "--record stores the figures the service's learning phase reads, so decode as "
            "the service does (MODEL_BEAMS, MODEL_SAMPLES, "
            "MODEL_TEMPERATURE): " + "; ".join(wrong)
        )


def _real_dir(settings: Any, real: Path | None) -> Path:
    import os

    return real or Path(
        os.environ.get(
            "TASMOPT_TRIDENT_STD",
            Path(settings.tasmopt_home).parent / "shared" / "data" / "trident-std",
        )
    )


def _settings() -> Any:
    from service.core.config import Settings

    return Settings()


def _default_checkpoint(settings: Any) -> Path:
    """The registry's production checkpoint, else the newest checkpoint in MODEL_STORE.

    Raises:
        click.UsageError: there is none.
    """
    store = Path(settings.model_store)
    try:
        from service.core.db import engine_from_settings
        from tasmopt.store import checkpoint_dir, make_sessionmaker, production_checkpoint

        with make_sessionmaker(engine_from_settings(settings))() as session:
            prod = production_checkpoint(session)
        if prod is not None and checkpoint_dir(prod.path, store).is_dir():
            return checkpoint_dir(prod.path, store)
    except Exception as exc:  # no registry (unmigrated, unreachable): look at the store
        logging.getLogger(__name__).info("no checkpoint registry (%s)", str(exc)[:200])
    found = sorted(
        (p for p in store.glob("*/config.json")), key=lambda p: p.stat().st_mtime, reverse=True
    )
    if not found:
        raise click.UsageError(f"no checkpoint in {store}: pass --checkpoint DIR")
    return found[0].parent


def _standard_rows(settings: Any, real: Path | None) -> list[Any]:

    from tasmopt.train.corpus import holdout_rows, real_rows

    cache = Path(settings.tasmopt_home) / "var" / "eval"
    rows: list[Any] = []
    corpus = settings.corpus_dir
    if corpus is not None and (Path(corpus) / "holdout.txt").is_file():
        rows += holdout_rows(Path(corpus), cache=cache)
    real = _real_dir(settings, real)
    if real.is_dir():
        rows += real_rows(real, cache=cache)
    if not rows:
        raise click.UsageError("no corpus holdout and no real data found: pass --data DIR")
    return rows
