"""Stage 1: supervised training on pairs with teacher forcing (design §4).

Cross-entropy over target tokens, the grammar mask applied as a logit penalty
(`tasmopt.model.model.MASK_PENALTY`), AdamW (lr 3e-4, cosine to 1e-5 after a short linear
warm-up, weight decay 0.01), gradient clipping at 1.0, mini-batches of blocks, early stopping
on the validation loss. Writes into ``out_dir``:

* ``<version>/`` — the best checkpoint (by validation loss; `tasmopt.model.checkpoint`);
* ``metrics.jsonl`` — one line per epoch (losses, token accuracy, lr, seconds);
* ``loss.png`` — training and validation loss curves.

Both are also copied into the checkpoint directory (``train_metrics.jsonl``,
``train_loss.png``) at the end.

Runs on CUDA when available, else CPU.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from tasmopt.model.checkpoint import save_checkpoint
from tasmopt.model.config import ModelConfig
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import PAD
from tasmopt.train.dataset import PairDataset, collate, read_pairs

__all__ = ["TrainConfig", "TrainResult", "train_stage1", "plot_losses", "default_device"]

log = logging.getLogger(__name__)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class TrainConfig:
    """Knobs of a Stage 1 run.

    Attributes:
        data: pairs directory (`tasmopt.train.dataset`).
        out_dir: where the checkpoint directory, metrics log and plot go.
        version: checkpoint version (directory name under ``out_dir``).
        epochs: most epochs (the cosine schedule spans them all).
        batch_size: blocks per optimizer step.
        lr, min_lr, weight_decay, clip: optimizer settings (design §4).
        warmup_steps: linear warm-up steps before the cosine decay.
        patience: epochs without a better validation loss before stopping.
        max_minutes: wall-clock budget; training stops after the epoch that exceeds it,
            and the cosine schedule is stretched to end there.
        device: ``"cpu"``, ``"cuda"``, ... (default: CUDA if available).
        seed: shuffling and initialization seed.
        threads: torch CPU threads (None: torch's default).
        model: `ModelConfig` overrides (e.g. ``{"d_model": 128}``).
        copies: also train on baseline -> baseline for improved rows (`PairDataset`).
    """

    data: Path
    out_dir: Path
    version: str
    epochs: int = 60
    batch_size: int = 32
    lr: float = 3e-4
    min_lr: float = 1e-5
    weight_decay: float = 0.01
    clip: float = 1.0
    warmup_steps: int = 50
    patience: int = 8
    max_minutes: float | None = None
    device: str | None = None
    seed: int = 0
    threads: int | None = None
    model: dict[str, Any] = field(default_factory=dict)
    copies: bool = True


@dataclass
class TrainResult:
    """What a run produced: checkpoint directory, best validation loss, per-epoch history."""

    checkpoint: Path
    best_val_loss: float
    best_epoch: int
    epochs_run: int
    seconds_per_epoch: float
    history: list[dict[str, Any]]
    coverage: dict[str, float]


def _lr_at(step: int, total: int, cfg: TrainConfig, elapsed_s: float = 0.0) -> float:
    """Linear warm-up, then cosine from ``lr`` to ``min_lr``. The cosine's progress is the
    larger of the step fraction and the fraction of ``max_minutes`` used, so a run cut by
    its time budget still ends at ``min_lr`` (on a shared CPU epochs take unpredictable
    time)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    if cfg.max_minutes:
        frac = max(frac, min(1.0, elapsed_s / (60 * cfg.max_minutes)))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * frac))


def _batches(ds: PairDataset, size: int, rng: random.Random | None) -> list[list[int]]:
    """Index batches of similar target length (little padding: block lengths range from
    1 to ~100 tokens with a median of 4), in random order when ``rng`` is given."""
    jitter = (lambda: rng.random() * 2) if rng is not None else (lambda: 0.0)
    idx = sorted(range(len(ds)), key=lambda i: len(ds[i].tokens) + jitter())
    batches = [idx[i : i + size] for i in range(0, len(idx), size)]
    if rng is not None:
        rng.shuffle(batches)
    return batches


@torch.no_grad()
def evaluate_loss(
    model: TasmModel, ds: PairDataset, batch_size: int, device: str
) -> tuple[float, float]:
    """Mean token cross-entropy and token accuracy (argmax of the masked logits) over
    ``ds``, teacher forcing, eval mode."""
    was = model.training
    model.eval()
    total = correct = 0
    loss_sum = 0.0
    for ids in _batches(ds, batch_size, None):
        batch, tokens, _ = collate([ds[i] for i in ids])
        batch, tokens = batch.to(device), tokens.to(device)
        logits, loss = model(batch, tokens)
        n = int((tokens != PAD).sum())
        loss_sum += loss.item() * n
        correct += int(((logits.argmax(-1) == tokens) & (tokens != PAD)).sum())
        total += n
    model.train(was)
    return (loss_sum / total, correct / total) if total else (float("nan"), float("nan"))


