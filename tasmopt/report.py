"""What `optimizer.compile` returns: the TASM and a per-function, per-block cost report.

Plain dataclasses with `to_dict()` so the service, the worker, the CLI and the store can
serialize them without knowing how they were produced. Units: cycles are clock cycles
(processor table rows); heights are unpadded AET table rows (Triton VM spec §7).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from tasmopt.deadline import Deadline
from tasmopt.isa import IsaVariant

__all__ = [
    "Source",
    "CandidateStats",
    "CandidateRecord",
    "BlockTrajectories",
    "reward",
    "INVALID_REWARD",
    "BlockReport",
    "FunctionReport",
    "CompileResult",
    "CompileOptions",
    "BaselineMismatch",
    "Status",
    "CacheUse",
    "CachedFunction",
    "FunctionCache",
]

#: Where the TASM of a block or function came from. ``compiler``: our baseline lowering (or
#: the client's baseline), unchanged; ``rules``: classical rewrite rules; ``search``: the block
#: superoptimizer; ``model``: the neural model; ``client``: the client's baseline_tasm, returned
#: unchanged because it disagrees with our lowering.
Source = Literal["compiler", "rules", "search", "model", "client"]

#: Whether a function's answer can still get better (design §1, anytime optimization).
#: ``final``: nothing left to try at the budgets we run (a complete search at the deepening
#: budget, no rewritable block, or a baseline passed through for a reason time cannot
#: change); ``improving``: the answer was cut by the request's deadline or searched at less
#: than the deepening budget; a later build of the same function may get a better one.
Status = Literal["final", "improving"]

#: How the per-function result cache served a function: ``hit`` (the stored best verified
#: program), ``miss`` (computed now), ``off`` (no cache consulted).
CacheUse = Literal["hit", "miss", "off"]


@dataclass
class CandidateStats:
    """Candidates one source proposed for a block, and how many the verifier accepted."""

    generated: int = 0
    valid: int = 0


@dataclass
class BlockReport:
    """One straight-line block of a function (design §2).

    Attributes:
        index: block index within its function (pre-order over bodies).
        path: TIR path of the block's first op, e.g. ``tir[3].IfElse.then_body[0]``.
        source: where the chosen TASM came from.
        tasm: chosen instruction lines (no indentation).
        baseline_tasm: the baseline lowering's lines for the same block.
        cycles, baseline_cycles: clock cycles of one pass through the block.
        verified_by: ``"symbolic"`` or ``"differential"`` for a replaced block, else None.
        candidates: per source, generated / valid counts.
        tir_hash: sha256 of the block's canonical TIR JSON.
        heights, baseline_heights: AET heights of the block run alone as a program (with a
            ``halt``), max over witnesses; empty for a block no source proposed anything for
            (its baseline is not run alone).
    """

    index: int
    path: str
    source: Source
    tasm: list[str]
    baseline_tasm: list[str]
    cycles: int
    baseline_cycles: int
    tir_hash: str = ""
    verified_by: str | None = None
    candidates: dict[str, CandidateStats] = field(default_factory=dict)
    heights: dict[str, int] = field(default_factory=dict)
    baseline_heights: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BaselineMismatch:
    """The client's baseline_tasm disagrees with our lowering of the same TIR.

    Attributes:
        cause: one sentence, e.g. ``"stack differs at st0: 5 vs 7"``.
        witness: index of the witness that showed it (-1 if structural, e.g. unparsable).
        known_bug: the upstream bug this matches, if recognised (e.g. ``loop fall-through``).
    """

    cause: str
    witness: int = -1
    known_bug: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FunctionReport:
    """One function of the request.

    Attributes:
        name: function name (``FnStart`` payload).
        source: ``compiler`` if nothing improved, ``client`` if the client's baseline was
            returned unchanged, else the source of the best block (``rules``/``search``/
            ``model``; mixed functions report the source that saved most cycles).
        cycles, baseline_cycles: clock cycles of a call of the function as returned (its
            callees' improved code included), max over the
            verifier's witnesses on which the baseline halted (on failing runs, up to the
            failure, if it never halted: see ``halted``), excluding the harness
            ``call``/``halt``.
        halted: of the witnesses measured, how many ran the baseline to a successful
            ``return`` (0 when, e.g., a random witness never satisfies an ``assert``).
        heights, baseline_heights: AET table heights of the same runs (max over witnesses).
        padded_height, baseline_padded_height: next power of two of the tallest table.
        fallback: True if the function was returned as the baseline (no verified gain, or a
            check failed).
        reason: why it fell back, if it did.
        mismatch: set when the client's baseline disagrees with our lowering.
        unlowerable: TIR paths and reasons of ops that cannot be lowered to valid TASM (the
            function is then passed through untouched).
        tasm: the function's lines in the returned module text (its label, body and
            deferred blocks).
        own_cycles: the function's cycles with its callees' *baseline* code (its own
            saving alone); None when no callee was improved (then equal to ``cycles``).
        notes: what the optimizer left alone and why (blocks entered mid-way, ...).
        rewrites: the function-level passes whose rewrite of it was kept, in the order
            they ran (``inline``, ``loops``, ``dots``, ...; the stage names of
            `tasmopt.optimizer.compile`'s timings).
        rejections: verifier rejections of this function's candidates, counted by reason
            class (``guards``: too few witnesses pass the baseline's guards, ``degree``,
            ``different``, ``unprovable``, ``function``: whole-function re-verification).
        status: ``final`` or ``improving`` (see `Status`).
        measured: False when nothing was measured: the deadline cut the function before its
            baseline ran, or it lay outside ``CompileOptions.only``. Its costs (``cycles``,
            ``baseline_cycles``, heights) are then 0 and mean nothing; ``reason`` says why,
            and the API reports them as null.
        cache: how the result cache served it (see `CacheUse`).
        cache_key: its result-cache key (`tasmopt.optimizer.keys`); ``""`` when it has none
            (no cache consulted, TIR that cannot be lowered, missing from the baseline).
    """

    name: str
    source: Source
    cycles: int
    baseline_cycles: int
    heights: dict[str, int] = field(default_factory=dict)
    baseline_heights: dict[str, int] = field(default_factory=dict)
    padded_height: int = 0
    baseline_padded_height: int = 0
    halted: int = 0
    fallback: bool = True
    reason: str | None = None
    mismatch: BaselineMismatch | None = None
    unlowerable: list[str] = field(default_factory=list)
    blocks: list[BlockReport] = field(default_factory=list)
    tasm: list[str] = field(default_factory=list)
    tir_hash: str = ""
    latency_s: float = 0.0
    own_cycles: int | None = None
    notes: list[str] = field(default_factory=list)
    rewrites: list[str] = field(default_factory=list)
    rejections: dict[str, int] = field(default_factory=dict)
    status: Status = "final"
    measured: bool = True
    cache: CacheUse = "off"
    cache_key: str = ""

    @property
    def cycle_reduction(self) -> float:
        """Relative saving ``(baseline - cycles) / baseline``; 0 when the baseline is 0."""
        return (
            (self.baseline_cycles - self.cycles) / self.baseline_cycles
            if self.baseline_cycles
            else 0.0
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cycle_reduction"] = self.cycle_reduction
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FunctionReport:
        """Inverse of `to_dict` (derived keys such as ``cycle_reduction`` are ignored).

        Raises:
            TypeError, KeyError: ``d`` is not a `to_dict` of this class.
        """
        known = set(cls.__dataclass_fields__)
        kw = {k: copy.deepcopy(v) for k, v in d.items() if k in known}
        kw["blocks"] = [
            BlockReport(
                **{
                    **b,
                    "candidates": {
                        n: CandidateStats(**c) for n, c in (b.get("candidates") or {}).items()
                    },
                }
            )
            for b in d.get("blocks", [])
        ]
        if d.get("mismatch") is not None:
            kw["mismatch"] = BaselineMismatch(**d["mismatch"])
        return cls(**kw)


@dataclass
class CompileOptions:
    """Knobs of one compile.

    Attributes:
        isa: ``"release"`` (dot steps, what Trident targets) or ``"head"`` (horner steps).
        witnesses: differential witnesses per check (design §2 asks for >= 16).
        seed: seed of witness generation; results are deterministic for a seed.
        sources: candidate sources to consult, by name (``rules``, ``search``, ``model``).
        search_budget_s: wall-clock budget of the block search per request, seconds.
        strict: reject (TirError) TIR with ops that cannot be lowered, instead of passing
            their functions through.
        max_ops, max_nesting: request limits on TIR ops and body nesting (None: the
            library's `tasmopt.lower.validate.MAX_OPS` / `MAX_NESTING`).
        deadline: when to stop and return what is proven (`tasmopt.deadline.Deadline`; the
            service cancels it when the client disconnects); None: no limit.
        final_budget_s: search budget, seconds, at which a complete run counts as ``final``
            (below it the function's status is ``improving``: worth deepening).
        only: optimize just these functions (the others are served from the result cache
            where it holds them, else passed through unmeasured),
            and compute them afresh even when the result cache has them (deepening); None:
            every function.
        use_cache: consult and feed the caller's result cache (`tasmopt.optimizer.compile`'s
            ``cache``); False computes every function afresh and stores nothing.
        inline: run the function-level passes (they are ``rules``: they run only when
            ``sources`` has ``rules``): ``inline`` (`tasmopt.optimizer.inline`, small callees
            inlined where that is proven and cheaper) and ``loops``
            (`tasmopt.optimizer.loops`, counted loops ending in ``recurse_or_return``).
        rewrite_mismatched: a function whose client baseline disagrees with our lowering is
            optimized on the client's text itself, proven equivalent to that text, instead
            of being returned unchanged (`tasmopt.optimizer.client_text`). Off by default:
            design §1 returns such a function unchanged (an upstream bug the user should
            see, not a program to polish); the event is logged and counted either way.
        passes: the function-level passes to run (names of `tasmopt.optimizer.PASSES`);
            None: all of them.
        skip: function-level passes not to run (applied after ``passes``).
        pass_budget_s: seconds a function-level pass may use at most, by name (each runs
            under a deadline of that length, within the request's); absent: no own limit.
    """

    isa: IsaVariant = "release"
    witnesses: int = 16
    seed: int = 0
    sources: tuple[str, ...] = ("rules", "search", "model")
    search_budget_s: float = 0.5
    strict: bool = False
    max_ops: int | None = None
    max_nesting: int | None = None
    deadline: Deadline | None = field(default=None, compare=False, hash=False)
    final_budget_s: float = 2.0
    only: frozenset[str] | None = None
    use_cache: bool = True
    inline: bool = True
    rewrite_mismatched: bool = False
    passes: frozenset[str] | None = None
    skip: frozenset[str] = frozenset()
    pass_budget_s: dict[str, float] = field(default_factory=dict, compare=False, hash=False)


#: Design §4 reward of a rejected candidate (a valid one earns ``1 + relative saving``).
INVALID_REWARD = 1e-3


def reward(accepted: bool, cycles: int, baseline_cycles: int) -> float:
    """Design §4 reward of one verified candidate: ``1 + max(0, (baseline - cycles) /
    baseline)`` if the verifier accepted it, else `INVALID_REWARD`. Cycles are clock cycles
    of one pass through the block."""
    if not accepted:
        return INVALID_REWARD
    return 1.0 + max(0.0, (baseline_cycles - cycles) / baseline_cycles) if baseline_cycles else 1.0


@dataclass
class CandidateRecord:
    """One candidate the verifier judged (a step of the replay buffer, design §4 Stage 3).

    Attributes:
        source: the source that proposed it (``rules``/``search``/``model``).
        tasm: its instruction lines.
        accepted: the verifier proved it equivalent to the block's baseline.
        reason: why it was rejected (the verifier's first difference), else None.
        reason_class: `tasmopt.vm.equivalence.rejection_class` of ``reason``.
        cycles: clock cycles of one pass (0 when rejected before measuring).
        heights: AET table heights of the block run alone (rows), when measured.
        logprob: total log-probability under the model that proposed it (natural log,
            EOS included), None for other sources.
        model_version: that model's checkpoint version.
    """

    source: str
    tasm: list[str]
    accepted: bool
    reason: str | None = None
    reason_class: str | None = None
    cycles: int = 0
    heights: dict[str, int] = field(default_factory=dict)
    logprob: float | None = None
    model_version: str | None = None


@dataclass
class BlockTrajectories:
    """Every candidate judged for one block, with what the model needs to learn from them.

    Attributes:
        function, block_index, tir_hash: which block (as in `BlockReport`).
        ops: the block's TIR ops (`tasmopt.tir.ops.Op`; encoded only when stored).
        entry_depth, net_effect: stack elements read on entry; change of the stack length.
        baseline: the baseline's instruction lines; baseline_cycles: their clock cycles.
        candidates: one record per distinct candidate, in the order they were checked.
    """

    function: str
    block_index: int
    tir_hash: str
    ops: tuple[Any, ...]
    entry_depth: int
    net_effect: int
    baseline: list[str]
    baseline_cycles: int
    candidates: list[CandidateRecord] = field(default_factory=list)


@dataclass
class CompileResult:
    """Result of `tasmopt.optimizer.compile`.

    Attributes:
        tasm: the whole module's TASM text.
        functions: one report per function, in TIR order.
        tir_hash: sha256 of the request's canonical TIR JSON.
        baseline_tasm: the baseline the result was measured against (ours or the client's).
        timings: seconds spent per stage (``decode``, ``lower``, ``candidates``, ``verify``,
            ``rank``, ``splice``, ``inline``, ``loops``).
        model_version: checkpoint version that proposed candidates, if the model ran.
        cache_entries: results worth keeping in the per-function result cache (complete
            runs, computed now, not served from it); the caller stores them.
        trajectories: every candidate judged, per block (the replay buffer's steps; not part
            of the response).
        remeasured: cache hits measured again as returned (their callees' code changed since
            the entry was stored), by key: the lines served and the entry's new
            ``report["as_returned"]``; the caller writes them back (`as_returned_update`) so
            that the next hit in the same context reuses the costs instead of measuring.
        unmeasured_hits: cache hits whose costs as returned this run had no time to measure
            (they report their own costs, with a note), by function name: their keys, for
            the caller to measure in the background (`service.core.deepen.REMEASURE`), so
            that a request in the same context does not pay for it again.
    """

    tasm: str
    functions: list[FunctionReport]
    tir_hash: str
    baseline_tasm: str
    timings: dict[str, float] = field(default_factory=dict)
    model_version: str | None = None
    cache_entries: list[CachedFunction] = field(default_factory=list)
    trajectories: list[BlockTrajectories] = field(default_factory=list)
    remeasured: dict[str, tuple[list[str] | None, dict[str, Any]]] = field(default_factory=dict)
    unmeasured_hits: dict[str, str] = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        """Clock cycles summed over the *measured* functions (see `unmeasured`)."""
        return sum(f.cycles for f in self.functions if f.measured)

    @property
    def baseline_cycles(self) -> int:
        """The baseline's clock cycles summed over the same functions as `cycles`."""
        return sum(f.baseline_cycles for f in self.functions if f.measured)

    @property
    def unmeasured(self) -> int:
        """Functions whose costs were not measured (`FunctionReport.measured` False)."""
        return sum(not f.measured for f in self.functions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasm": self.tasm,
            "functions": [f.to_dict() for f in self.functions],
            "tir_hash": self.tir_hash,
            "timings": self.timings,
            "model_version": self.model_version,
            "cycles": self.cycles,
            "baseline_cycles": self.baseline_cycles,
            "unmeasured": self.unmeasured,
        }


@dataclass
class CachedFunction:
    """The best verified program known for one function in one context (design §1, result
    cache).

    Attributes:
        key: hex sha256 of everything the function's semantics and our output depend on
            (`tasmopt.optimizer.keys.function_key`: its TIR and its callees', our lowering's
            and the client's text of its call closure, ISA variant, witnesses, verifier
            version).
        name: the function's name.
        lines: its sections as returned (label, body, deferred blocks) when improved; None
            when the best known answer is the baseline itself.
        report: the function's `FunctionReport.to_dict`, costs measured with its callees'
            baseline code (``cycles`` are its own).
        final: see `Status`; a final entry is not deepened again.
        budget_s: search budget of the run that produced it, seconds.
        source: the candidate source that produced it (or ``compiler``/``client``).
        measured: False for a placeholder stored when the deadline cut the function before
            it was measured: it serves the baseline (always safe) until a deepening run
            replaces it, so that repeated requests do not redo the cut work.
    """

    key: str
    name: str
    lines: list[str] | None
    report: dict[str, Any]
    final: bool
    budget_s: float
    source: str
    measured: bool = True

    @property
    def cycles(self) -> int:
        """Clock cycles of the function (its own); -1 for a placeholder (not measured)."""
        return int(self.report.get("cycles", 0)) if self.measured else -1


class FunctionCache(Protocol):
    """Where `tasmopt.optimizer.compile` looks up functions it has answered before (the
    service's database table; a dict in tests). Lookups must be fast and must not raise:
    a cache that cannot answer returns no hits."""

    def get_many(self, keys: list[str]) -> dict[str, CachedFunction]:
        """The entries stored under ``keys`` (missing keys are absent)."""
        ...
