"""Stage 2: GFlowNet fine-tuning with trajectory balance (design §4).

The decoder is the forward policy of a GFlowNet whose objects are candidate blocks: a
trajectory is one token sequence, so every state has exactly one parent and the backward
policy is 1. Trajectory balance for a block ``x`` and a sampled candidate ``τ``::

    L(τ) = ( log Z(x) + log P_F(τ | x) - log R(τ | x) )²

* **Conditional partition function.** ``log Z(x)`` is predicted per block by `LogZHead`, a
  small MLP on the encoder's graph embedding (the masked mean of its memory tokens); one
  scalar for all blocks would be wrong for a conditional GFlowNet. The head sees the
  embedding detached (the encoder learns through the policy) and has its own learning rate.
* **Reward** (design §4): ``1 + max(0, (baseline - cycles) / baseline)`` if the verifier
  proves the candidate equivalent to the block's baseline (`check_block`), else ``1e-3``;
  during the first ``partial_steps`` steps a rejected candidate earns `PARTIAL_CREDIT`
  instead (it is grammatical, decodes to instructions and reaches the verifier), so the
  policy is not flattened before it finds valid ones.
* **Exploration.** Trajectories are sampled at a temperature annealed linearly from
  ``temperature_start`` (1.0) to ``temperature_end`` (0.5); ``log P_F`` is the policy's own
  (temperature 1, grammar mask applied) log-probability of the sampled tokens, recomputed with
  gradients by teacher forcing: trajectory balance holds for any sampling distribution.
  Design §4 says 2.0 -> 0.5; measured on an H100 from ``s1-corpus-v1`` (corpus train split,
  8 blocks x 8 samples), starting at 2.0 without anchors the share of valid samples fell
  from 5% to under 1% by step 150 and 0.2% by step 500 (log Z drifting to 50-60 to match
  the long, improbable samples); with anchors (a CPU run, 104 steps) it fell the same way,
  5.8% -> 1.2%; 1.0 -> 0.5 with anchors held 13-17% over 456 steps (H100). Hence 1.0.
* **Anchors.** Every step also trains on the picked blocks' verified targets with their
  known reward (off-policy trajectories), so log Z has valid programs to balance against.

`train_stage2` resumes from a checkpoint and writes a new one (``stage: gflownet``, its
``parent``; ``logz.safetensors`` holds the head, which inference never needs). The training
step keeps no global state: model, head, optimizer and data are arguments, so a torch DDP
wrapper around `TasmModel` and `LogZHead` (one process per GPU, blocks sharded by rank,
rewards computed per rank on its own CPU cores) is what a multi-GPU run needs.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm import tqdm

from tasmopt.model.beam import sample
from tasmopt.model.checkpoint import load_model, read_config, save_checkpoint
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import EOS, PAD, VocabError
from tasmopt.report import reward as design_reward
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode
from tasmopt.train.dataset import PairRow, PairsError, encode_row, grammar_violations
from tasmopt.vm.equivalence import BlockCheck, check_block

__all__ = [
    "LOGZ_FILE",
    "PARTIAL_CREDIT",
    "LogZHead",
    "Stage2Config",
    "Stage2Result",
    "temperature_at",
    "trajectory_balance",
    "train_stage2",
]

log = logging.getLogger(__name__)

#: File of the log Z head inside a Stage 2 checkpoint directory.
LOGZ_FILE = "logz.safetensors"

#: Reward of a rejected candidate during the warm-up (``partial_steps``).
PARTIAL_CREDIT = 0.05


class LogZHead(nn.Module):
    """``log Z(x)`` per block from the encoder's graph embedding.

    Input: `EncodedGraphs` ``memory`` (G, S, d) and ``memory_mask`` (G, S); output (G,) float.
    """

    def __init__(self, d_model: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).float()
        pooled = (memory * m).sum(1) / m.sum(1).clamp(min=1.0)
        out: torch.Tensor = self.net(pooled).squeeze(-1)
        return out


@dataclass
class Stage2Config:
    """Knobs of a Stage 2 run (defaults: design §4).

    Attributes:
        steps: optimizer steps. blocks: blocks per step. samples: trajectories per block.
        lr, lr_logz: learning rates of the policy and of the log Z head (AdamW).
        temperature_start, temperature_end: sampling temperature, annealed linearly.
        partial_steps: steps during which rejected candidates earn `PARTIAL_CREDIT`.
        witnesses: differential witnesses per verification. clip: gradient-norm clip.
        max_minutes: wall-clock budget (stops after the step that exceeds it).
        device: torch device (default CUDA when available). seed: sampling seed.
        verify_workers: processes verifying a step's candidates (0: in this process).
        anchors: also train, every step, on each picked block's best verified program (the
            pair's target) with its known reward (see the module docstring).
    """

    steps: int = 200
    blocks: int = 8
    samples: int = 8
    lr: float = 1e-5
    lr_logz: float = 1e-2
    temperature_start: float = 1.0
    temperature_end: float = 0.5
    partial_steps: int = 1000
    witnesses: int = 16
    clip: float = 1.0
    max_minutes: float | None = None
    device: str | None = None
    seed: int = 0
    verify_workers: int = 0
    anchors: bool = True


@dataclass
class Stage2Result:
    """A finished run: the checkpoint written and one record per step (loss, mean log
    reward, share of valid samples, mean predicted log Z, temperature, seconds in all and
    split into sampling, verification and the gradient update)."""

    checkpoint: Path
    history: list[dict[str, float]] = field(default_factory=list)


def temperature_at(step: int, cfg: Stage2Config) -> float:
    """Sampling temperature of ``step`` (linear from start to end over ``cfg.steps``)."""
    frac = step / max(1, cfg.steps - 1)
    return cfg.temperature_start + frac * (cfg.temperature_end - cfg.temperature_start)


def trajectory_balance(
    model: TasmModel,
    head: LogZHead,
    batch: Any,
    tokens: torch.Tensor,
    log_reward: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Trajectory-balance loss of S sampled trajectories.

    Args:
        batch: the S trajectories' graphs (one per trajectory, repeated per block).
        tokens: (S, T) int64 token ids, EOS included, PAD after.
        log_reward: (S,) float log R.

    Returns:
        (loss scalar, (S,) log P_F, (S,) log Z).
    """
    logits, _ = model(batch, tokens)  # grammar mask applied as a logit penalty
    logp = torch.log_softmax(logits, dim=-1).gather(2, tokens.unsqueeze(-1)).squeeze(-1)
    log_pf = (logp * (tokens != PAD).float()).sum(1)
    enc = model.encode(batch)
    log_z = head(enc.memory.detach(), enc.memory_mask)
    loss = ((log_z + log_pf - log_reward) ** 2).mean()
    return loss, log_pf, log_z


