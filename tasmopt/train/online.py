"""Stage 3, online micro-finetunes from the replay buffer, behind a regression guard (design §4).

One run (`micro_finetune`):

1. **Replay.** The blocks of the newest `REPLAY_WINDOW` judged candidates
   (`tasmopt.store.trajectories.replay_blocks`: served compiles, and background deepening,
   whose 1 s searches find most of what the service ever finds), each with its best
   verified program (the cheapest accepted candidate of any source). Only blocks where that
   program beats the baseline are targets: a copy of the baseline teaches nothing (issue
   35: expert iteration on what the slow search found). Targets are therefore cheaper than
   the compiler's and always proven (design §4).
2. **Prioritized sampling.** Each step draws a mini-batch: ``1 - history_share`` of it from
   replay with probability proportional to ``reward · 2^(-age / half_life)`` (design §4
   reward: blocks where a verified candidate saved cycles weigh up to twice a copy; recent
   blocks more than old ones), the rest from history: the training pairs the production
   checkpoint learned from when ``history`` names them (a pairs directory), else uniformly
   from the whole replay window. Seeded.
3. **Micro-finetune.** ``steps`` AdamW steps (teacher-forced cross-entropy with the grammar
   mask, as Stage 1) from the production weights; a new checkpoint ``<parent>-ft<UTC time>``
   with ``training.stage = 3`` is written into the model store.
4. **Regression guard.** Production and new checkpoint decode the same guard set: the
   template-split holdout (`guard_rows`: the holdout modules of ``corpus/holdout.txt``, whole
   modules, so near-identical generated programs never straddle the split) plus the labeled
   online results (replay blocks whose best program beats the baseline). Every hypothesis is
   verified (`tasmopt.train.evaluate.evaluate_rows`). The new checkpoint is **rejected** if
   its validity excluding copies of the baseline drops by more than `GUARD_DROP` or its mean
   cycle reduction drops at all; otherwise it is registered as a **candidate** and, with
   ``auto_promote``, promoted.

Every number here is computed on this machine from the database given; nothing is cached
between runs except the guard's holdout rows (`guard_rows` ``cache``).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from sqlalchemy.orm import Session
from tqdm import tqdm

from tasmopt.model.checkpoint import load_model, read_config, save_checkpoint
from tasmopt.model.model import TasmModel
from tasmopt.store.checkpoints import (
    describe_checkpoint,
    promote_checkpoint,
    record_admin_action,
    register_checkpoint,
    reject_checkpoint,
)
from tasmopt.store.trajectories import REPLAY_WINDOW, ReplayBlock, replay_blocks
from tasmopt.train.dataset import Example, PairDataset, PairRow, collate, read_pairs
from tasmopt.train.evaluate import evaluate_rows, summarize

__all__ = [
    "GUARD_DROP",
    "FinetuneConfig",
    "FinetuneOutcome",
    "replay_rows",
    "prioritized_indices",
    "guard_rows",
    "guard_metrics",
    "micro_finetune",
    "finetune_line",
]

log = logging.getLogger(__name__)

#: Design §4 regression guard: largest allowed drop of validity excluding copies (fraction).
GUARD_DROP = 0.02


@dataclass
class FinetuneConfig:
    """Knobs of one micro-finetune (defaults: design §4 Stage 3).

    Attributes:
        steps: optimizer steps. batch_size: examples per step. lr: AdamW learning rate
            (constant after ``warmup`` steps). clip: gradient-norm clip.
        history_share: share of each batch drawn from history (design §4: 10 %).
        history: pairs directory the production checkpoint was trained on (its ``train``
            split is the history); None: uniform over the replay window.
        window: judged candidates replay reads (newest first).
        half_life_h: recency half-life of the replay priority, hours.
        guard_k: beams per block in the guard. guard_witnesses: differential witnesses.
        guard_limit: most holdout blocks in the guard (the first N, in a fixed order).
        auto_promote: promote a checkpoint that passes the guard.
        device: torch device (default CUDA when available). seed: sampling and init seed.
    """

    steps: int = 200
    batch_size: int = 16
    lr: float = 1e-4
    warmup: int = 10
    clip: float = 1.0
    history_share: float = 0.1
    history: Path | None = None
    window: int = REPLAY_WINDOW
    half_life_h: float = 24.0
    guard_k: int = 8
    guard_witnesses: int = 16
    guard_limit: int = 200
    auto_promote: bool = False
    device: str | None = None
    seed: int = 0


@dataclass
class FinetuneOutcome:
    """What one run did.

    Attributes:
        outcome: ``no_new_results`` (no replay block to learn from), ``rejected`` (the
            guard refused the new checkpoint), ``candidate`` (registered, waiting for the
            admin endpoint) or ``promoted``.
        steps: optimizer steps run. version: the new checkpoint's version, if one was made.
        validity_before, validity_after: guard validity excluding copies, production and new.
        reduction_before, reduction_after: guard mean cycle reduction, production and new.
        detail: replay and guard figures (JSON-safe).
    """

    outcome: str
    steps: int = 0
    version: str | None = None
    validity_before: float = float("nan")
    validity_after: float = float("nan")
    reduction_before: float = float("nan")
    reduction_after: float = float("nan")
    detail: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The one-line summary ``tasmopt finetune`` ends with (`finetune_line`)."""
        return finetune_line(self.outcome, self.steps, self.validity_before, self.validity_after)


