"""Training pairs: the on-disk format (JSONL rows + ``manifest.json`` in a versioned
directory), its writer and reader, and the torch Dataset / collate the trainer uses.

One row per straight-line block (design §4):

``id, tir_hash, origin ("corpus" | "real"), module, function, block_index, path,
split ("train" | "validation" | "holdout"), tir (JSON ops), entry_depth, net_effect,
baseline (TASM lines), target (best verified TASM lines known), target_source,
baseline_cycles, target_cycles, heights``

Rows are deduplicated by ``tir_hash``, and split by module, never by row. Anything that
produces pairs (the one builder, `tasmopt.train.corpus.build`) writes them with `write_pairs`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from tasmopt.errors import TasmoptError
from tasmopt.isa import IsaVariant
from tasmopt.model.grammar import GrammarState, GrammarTables
from tasmopt.model.graph import batch_graphs
from tasmopt.model.inputs import block_data
from tasmopt.model.vocab import PAD, VocabError, vocab
from tasmopt.tasm.parser import parse_instructions
from tasmopt.tir.codec import decode

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SPLITS",
    "ORIGINS",
    "PairRow",
    "PairsError",
    "write_pairs",
    "read_pairs",
    "read_manifest",
    "PairDataset",
    "Example",
    "collate",
    "encode_row",
]

log = logging.getLogger(__name__)

FORMAT, FORMAT_VERSION = "tasmopt-pairs", 1
SPLITS = ("train", "validation", "holdout")
ORIGINS = ("corpus", "real")
ROWS_FILE, MANIFEST_FILE = "pairs.jsonl", "manifest.json"


class PairsError(TasmoptError):
    """A pairs directory or row that does not follow the format."""


@dataclass
class PairRow:
    """One training pair (see the module docstring). Cycles are clock cycles of one pass
    through the block; ``heights`` are the target's AET table heights."""

    id: str
    tir_hash: str
    origin: str
    module: str
    function: str
    block_index: int
    path: str
    split: str
    tir: list[Any]
    entry_depth: int
    net_effect: int
    baseline: list[str]
    target: list[str]
    target_source: str
    baseline_cycles: int
    target_cycles: int
    heights: dict[str, int] = field(default_factory=dict)

    def check(self) -> None:
        """Raises `PairsError` for an unknown split/origin or a target worse than the
        baseline."""
        if self.split not in SPLITS:
            raise PairsError(f"row {self.id}: split {self.split!r} not in {SPLITS}")
        if self.origin not in ORIGINS:
            raise PairsError(f"row {self.id}: origin {self.origin!r} not in {ORIGINS}")
        if self.target_cycles > self.baseline_cycles:
            raise PairsError(
                f"row {self.id}: target costs {self.target_cycles} cycles, "
                f"more than the baseline's {self.baseline_cycles}"
            )

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PairRow:
        try:
            return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except TypeError as exc:
            raise PairsError(f"row {d.get('id')!r}: {exc}") from None