def _verify(job: tuple[tuple[str, ...], tuple[str, ...], int]) -> tuple[bool, int]:
    """(equivalent, cycles) of one candidate against its baseline; a pool worker's task."""
    baseline, lines, witnesses = job
    v = check_block(BlockCheck(baseline, lines, witnesses=witnesses))
    return v.equivalent, v.cycles


class _Rewards:
    """Verified rewards, memoized per (block, candidate). With ``cfg.verify_workers`` > 0 a
    step's new candidates are verified in a process pool (spawned, so no CUDA context is
    inherited); the verifier is CPU-bound and is the step's bottleneck on a GPU."""

    def __init__(self, cfg: Stage2Config) -> None:
        self.cfg = cfg
        self.cache: dict[tuple[str, tuple[str, ...]], tuple[bool, int]] = {}
        self._pool: Any = None

    def _value(self, row: PairRow, hit: tuple[bool, int], step: int) -> tuple[float, bool]:
        ok, cycles = hit
        if not ok and step < self.cfg.partial_steps:
            return PARTIAL_CREDIT, False
        return design_reward(ok, cycles, row.baseline_cycles), ok

    def __call__(self, row: PairRow, lines: list[str], step: int) -> tuple[float, bool]:
        return self.many([(row, lines)], step)[0]

    def many(
        self, items: Sequence[tuple[PairRow, list[str]]], step: int
    ) -> list[tuple[float, bool]]:
        """Rewards of ``items`` ((block, candidate lines) pairs), in order."""
        keys = [(row.id, tuple(lines)) for row, lines in items]
        todo: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, ...], tuple[str, ...], int]] = {}
        for (row, _), key in zip(items, keys, strict=True):
            if key not in self.cache and key not in todo:
                todo[key] = (tuple(row.baseline), key[1], self.cfg.witnesses)
        if todo:
            jobs = list(todo.values())
            if self.cfg.verify_workers > 0 and len(jobs) > 1:
                if self._pool is None:
                    import multiprocessing
                    from concurrent.futures import ProcessPoolExecutor

                    self._pool = ProcessPoolExecutor(
                        self.cfg.verify_workers, mp_context=multiprocessing.get_context("spawn")
                    )
                verdicts = list(self._pool.map(_verify, jobs, chunksize=4))
            else:
                verdicts = [_verify(j) for j in jobs]
            self.cache.update(zip(todo, verdicts, strict=True))
        return [
            self._value(row, self.cache[k], step) for (row, _), k in zip(items, keys, strict=True)
        ]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _anchor_tokens(rows: Sequence[PairRow], model: TasmModel) -> list[list[int] | None]:
    """Per row, token ids (EOS included) of its verified target; None where the target has
    no encoding or breaks the decoder's grammar (its log P_F would be the mask's penalty)."""
    examples: list[Any] = []
    for row in rows:
        try:
            examples.append(encode_row(row, max_len=model.config.max_len, isa=model.config.isa))
        except (PairsError, VocabError):
            examples.append(None)
    kept = [k for k, e in enumerate(examples) if e is not None]
    bad = {kept[b] for b in grammar_violations([examples[k] for k in kept], model.config.isa)}
    return [None if e is None or k in bad else list(e.tokens) for k, e in enumerate(examples)]


def _inputs(rows: Sequence[PairRow], model: TasmModel) -> list[tuple[Any, list[int]]]:
    out = []
    for r in rows:
        base = parse_instructions("\n".join(r.baseline), model.config.isa)
        out.append(
            block_data(
                decode(r.tir),
                r.entry_depth,
                r.net_effect,
                base,
                max_len=model.config.max_len,
                isa=model.config.isa,
            )
        )
    return out


