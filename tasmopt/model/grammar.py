"""Grammar mask: a stack-depth and stack-type state machine run as tensor ops (design §3).

Per decoding row the state is the stack length relative to block entry, ``h`` (starts at 0),
and the types of the top `WINDOW` slots. Every rule is a table lookup in per-token tensors
built once from the ISA (`tasmopt.isa.slot_flow`, `tasmopt.lower.effects`), so a step
is a handful of gathers and comparisons on the decoder's device, with no host sync.

A token ``t`` with stack delta ``delta_t`` and read depth ``need_t`` (elements it touches)
is allowed in state ``(h, E, net, floor)`` of a block with entry depth ``E``, net effect
``net`` and baseline low-water mark ``floor`` iff

.. math::

    need_t \\le E + h, \\qquad h + delta_t \\ge floor, \\qquad
    h + delta_t - net \\le 5 s, \\qquad net - h - delta_t \\le 5 s

where ``s`` is the number of instruction tokens still possible after it (so EOS stays
reachable by ``pop 5`` / ``divine 5`` steps, `GrammarTables.max_drop`, ``max_rise``); pointer
tokens also need their slot to be valid for the block; ``<eos>`` is allowed iff
``h == net``; ``<pad>``/``<bos>`` never; and no row emits more than its ``limit``
(the baseline's length: a longer candidate costs more cycles) before EOS. The first rule keeps a candidate inside the
block's window (what it may read), the second is the verifier's underflow contract
(`tasmopt.vm.equivalence`): a candidate never pops deeper than the baseline, so never
deeper than the 16-element floor where the baseline does not.

Types (`TYPES`) are a coarse abstract interpretation: entry values, constants, field values,
u32 values, XFE parts, inputs, RAM values; slots below the block's window are ``outside``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasmopt.isa import instruction_set, slot_flow
from tasmopt.lower.effects import instruction_effect
from tasmopt.model.vocab import BOS, EOS, MAX_POINTERS, PAD, POINTER_KINDS, Vocab

__all__ = ["TYPES", "WINDOW", "GrammarTables", "GrammarState"]

#: Abstract value types tracked per stack slot.
TYPES = ("outside", "entry", "const", "field", "u32", "xfe", "input", "mem")
OUTSIDE, ENTRY, CONST, FIELD, U32, XFE, INPUT, MEM = range(len(TYPES))
#: Tracked slots from the top: enough for ``dup 15`` after 16 pushes.
WINDOW = 32


def _fresh_type(name: str, group: str, slot: int) -> int:
    """Type of a fresh value an instruction leaves in ``slot`` (0 = top, after it runs)."""
    if name == "push":
        return CONST
    if name in ("divine", "read_io"):
        return INPUT
    if name == "read_mem":
        return FIELD if slot == 0 else MEM
    if name == "sponge_absorb_mem":
        return FIELD if slot == 0 else MEM
    if name in ("xx_dot_step", "xb_dot_step"):
        return FIELD if slot < 2 else XFE
    if group == "u32":
        return U32
    if group == "ext_arith":
        return XFE
    return FIELD


@dataclass
class GrammarTables:
    """Per-token tensors, all indexed by token id (V tokens).

    Attributes:
        delta: (V,) int64 stack delta.
        need: (V,) int64 elements read (0 for specials).
        instr: (V,) bool: an instruction token (not PAD/BOS/EOS).
        ptr_slot: (V,) int64 index into the 4*MAX_POINTERS pointer validity row, or -1.
        gather: (V, WINDOW) int64: the old slot each new slot comes from; ``WINDOW`` = fresh
            value, ``WINDOW + 1`` = an untracked deeper slot.
        fresh: (V, WINDOW) int64 type of fresh values.
        max_drop, max_rise: the largest fall (``pop 5``) and rise (``divine 5``) of the
            stack one token can make in any state: with them EOS is always reachable, so
            decoding never reaches a state where every token is forbidden.
    """

    delta: torch.Tensor
    need: torch.Tensor
    instr: torch.Tensor
    ptr_slot: torch.Tensor
    gather: torch.Tensor
    fresh: torch.Tensor
    max_drop: int
    max_rise: int

    @classmethod
    def build(cls, vocab: Vocab) -> GrammarTables:
        """Derive the tables from the vocabulary's instructions and the ISA table."""
        table = instruction_set(vocab.isa)
        v = len(vocab)
        delta = torch.zeros(v, dtype=torch.long)
        need = torch.zeros(v, dtype=torch.long)
        instr = torch.zeros(v, dtype=torch.bool)
        ptr_slot = torch.full((v,), -1, dtype=torch.long)
        gather = torch.arange(WINDOW).repeat(v, 1)
        fresh = torch.full((v, WINDOW), FIELD, dtype=torch.long)
        for tok in vocab.tokens:
            if tok.is_special:
                continue
            ins = table[tok.name]
            small = tok.arg if ins.arg_kind in ("n_1_5", "stack_index") else None
            flow = slot_flow(tok.name, small, vocab.isa)
            text = tok.name if small is None else f"{tok.name} {small}"
            d = flow.delta
            delta[tok.id] = d
            need[tok.id] = instruction_effect(text, vocab.isa).depth
            instr[tok.id] = True
            if tok.pointer is not None:
                ptr_slot[tok.id] = tok.pointer[0] * MAX_POINTERS + tok.pointer[1]
            for i in range(WINDOW):
                if i < len(flow.src):
                    s = flow.src[i]
                    gather[tok.id, i] = s if s >= 0 else WINDOW
                    fresh[tok.id, i] = _fresh_type(tok.name, ins.group, i)
                else:
                    old = i - d
                    gather[tok.id, i] = old if 0 <= old < WINDOW else WINDOW + 1
        assert len(POINTER_KINDS) * MAX_POINTERS == int((ptr_slot >= 0).sum())
        # the largest fall / rise that is allowed in *every* state: ``pop n`` (needs only
        # the n elements above the exit depth) and ``divine n`` (needs nothing)
        pops = [t.arg for t in vocab.tokens if t.name == "pop" and t.arg is not None]
        divines = [t.arg for t in vocab.tokens if t.name == "divine" and t.arg is not None]
        return cls(delta, need, instr, ptr_slot, gather, fresh, max(pops), max(divines))

    def to(self, device: torch.device | str) -> GrammarTables:
        return GrammarTables(
            self.delta.to(device),
            self.need.to(device),
            self.instr.to(device),
            self.ptr_slot.to(device),
            self.gather.to(device),
            self.fresh.to(device),
            self.max_drop,
            self.max_rise,
        )