def plot_losses(history: list[dict[str, Any]], path: Path) -> None:
    """Training and validation loss per epoch, as a PNG (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [h["train_loss"] for h in history], label="train")
    ax.plot(epochs, [h["val_loss"] for h in history], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("token cross-entropy (nats)")
    ax.set_ylim(bottom=0)
    ax.set_title("Stage 1 supervised")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train_stage1(cfg: TrainConfig, *, progress: bool = True) -> TrainResult:
    """Train a model on ``cfg.data`` and keep the best checkpoint by validation loss.

    Raises:
        PairsError: ``cfg.data`` is not a pairs directory.
        ValueError: no training rows could be encoded.
    """
    device = cfg.device or default_device()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    mc = ModelConfig.from_dict({**ModelConfig().to_dict(), **cfg.model})
    manifest, rows = read_pairs(cfg.data)
    train = PairDataset(
        [r for r in rows if r.split == "train"], max_len=mc.max_len, isa=mc.isa, copies=cfg.copies
    )
    val = PairDataset([r for r in rows if r.split == "validation"], max_len=mc.max_len, isa=mc.isa)
    if not len(train):
        raise ValueError(f"{cfg.data}: no encodable training rows")
    if not len(val):
        log.warning("no validation rows: early stopping on the training loss")
    coverage = {"train": train.coverage, "validation": val.coverage}
    log.info("train %d rows, validation %d rows (coverage %s)", len(train), len(val), coverage)

    model = TasmModel(mc).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
    )
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "metrics.jsonl"
    log_path.write_text("")
    ckpt = out / cfg.version
    best, best_epoch, stale, step = float("inf"), 0, 0, 0
    history: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        loss_sum = 0.0
        n_tok = 0
        bar = tqdm(
            _batches(train, cfg.batch_size, rng),
            desc=f"epoch {epoch}",
            disable=not progress,
            leave=False,
            unit="batch",
        )
        for ids in bar:
            batch, tokens, _ = collate([train[i] for i in ids])
            batch, tokens = batch.to(device), tokens.to(device)
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, total, cfg, time.perf_counter() - t_start)
            _, loss = model(batch, tokens)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            step += 1
            n = int((tokens != PAD).sum())
            loss_sum += loss.item() * n
            n_tok += n
            bar.set_postfix(loss=f"{loss.item():.3f}")
        train_loss = loss_sum / max(1, n_tok)
        val_loss, val_acc = (
            evaluate_loss(model, val, cfg.batch_size, device)
            if len(val)
            else (train_loss, float("nan"))
        )
        seconds = time.perf_counter() - t0
        rec = {
            "epoch": epoch,
            "step": step,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_token_accuracy": val_acc,
            "lr": opt.param_groups[0]["lr"],
            "seconds": seconds,
        }
        history.append(rec)
        with open(log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        log.info(
            "epoch %d: train %.4f, validation %.4f (acc %.3f), %.1fs",
            epoch,
            train_loss,
            val_loss,
            val_acc,
            seconds,
        )
        if val_loss < best:
            best, best_epoch, stale = val_loss, epoch, 0
            save_checkpoint(
                model,
                ckpt,
                cfg.version,
                extra={
                    "training": {
                        "stage": 1,
                        "data": str(cfg.data),
                        "data_name": manifest.get("name"),
                        "epoch": epoch,
                        "val_loss": val_loss,
                        "config": {
                            k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()
                        },
                    }
                },
            )
        else:
            stale += 1
        plot_losses(history, out / "loss.png")
        if stale >= cfg.patience:
            log.info("early stop: %d epochs without a better validation loss", stale)
            break
        if cfg.max_minutes is not None and time.perf_counter() - t_start > 60 * cfg.max_minutes:
            log.info("time budget of %.1f min reached", cfg.max_minutes)
            break
    per_epoch = (time.perf_counter() - t_start) / max(1, len(history))
    metrics = {
        "stage": 1,
        "best_val_loss": best,
        "best_epoch": best_epoch,
        "epochs_run": len(history),
        "seconds_per_epoch": per_epoch,
        "device": device,
        "train_rows": train.rows_kept,
        "train_examples": len(train),
        "validation_rows": len(val),
        "coverage": coverage,
        "skipped": {"train": dict(train.skipped), "validation": dict(val.skipped)},
        "parameters": model.num_parameters(),
    }
    (ckpt / "metrics.json").write_text(json.dumps({"training": metrics}, indent=2) + "\n")
    for name in ("metrics.jsonl", "loss.png"):  # the curves travel with the checkpoint
        if (out / name).exists():
            shutil.copy(out / name, ckpt / f"train_{name}")
    return TrainResult(ckpt, best, best_epoch, len(history), per_epoch, history, coverage)