def train_stage2(
    checkpoint: Path,
    rows: Sequence[PairRow],
    out_dir: Path,
    version: str,
    cfg: Stage2Config,
    *,
    progress: bool = False,
) -> Stage2Result:
    """Fine-tune ``checkpoint`` with trajectory balance on the blocks of ``rows`` and write
    ``out_dir/version`` (see the module docstring). A ``logz.safetensors`` beside the
    parent's weights is resumed.

    Raises:
        CheckpointError: ``checkpoint`` is not loadable.
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("stage 2 needs blocks to sample from")
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    model = load_model(checkpoint, device)
    parent = str(read_config(checkpoint)["version"])
    head = LogZHead(model.config.d_model).to(device)
    if (Path(checkpoint) / LOGZ_FILE).exists():
        head.load_state_dict(load_file(str(Path(checkpoint) / LOGZ_FILE), device=device))
    opt = torch.optim.AdamW(
        [
            {"params": model.parameters(), "lr": cfg.lr},
            {"params": head.parameters(), "lr": cfg.lr_logz},
        ],
        weight_decay=0.0,
    )
    inputs = _inputs(rows, model)
    anchors = _anchor_tokens(rows, model) if cfg.anchors else [None] * len(rows)
    rewards = _Rewards(cfg)
    history: list[dict[str, float]] = []
    t_start = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc="stage 2", unit="step", disable=not progress)
    for step in bar:
        t0 = time.perf_counter()
        temp = temperature_at(step, cfg)
        picked = rng.sample(range(len(rows)), min(cfg.blocks, len(rows)))
        datas = [inputs[i][0] for i in picked]
        imms = [inputs[i][1] for i in picked]
        model.eval()
        t_sample = time.perf_counter()
        with torch.no_grad():
            hyps = sample(
                model,
                batch_graphs(datas).to(device),
                imms,
                k=cfg.samples,
                temperature=temp,
                generator=gen,
            )
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t_verify = time.perf_counter()
        traj_data, traj_tokens, log_r = [], [], []
        valid = 0
        flat = [(i, h) for i, hs in zip(picked, hyps, strict=True) for h in hs]
        scored = rewards.many([(rows[i], [str(x) for x in h.instrs]) for i, h in flat], step)
        for (i, h), (value, ok) in zip(flat, scored, strict=True):
            valid += int(ok)
            traj_data.append(inputs[i][0])
            traj_tokens.append([*h.tokens, EOS])
            log_r.append(math.log(value))
        sampled = len(log_r)
        for i in picked if cfg.anchors else ():
            anchor = anchors[i]
            if anchor is not None:
                traj_data.append(inputs[i][0])
                traj_tokens.append(anchor)
                log_r.append(
                    math.log(design_reward(True, rows[i].target_cycles, rows[i].baseline_cycles))
                )
        if not traj_tokens:
            continue
        t_update = time.perf_counter()
        width = max(len(t) for t in traj_tokens)
        tokens = torch.full((len(traj_tokens), width), PAD, dtype=torch.long)
        for j, t in enumerate(traj_tokens):
            tokens[j, : len(t)] = torch.tensor(t)
        model.train()
        loss, _log_pf, log_z = trajectory_balance(
            model,
            head,
            batch_graphs(traj_data).to(device),
            tokens.to(device),
            torch.tensor(log_r, device=device),
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*model.parameters(), *head.parameters()], cfg.clip)
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t_end = time.perf_counter()
        rec = {
            "step": step,
            "loss": float(loss.item()),
            "mean_log_reward": sum(log_r[:sampled]) / max(1, sampled),
            "valid_share": valid / max(1, sampled),
            "mean_log_z": float(log_z.mean().item()),
            "temperature": temp,
            "trajectories": sampled,
            "anchors": len(log_r) - sampled,
            "seconds": t_end - t0,
            "sample_s": t_verify - t_sample,
            "verify_s": t_update - t_verify,
            "update_s": t_end - t_update,
        }
        history.append(rec)
        bar.set_postfix(loss=f"{rec['loss']:.3f}", valid=f"{rec['valid_share']:.2f}")
        if cfg.max_minutes is not None and time.perf_counter() - t_start > 60 * cfg.max_minutes:
            log.info("stage 2: time budget of %.1f min reached at step %d", cfg.max_minutes, step)
            break
    rewards.close()
    model.eval()
    directory = save_checkpoint(
        model,
        Path(out_dir) / version,
        version,
        metrics={"stage2": history[-1] if history else {}},
        extra={
            "stage": "gflownet",
            "parent": parent,
            "training": {
                "stage": 2,
                "parent": parent,
                "blocks": len(rows),
                "config": {k: v for k, v in asdict(cfg).items()},
            },
        },
    )
    save_file(
        {k: v.detach().cpu() for k, v in head.state_dict().items()}, str(directory / LOGZ_FILE)
    )
    (directory / "stage2_metrics.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return Stage2Result(directory, history)