@dataclass
class GrammarState:
    """The state of N decoding rows.

    Attributes:
        h: (N,) int64 stack length relative to block entry.
        types: (N, WINDOW) int64 slot types, index 0 = top.
        entry: (N,) int64 block entry depth E.
        net: (N,) int64 required exit depth (relative), the block's net effect.
        floor: (N,) int64 lowest allowed relative depth (<= 0).
        ptr_valid: (N, 4*MAX_POINTERS) bool.
        steps: (N,) int64 tokens emitted so far.
        limit: (N,) int64 most tokens per row, EOS included (the baseline's length + 1:
            a longer straight-line candidate costs more cycles and is never accepted).
    """

    h: torch.Tensor
    types: torch.Tensor
    entry: torch.Tensor
    net: torch.Tensor
    floor: torch.Tensor
    ptr_valid: torch.Tensor
    steps: torch.Tensor
    limit: torch.Tensor

    @classmethod
    def start(
        cls,
        entry: torch.Tensor,
        net: torch.Tensor,
        floor: torch.Tensor,
        ptr_valid: torch.Tensor,
        limit: torch.Tensor,
    ) -> GrammarState:
        """Initial state: ``h = 0``, the top ``entry`` slots typed ``entry``."""
        n = entry.shape[0]
        h = torch.zeros(n, dtype=torch.long, device=entry.device)
        slots = torch.arange(WINDOW, device=entry.device)
        types = torch.where(slots[None, :] < entry[:, None], ENTRY, OUTSIDE)  # (N, W)
        return cls(h, types, entry, net, floor, ptr_valid, torch.zeros_like(h), limit)

    def index_select(self, rows: torch.Tensor) -> GrammarState:
        """The states of ``rows`` (beam reordering)."""
        return GrammarState(
            *(
                t.index_select(0, rows)
                for t in (
                    self.h,
                    self.types,
                    self.entry,
                    self.net,
                    self.floor,
                    self.ptr_valid,
                    self.steps,
                    self.limit,
                )
            )
        )

    def allowed(self, g: GrammarTables) -> torch.Tensor:
        """(N, V) bool: tokens allowed next (see the module docstring)."""
        after = self.h[:, None] + g.delta[None, :]  # (N, V)
        slots = (self.limit - self.steps - 2)[:, None]  # (N, 1)

        ok = g.instr[None, :] & (g.need[None, :] <= (self.entry + self.h)[:, None])
        ok &= after >= self.floor[:, None]
        ok &= (after - self.net[:, None]) <= g.max_drop * slots
        ok &= (self.net[:, None] - after) <= g.max_rise * slots
        ok &= slots >= 0
        ptr = g.ptr_slot.clamp(min=0)
        ptr_ok = self.ptr_valid[:, ptr] | (g.ptr_slot < 0)[None, :]  # (N, V)
        ok &= ptr_ok
        eos = (self.h == self.net) & (self.steps < self.limit)
        ok[:, EOS] = eos
        ok[:, PAD] = False
        ok[:, BOS] = False
        return ok

    def step(self, g: GrammarTables, tokens: torch.Tensor) -> GrammarState:
        """The state after each row emits ``tokens`` ((N,) int64). EOS/PAD leave it as is
        (apart from ``steps``)."""
        live = g.instr[tokens]  # (N,)
        h = self.h + torch.where(live, g.delta[tokens], 0)
        n = tokens.shape[0]
        ext = torch.cat(
            [self.types, torch.full((n, 2), ENTRY, dtype=torch.long, device=tokens.device)], dim=1
        )  # (N, W + 2)
        idx = g.gather[tokens]  # (N, W)
        moved = ext.gather(1, idx)  # (N, W)
        types = torch.where(idx == WINDOW, g.fresh[tokens], moved)
        slots = torch.arange(WINDOW, device=tokens.device)
        types = torch.where(slots[None, :] < (self.entry + h)[:, None], types, OUTSIDE)
        types = torch.where(live[:, None], types, self.types)
        return GrammarState(
            h, types, self.entry, self.net, self.floor, self.ptr_valid, self.steps + 1, self.limit
        )
