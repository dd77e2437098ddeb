"""`tasmopt corpus ...`: build the training pairs from the corpus and the real toolchain TIR."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

__all__ = ["corpus"]

ROOT = Path(__file__).resolve().parents[1]


@click.group()
def corpus() -> None:
    """The training corpus: (TIR, baseline TASM, best verified TASM) pairs."""


@corpus.command(
    "build",
    epilog="""\b
Examples:
  tasmopt corpus build                         # corpus/ + ../shared/data/trident-std
  tasmopt corpus build -o datasets/v2 --budget 10 --min-pairs 5000
  tasmopt corpus build --no-real --no-cache    # our corpus only, recompute every target
""",
)
@click.option(
    "--corpus",
    "corpus_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=ROOT / "corpus",
    show_default="corpus/",
    help="Our Trident programs (holdout modules listed in holdout.txt there).",
)
@click.option(
    "--real",
    "real_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=ROOT.parent / "shared" / "data" / "trident-std",
    show_default="../shared/data/trident-std",
    help="Real toolchain TIR (module JSON files), tagged 'real'.",
)
@click.option("--no-real", is_flag=True, help="Leave the real toolchain TIR out.")
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=ROOT / "datasets" / "v1",
    show_default="datasets/v1",
    help="Output directory (a versioned dataset).",
)
@click.option("--name", default=None, help="Dataset name in the manifest (default: out dir name).")
@click.option(
    "--budget",
    "search_budget_s",
    type=click.FloatRange(0),
    default=6.0,
    show_default=True,
    help="Search seconds per module (offline targets).",
)
@click.option(
    "--min-pairs",
    type=click.IntRange(0),
    default=3000,
    show_default=True,
    help="Augment training rows until the dataset has this many rows.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--cache",
    "cache_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=ROOT / "var" / "cache" / "corpus",
    show_default="var/cache/corpus",
    help="Per-module results by TIR hash: a rebuild redoes only what changed.",
)
@click.option("--no-cache", is_flag=True, help="Ignore and do not write the cache.")
def build_cmd(
    corpus_dir: Path,
    real_dir: Path,
    no_real: bool,
    out: Path,
    name: str | None,
    search_budget_s: float,
    min_pairs: int,
    seed: int,
    cache_dir: Path,
    no_cache: bool,
) -> None:
    """Compile every corpus module, find the best verified TASM of every block and function
    (rules + search), split by module, augment the training split, write the pairs with a
    manifest and a stats report (stats.txt, stats.png)."""
    from tasmopt.errors import TasmoptError
    from tasmopt.train.corpus import BuildConfig, build

    logging.getLogger("tasmopt.optimizer").setLevel(logging.ERROR)
    cfg = BuildConfig(search_budget_s=search_budget_s, min_pairs=min_pairs, seed=seed)
    try:
        manifest = build(
            out,
            corpus_dir=corpus_dir if corpus_dir.exists() else None,
            real_dir=None if no_real or not real_dir.exists() else real_dir,
            name=name or out.name,
            cfg=cfg,
            cache_dir=None if no_cache else cache_dir,
        )
    except TasmoptError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo((out / "stats.txt").read_text())
    click.echo(json.dumps({k: manifest[k] for k in ("rows", "splits", "origins", "seconds")}))
