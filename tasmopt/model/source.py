"""The model as a candidate source (`tasmopt.sources`): K beam hypotheses per block, all
blocks of a request decoded as one batch. Load it and add it to the sources a compile uses::

    from tasmopt.optimizer import compile, default_sources
    from tasmopt.model.source import load_model_source
    sources = default_sources()
    sources.add(load_model_source(Path("model_store/s1-real-v1")))
    compile(tir, options=CompileOptions(sources=("rules", "search", "model")), sources=sources)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch

from tasmopt.model.beam import beam_search, merged, sample
from tasmopt.model.checkpoint import (
    Precision,
    for_inference,
    load_model,
    read_config,
    read_metrics,
)
from tasmopt.model.config import GREEDY_MAX_PASSES, SERVICE_BEAMS
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.model import TasmModel
from tasmopt.report import CompileOptions
from tasmopt.sources import BlockTask, CandidateSource
from tasmopt.tasm.program import Instr

__all__ = ["ModelSource", "load_model_source"]

log = logging.getLogger(__name__)


class ModelSource:
    """Candidate source ``"model"``.

    Args:
        model: a loaded `TasmModel` (eval mode).
        version: checkpoint version, reported with results.
        k: beams per block.
        samples: extra sampled hypotheses per block (0: beam search only).
        temperature: sampling temperature.
        max_blocks: blocks per forward batch (bounds memory: rows = blocks x k).
        min_instrs: blocks whose baseline has fewer instructions get no model candidates
            (not decoded: the search's exact scheduling already covers short blocks, and
            each skipped block saves a beam search). 0: every block.
        ahead_of_search: the model saves more cycles per second than the search (measured:
            the checkpoint's ``rates``, `tasmopt.train.marginal.source_rates`); under a
            deadline its tier then runs before the search's (`tasmopt.optimizer.tiers`).
        max_passes: with ``k == 1``, most forward passes of greedy decoding per batch
            (`GREEDY_MAX_PASSES`); the blocks unfinished by then get no candidates.
    """

    name = "model"

    def __init__(
        self,
        model: TasmModel,
        version: str,
        *,
        k: int = SERVICE_BEAMS,
        samples: int = 0,
        temperature: float = 1.0,
        max_blocks: int = 64,
        min_instrs: int = 0,
        ahead_of_search: bool = False,
        max_passes: int | None = GREEDY_MAX_PASSES,
    ) -> None:
        self.model = model
        self.max_passes = max_passes
        self.ahead_of_search = ahead_of_search
        self.version = version
        self.k = k
        self.samples = samples
        self.temperature = temperature
        self.max_blocks = max_blocks
        self.min_instrs = min_instrs
        self.last_latency_s = 0.0
        # beam search is deterministic: a block seen before costs nothing (bounded LRU)
        self._cache: OrderedDict[tuple, list[list[Instr]]] = OrderedDict()
        self._cache_size = 4096
        # total log-probability of each proposed candidate, for the replay buffer (LRU)
        self._logp: OrderedDict[tuple, float] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ModelSource(version={self.version!r}, k={self.k}, samples={self.samples}, "
            f"temperature={self.temperature}, min_instrs={self.min_instrs})"
        )

    def _remember(self, block: tuple, candidate: tuple[str, ...], logprob: float) -> None:
        with self._lock:
            self._logp[(block, candidate)] = float(logprob)
            if len(self._logp) > 16 * self._cache_size:
                self._logp.popitem(last=False)

    def clear_cache(self) -> None:
        """Forget decoded blocks and remembered log-probabilities (benchmarks start cold)."""
        with self._lock:
            self._cache.clear()
            self._logp.clear()

    def logprob(self, task: BlockTask, candidate: Sequence[Instr]) -> float | None:
        """Total log-probability (nats, EOS included) this model gave ``candidate`` when it
        proposed it for ``task``; None if it did not propose it (or it was forgotten)."""
        with self._lock:
            return self._logp.get((_block_key(task), tuple(map(str, candidate))))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def propose(
        self, tasks: Sequence[BlockTask], options: CompileOptions
    ) -> list[list[list[Instr]]]:
        """Up to ``k`` (+ ``samples``) distinct candidates per task, best first: the beams,
        then the samples (drawn with a generator seeded by ``options.seed``, so a request
        repeats; sampled results are not cached)."""
        t0 = time.perf_counter()
        out: list[list[list[Instr]]] = [[] for _ in tasks]
        isa = self.model.config.isa
        if options.isa != isa:
            log.warning(
                "model trained for ISA %s, request is %s: no model candidates", isa, options.isa
            )
            return out
        items = []
        keys: dict[int, tuple] = {}
        first: dict[tuple, int] = {}
        copies: list[tuple[int, int]] = []
        for i, t in enumerate(tasks):
            if not t.baseline or len(t.baseline) < self.min_instrs:
                continue
            if not self.samples:
                keys[i] = (
                    t.tir_hash,
                    tuple(map(str, t.baseline)),
                    t.entry_depth,
                    t.net_effect,
                    self.k,
                )
                with self._lock:
                    hit = self._cache.get(keys[i])
                    if hit is not None:
                        self._cache.move_to_end(keys[i])
                if hit is not None:
                    out[i] = [list(c) for c in hit]
                    continue
                if keys[i] in first:  # the same block twice in one request: decoded once
                    copies.append((i, first[keys[i]]))
                    continue
                first[keys[i]] = i
            data, imms = block_data(
                t.ops,
                t.entry_depth,
                t.net_effect,
                t.baseline,
                max_len=self.model.config.max_len,
                isa=isa,
            )
            items.append((i, data, imms))
        # batches of blocks of similar length: a batch is padded to its longest block
        items.sort(key=lambda item: len(tasks[item[0]].baseline))
        dl = options.deadline
        stop = (lambda: dl.expired) if dl is not None else None
        generator = torch.Generator(device=self.device)
        generator.manual_seed(options.seed)
        for s in range(0, len(items), self.max_blocks):
            if options.deadline is not None and options.deadline.expired:
                break  # decoding is batched: the request's deadline is looked at per batch
            chunk = items[s : s + self.max_blocks]
            batch = batch_graphs([d for _, d, _ in chunk]).to(self.device)
            chunk_imms = [m for _, _, m in chunk]
            hyps = beam_search(
                self.model, batch, chunk_imms, k=self.k, stop=stop, max_passes=self.max_passes
            )
            if self.samples:
                extra = sample(
                    self.model,
                    batch,
                    chunk_imms,
                    k=self.samples,
                    temperature=self.temperature,
                    generator=generator,
                    stop=stop,
                )
                hyps = [merged(h, e) for h, e in zip(hyps, extra)]
            for (i, _, _), hs in zip(chunk, hyps):
                seen: set[tuple[str, ...]] = set()
                block = _block_key(tasks[i])
                for h in hs:
                    key = tuple(map(str, h.instrs))
                    if key not in seen:
                        seen.add(key)
                        out[i].append(list(h.instrs))
                        self._remember(block, key, h.logprob)
                if i in keys and not (dl is not None and dl.expired):  # cut: not complete
                    with self._lock:
                        self._cache[keys[i]] = [list(c) for c in out[i]]
                        if len(self._cache) > self._cache_size:
                            self._cache.popitem(last=False)
        for i, j in copies:
            out[i] = [list(c) for c in out[j]]
        self.last_latency_s = time.perf_counter() - t0
        return out


def _block_key(task: BlockTask) -> tuple:
    return (task.tir_hash, tuple(map(str, task.baseline)), task.entry_depth, task.net_effect)


def load_model_source(
    checkpoint_dir: Path,
    device: str = "cpu",
    *,
    k: int = SERVICE_BEAMS,
    samples: int = 0,
    temperature: float = 1.0,
    min_instrs: int = 0,
    precision: Precision = "float32",
    max_passes: int | None = GREEDY_MAX_PASSES,
) -> CandidateSource:
    """Load the checkpoint in ``checkpoint_dir`` as candidate source ``"model"`` (options as
    `ModelSource`'s), decoding at ``precision`` (`tasmopt.model.checkpoint.for_inference`);
    ``ahead_of_search`` from the checkpoint's measured ``rates`` (``metrics.json``).

    Raises:
        CheckpointError: the directory is not a loadable checkpoint.
        ValueError: int8 on a non-CPU device.
    """
    config = read_config(checkpoint_dir)
    model = for_inference(load_model(checkpoint_dir, device), precision)
    rates = read_metrics(checkpoint_dir).get("rates") or {}
    return ModelSource(
        model,
        str(config["version"]),
        k=k,
        samples=samples,
        temperature=temperature,
        min_instrs=min_instrs,
        ahead_of_search=bool(rates.get("model_first", False)),
        max_passes=max_passes,
    )