def write_pairs(
    directory: Path | str,
    rows: Iterable[PairRow],
    *,
    name: str,
    description: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write rows to ``directory/pairs.jsonl`` and a ``manifest.json`` describing them.

    Rows are checked (`PairRow.check`) and deduplicated by ``tir_hash`` (first kept).

    Returns:
        the manifest: format, name, created_at, row counts by split and origin, the
        target sources, and ``extra``.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    kept: list[PairRow] = []
    for row in rows:
        row.check()
        if row.tir_hash in seen:
            continue
        seen.add(row.tir_hash)
        kept.append(row)
    with open(out / ROWS_FILE, "w") as f:
        for row in kept:
            f.write(row.to_json() + "\n")
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "description": description,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": len(kept),
        "splits": dict(Counter(r.split for r in kept)),
        "origins": dict(Counter(r.origin for r in kept)),
        "split_origins": {s: dict(Counter(r.origin for r in kept if r.split == s)) for s in SPLITS},
        "target_sources": dict(Counter(r.target_source for r in kept)),
        "improved": sum(r.target_cycles < r.baseline_cycles for r in kept),
        "modules": {s: sorted({r.module for r in kept if r.split == s}) for s in SPLITS},
        **(extra or {}),
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(directory: Path | str) -> dict[str, Any]:
    path = Path(directory) / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise PairsError(f"{path}: missing (not a pairs directory)") from None
    if manifest.get("format") != FORMAT:
        raise PairsError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def read_pairs(
    directory: Path | str, splits: Sequence[str] | None = None
) -> tuple[dict[str, Any], list[PairRow]]:
    """The manifest and the rows of a pairs directory (optionally only some splits)."""
    manifest = read_manifest(directory)
    rows: list[PairRow] = []
    with open(Path(directory) / ROWS_FILE) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = PairRow.from_dict(json.loads(line))
            except json.JSONDecodeError as exc:
                raise PairsError(f"{directory}/{ROWS_FILE}:{n}: {exc}") from None
            if splits is None or row.split in splits:
                rows.append(row)
    return manifest, rows


# -- torch side ----------------------------------------------------------------------------


@dataclass
class Example:
    """One encoded row: the graph (with ``limit``), target token ids (EOS-terminated), the
    block's immediates, and the row itself."""

    data: Any
    tokens: list[int]
    immediates: list[int]
    row: PairRow


def encode_row(row: PairRow, *, max_len: int, isa: IsaVariant = "release") -> Example:
    """Encode a row for the model.

    Raises:
        VocabError: a target line has no token.
        PairsError: the target (with EOS) is longer than ``max_len``, or longer than the
            baseline (a straight-line target never is).
    """
    ops = decode(row.tir)
    base = parse_instructions("\n".join(row.baseline), isa)
    target = parse_instructions("\n".join(row.target), isa)
    data, imms = block_data(ops, row.entry_depth, row.net_effect, base, max_len=max_len, isa=isa)
    tokens = vocab(isa).encode(target, imms)
    if len(tokens) > int(data.limit[0]):
        raise PairsError(
            f"row {row.id}: target has {len(tokens) - 1} instructions, limit "
            f"{int(data.limit[0]) - 1}"
        )
    return Example(data, tokens, imms, row)


def grammar_violations(examples: Sequence[Example], isa: IsaVariant = "release") -> list[int]:
    """Indices of examples whose target the grammar mask would forbid somewhere (should be
    none: every verified target respects the verifier's underflow contract)."""
    if not examples:
        return []
    tables = GrammarTables.build(vocab(isa))
    batch = batch_graphs([e.data for e in examples])
    tokens = pad_tokens([e.tokens for e in examples])
    state = GrammarState.start(
        batch.entry_depth, batch.net_effect, batch.floor, batch.ptr_valid, batch.limit
    )
    bad = torch.zeros(len(examples), dtype=torch.bool)
    for t in range(tokens.shape[1]):
        tok = tokens[:, t]
        ok = state.allowed(tables).gather(1, tok[:, None]).squeeze(1)
        bad |= ~ok & (tok != PAD)
        state = state.step(tables, tok)
    return [i for i in range(len(examples)) if bool(bad[i])]


def pad_tokens(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    """(G, T) int64, PAD after each sequence."""
    t = max(len(s) for s in seqs)
    out = torch.full((len(seqs), t), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


class PairDataset(Dataset):
    """Encoded rows of some splits of a pairs directory.

    Rows whose target cannot be encoded or breaks the grammar are left out and counted in
    `skipped` (reason -> count); `coverage` is the share of rows kept.

    With ``copies``, every row whose target differs from its baseline also yields a second
    example whose target is the baseline itself: the model learns to reproduce the
    compiler's lowering (always valid) as well as the improvement, so beam search keeps
    both, and the verifier picks.
    """

    def __init__(
        self,
        rows: Sequence[PairRow],
        *,
        max_len: int,
        isa: IsaVariant = "release",
        copies: bool = False,
    ) -> None:
        self.skipped: Counter[str] = Counter()
        examples: list[Example] = []
        for row in rows:
            try:
                ex = encode_row(row, max_len=max_len, isa=isa)
            except VocabError:
                self.skipped["target line without a token"] += 1
                continue
            except PairsError:
                self.skipped["target longer than the limit"] += 1
                continue
            examples.append(ex)
            if copies and row.target != row.baseline:
                try:
                    base = parse_instructions("\n".join(row.baseline), isa)
                    examples.append(
                        Example(ex.data, vocab(isa).encode(base, ex.immediates), ex.immediates, row)
                    )
                except VocabError:
                    pass
        bad = set(grammar_violations(examples, isa))
        if bad:
            self.skipped["target breaks the grammar"] += len(bad)
            examples = [e for i, e in enumerate(examples) if i not in bad]
        self.examples = examples
        self.total = len(rows)
        self.rows_kept = len({id(e.row) for e in examples})
        if self.skipped:
            log.warning(
                "pairs: %d of %d rows left out: %s",
                sum(self.skipped.values()),
                len(rows),
                dict(self.skipped),
            )

    @property
    def coverage(self) -> float:
        return self.rows_kept / self.total if self.total else 1.0

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]


def collate(examples: Sequence[Example]) -> tuple[Any, torch.Tensor, list[Example]]:
    """A torch-geometric ``Batch`` of the graphs, the (G, T) padded target ids, and the
    examples themselves."""
    batch = batch_graphs([e.data for e in examples])
    return batch, pad_tokens([e.tokens for e in examples]), list(examples)


# -- splits by module ------------------------------------------------------------------------


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