def finetune_line(
    outcome: str, steps: int = 0, before: float = float("nan"), after: float = float("nan")
) -> str:
    """``finetune: outcome=<...> steps=N validity_before=X validity_after=Y`` (``n/a`` for an
    unmeasured validity)."""

    def fmt(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{x:.3f}"

    return (
        f"finetune: outcome={outcome} steps={steps} "
        f"validity_before={fmt(before)} validity_after={fmt(after)}"
    )


def replay_rows(blocks: Sequence[ReplayBlock]) -> list[PairRow]:
    """Training pairs from replay blocks: the block's context as input, its best verified
    program as target."""
    rows = []
    for b in blocks:
        ctx = b.context
        rows.append(
            PairRow(
                id=f"replay:{b.build_result_id}",
                tir_hash=b.tir_hash,
                origin="online",
                module="online",
                function=str(b.build_result_id),
                block_index=0,
                path="",
                split="train",
                tir=ctx["tir"],
                entry_depth=int(ctx["entry_depth"]),
                net_effect=int(ctx["net_effect"]),
                baseline=list(ctx["baseline"]),
                target=list(b.best),
                target_source="online",
                baseline_cycles=b.baseline_cycles,
                target_cycles=b.best_cycles,
            )
        )
    return rows


def prioritized_indices(
    blocks: Sequence[ReplayBlock], n: int, *, now: datetime, half_life_h: float, rng: random.Random
) -> list[int]:
    """``n`` indices into ``blocks`` drawn with replacement, with probability proportional to
    ``reward · 2^(-age_h / half_life_h)``."""
    if not blocks or n <= 0:
        return []
    weights = [
        b.reward * 2.0 ** (-max(0.0, (now - b.created_at).total_seconds() / 3600) / half_life_h)
        for b in blocks
    ]
    return rng.choices(range(len(blocks)), weights=weights, k=n)


def guard_rows(corpus_dir: Path | None, *, limit: int, cache: Path | None = None) -> list[PairRow]:
    """The guard's holdout: the first ``limit`` block rows of the holdout modules
    (`tasmopt.train.corpus.holdout_rows`: ``corpus/holdout.txt``, whole modules, so
    near-identical generated programs never straddle the split), kept in the directory
    ``cache``. Returns ``[]`` without a corpus."""
    if corpus_dir is None or not (corpus_dir / "holdout.txt").exists():
        return []
    from tasmopt.train.corpus import holdout_rows

    return holdout_rows(corpus_dir, cache=cache)[:limit]


def guard_metrics(model: TasmModel, rows: Sequence[PairRow], cfg: FinetuneConfig) -> dict[str, Any]:
    """Validity excluding copies (a verified hypothesis that differs from the baseline),
    validity with copies, and mean cycle reduction of ``model`` on ``rows``."""
    if not rows:
        return {"blocks": 0, "validity_excl_copies": float("nan"), "mean_reduction": float("nan")}
    model.eval()
    with torch.no_grad():
        results = evaluate_rows(model, rows, k=cfg.guard_k, witnesses=cfg.guard_witnesses)
    s = summarize(results, seed=cfg.seed)
    return {
        "blocks": s["blocks"],
        "validity_excl_copies": s["novel_validity"]["value"],
        "validity_excl_copies_ci90": s["novel_validity"]["ci90"],
        "validity_with_copies": s["validity"]["value"],
        "mean_reduction": s["mean_reduction"],
    }


def _history_examples(cfg: FinetuneConfig, max_len: int, isa: Any) -> list[Example]:
    if cfg.history is None or not Path(cfg.history).exists():
        return []
    _, rows = read_pairs(cfg.history)
    return PairDataset([r for r in rows if r.split == "train"], max_len=max_len, isa=isa).examples


def _train(
    model: TasmModel,
    replay: PairDataset,
    picks: list[int],
    history: list[Example],
    cfg: FinetuneConfig,
    device: str,
    progress: bool,
) -> list[float]:
    """The optimizer steps; returns the loss of each."""
    rng = random.Random(cfg.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    model.train()
    n_hist = round(cfg.batch_size * cfg.history_share) if history else 0
    losses: list[float] = []
    bar = tqdm(range(cfg.steps), desc="finetune", unit="step", disable=not progress)
    for step in bar:
        batch_ids = picks[step * (cfg.batch_size - n_hist) : (step + 1) * (cfg.batch_size - n_hist)]
        examples = [replay[i] for i in batch_ids]
        examples += [history[rng.randrange(len(history))] for _ in range(n_hist)]
        batch, tokens, _ = collate(examples)
        batch, tokens = batch.to(device), tokens.to(device)
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup))
        _, loss = model(batch, tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        losses.append(float(loss.item()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses


def micro_finetune(
    session: Session,
    *,
    production: Path,
    model_store: Path,
    cfg: FinetuneConfig,
    guard: Sequence[PairRow] = (),
    progress: bool = False,
    actor: str = "system",
) -> FinetuneOutcome:
    """One Stage 3 run (see the module docstring) on the replay buffer in ``session``.

    Args:
        production: the production checkpoint directory (the parent).
        model_store: where the new checkpoint directory goes.
        guard: the holdout rows of the guard (`guard_rows`); the labeled online results are
            added here.
        actor: recorded with the registry changes.

    Returns:
        The outcome; the registry changes are flushed in ``session`` (the caller commits).

    Raises:
        CheckpointError: ``production`` is not a loadable checkpoint.
        InvalidCheckpoint: the new checkpoint could not be registered.
    """
    t0 = time.perf_counter()
    window = replay_blocks(session, window=cfg.window)
    # a block whose best verified program is the baseline teaches nothing (issue 35)
    blocks = [b for b in window if b.best_cycles < b.baseline_cycles]
    rows = replay_rows(blocks)
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.seed)
    model = load_model(production, device)
    parent = str(read_config(production)["version"])
    replay = PairDataset(rows, max_len=model.config.max_len, isa=model.config.isa)
    if not len(replay):
        return FinetuneOutcome(
            "no_new_results",
            detail={"replay_blocks": len(window), "improved_blocks": len(blocks)},
        )
    # PairDataset drops rows it cannot encode: sample over what it kept
    kept = {id(e.row): k for k, e in enumerate(replay.examples)}
    usable = [(b, kept[id(r)]) for b, r in zip(blocks, rows, strict=True) if id(r) in kept]
    history = _history_examples(cfg, model.config.max_len, model.config.isa)
    n_hist = round(cfg.batch_size * cfg.history_share) if history else 0
    rng = random.Random(cfg.seed)
    draws = prioritized_indices(
        [b for b, _ in usable],
        cfg.steps * (cfg.batch_size - n_hist),
        now=datetime.now(UTC),
        half_life_h=cfg.half_life_h,
        rng=rng,
    )
    if not history:  # design §4's 10 % history: uniform over the whole window
        extra = round(len(draws) * cfg.history_share)
        for j in rng.sample(range(len(draws)), extra):
            draws[j] = rng.randrange(len(usable))
    picks = [usable[j][1] for j in draws]
    labeled = [r for b, r in zip(blocks, rows, strict=True) if b.best_cycles < b.baseline_cycles]
    guard_set = list(guard) + labeled
    before = guard_metrics(model, guard_set, cfg)
    losses = _train(model, replay, picks, history, cfg, device, progress)
    after = guard_metrics(model, guard_set, cfg)
    version = f"{parent}-ft{datetime.now(UTC).strftime('%Y%m%d%H%M%S%f')}"
    detail: dict[str, Any] = {
        "parent": parent,
        "replay_blocks": len(blocks),
        "replay_examples": len(replay),
        "improving_blocks": len(labeled),
        "history_examples": len(history),
        "guard_holdout_blocks": len(guard),
        "guard_before": before,
        "guard_after": after,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    directory = save_checkpoint(
        model,
        Path(model_store) / version,
        version,
        metrics={"guard": after, "guard_production": before},
        extra={
            "stage": "online",
            "parent": parent,
            "training": {
                "stage": 3,
                "parent": parent,
                "steps": cfg.steps,
                "replay_examples": len(replay),
            },
        },
    )
    info = describe_checkpoint(directory, store=Path(model_store))
    register_checkpoint(session, info=info)
    _audit(session, actor, "register", version, "stage 3 micro-finetune", detail)
    out = FinetuneOutcome(
        "candidate",
        steps=cfg.steps,
        version=version,
        validity_before=before["validity_excl_copies"],
        validity_after=after["validity_excl_copies"],
        reduction_before=before["mean_reduction"],
        reduction_after=after["mean_reduction"],
        detail=detail,
    )
    why = guard_refusal(before, after)
    if why is not None:
        out.outcome = "rejected"
        detail["guard"] = why
        reject_checkpoint(session, version=version)
        _audit(session, actor, "reject", version, f"regression guard: {why}", {})
    elif cfg.auto_promote:
        out.outcome = "promoted"
        _, previous = promote_checkpoint(session, version=version)
        _audit(
            session,
            actor,
            "promote",
            version,
            "regression guard passed (AUTO_PROMOTE)",
            {"previous": previous.version if previous is not None else None},
        )
    log.info("%s (%s)", out.line(), detail.get("guard", "guard passed"))
    return out


def _audit(
    session: Session, actor: str, action: str, version: str, reason: str, detail: dict[str, Any]
) -> None:
    record_admin_action(
        session,
        actor=actor,
        action=action,
        target=version,
        reason=reason,
        detail=json.loads(json.dumps(detail, default=str)),
    )


def guard_refusal(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Why the guard refuses ``after`` against ``before`` (`guard_metrics` of production and
    new checkpoint), or None. Without guard blocks nothing can be shown: refused."""
    if not before.get("blocks"):
        return "no guard blocks (no holdout corpus and no labeled online results)"
    vb, va = before["validity_excl_copies"], after["validity_excl_copies"]
    if va < vb - GUARD_DROP:
        return f"validity excluding copies dropped {vb:.3f} -> {va:.3f} (> {GUARD_DROP:.0%})"
    rb, ra = before["mean_reduction"], after["mean_reduction"]
    if ra < rb:
        return f"mean cycle reduction dropped {rb:.4f} -> {ra:.4f}"
    return None
