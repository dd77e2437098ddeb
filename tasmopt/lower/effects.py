"""Operand-stack effects of TIR ops, bodies and straight-line op lists.

Every effect is derived from the ISA semantics (`tasmopt.isa`) of the instructions the op
lowers to (`tasmopt.lower.expansion`, the fixed lowering), never from a hand-kept op table:
spec/tir.md §1 "Effect". Control structures compose the effects of their bodies; what cannot
be known statically (a call to a callee of unknown effect, branches with different net
effects, a loop whose body is not net 0) is an explicit `UnknownEffect`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

from tasmopt.errors import IsaError
from tasmopt.isa import IsaVariant, instruction_set, names_where
from tasmopt.lower.expansion import call_target, expand, label_of, split_instruction
from tasmopt.tir.ops import Op

__all__ = [
    "StackEffect",
    "UnknownEffect",
    "Effect",
    "NO_EFFECT",
    "instruction_effect",
    "op_effect",
    "sequence_effect",
    "loop_effect",
    "function_effects",
]


@dataclass(frozen=True, slots=True)
class StackEffect:
    """A statically known stack effect, in elements.

    Attributes:
        pops: how far below the entry top the stack sinks at its lowest point (for a single
            instruction: the ISA "pops"). Not the same as spec/tir.md's "consumes", which is
            the window `depth` (see `consumes`/`produces`).
        pushes: elements above that low-water mark at the end; ``pushes - pops`` is the net.
        depth: minimum number of elements the code reads or writes on entry (its entry depth
            requirement); always ``>= pops``. ``dup 3`` has pops 0, pushes 1, depth 4.
    """

    pops: int
    pushes: int
    depth: int

    known = True

    @property
    def net(self) -> int:
        """Change of the stack length, in elements."""
        return self.pushes - self.pops

    @property
    def consumes(self) -> int:
        """The window view of spec/tir.md §1 ("consumes -> produces"): elements of the entry
        stack the code touches (= ``depth``)."""
        return self.depth

    @property
    def produces(self) -> int:
        """Elements left in place of the `consumes` window (= ``depth + net``)."""
        return self.depth + self.net

    def then(self, other: Effect) -> Effect:
        """The effect of running ``self`` and then ``other``."""
        depth = max(self.depth, other.depth - self.net)
        if not isinstance(other, StackEffect):
            return UnknownEffect(other.reason, depth)
        pops = max(self.pops, other.pops - self.net)
        return StackEffect(pops, pops + self.net + other.net, depth)


@dataclass(frozen=True, slots=True)
class UnknownEffect:
    """An effect that is not known statically.

    Attributes:
        reason: why, e.g. ``"call __foo: callee effect unknown"``.
        depth: entry depth known to be needed before the unknown part (a lower bound).
    """

    reason: str
    depth: int = 0

    known = False
    net = None

    def then(self, other: Effect) -> Effect:
        return self


Effect = StackEffect | UnknownEffect

#: The effect of ops that emit no instructions (Comment, FnStart, FnEnd, Entry).
NO_EFFECT = StackEffect(0, 0, 0)

#: Instructions whose effect depends on control flow, not on the instruction alone (ISA
#: table: control flow that may come back to this frame; ``return``/``halt`` end it).
_CONTROL = names_where(lambda i: i.is_control_flow and not i.ends_frame)


@cache
def instruction_effect(text: str, isa: IsaVariant = "release") -> StackEffect:
    """Effect of one instruction given as text (``"dup 3"``), from the ISA table.

    Arguments are not range-checked (``dup 24`` reads 25 elements), so the effect of what
    upstream emits for unlowerable ops is still defined. The dot steps (release) and horner
    steps (head) are known under either variant: effects do not depend on availability.

    Raises:
        IsaError: unknown mnemonic, or a missing/non-integer small argument.
    """
    name, arg_text = split_instruction(text)
    table = instruction_set(isa)
    if name not in table:
        other = instruction_set("head" if isa == "release" else "release")
        table = other if name in other else table
    ins = table[name]  # raises IsaError for unknown mnemonics
    arg: int | None = None
    if ins.arg_kind in ("n_1_5", "stack_index"):
        if arg_text is None or not arg_text.lstrip("-").isdigit():
            raise IsaError(f"{text!r}: {name} needs an integer argument")
        arg = int(arg_text)
    return StackEffect(ins.pops(arg), ins.pushes(arg), ins.reads_depth(arg))


def _texts_effect(texts: Iterable[str], isa: IsaVariant) -> Effect:
    eff: Effect = NO_EFFECT
    for text in texts:
        name = text.split(None, 1)[0] if text.strip() else ""
        if name in _CONTROL:
            return eff.then(UnknownEffect(f"{name}: effect depends on control flow"))
        try:
            eff = eff.then(instruction_effect(text, isa))
        except IsaError as exc:
            return eff.then(UnknownEffect(f"not an instruction: {exc}"))
    return eff


def _collect_loops(ops: Iterable[Op], out: dict[str, Op]) -> None:
    for op in ops:
        if op.kind == "Loop":
            out.setdefault(label_of(op.get("label")), op)
        for _, body in op.bodies:
            _collect_loops(body, out)


class _Resolver:
    """Resolves call targets: explicit callee effects first, then loops in scope."""

    def __init__(
        self,
        callees: Mapping[str, Effect] | None,
        loops: dict[str, Op],
        isa: IsaVariant,
        functions: Mapping[str, Sequence[Op]] | None = None,
    ) -> None:
        self.callees = dict(callees or {})
        self.loops = loops
        self.functions = functions or {}
        self.isa = isa
        self._active: set[str] = set()

    def call(self, target: str) -> Effect:
        if target in self.callees:
            return self.callees[target]
        loop, body = self.loops.get(target), self.functions.get(target)
        if loop is None and body is None:
            return UnknownEffect(f"call {target}: callee effect unknown")
        if target in self._active:
            return UnknownEffect(f"call {target}: recursive call")
        self._active.add(target)
        try:
            eff = self.loop(loop) if loop is not None else self.seq(body)  # type: ignore[arg-type]  # a Loop op always has a body
        finally:
            self._active.discard(target)
        self.callees[target] = eff
        return eff

    def loop(self, op: Op) -> Effect:
        # dup 0, push 0, eq, skiz, return | push -1, add, <body>, recurse  (spec/tir.md §3.4)
        body = self.seq(op.get("body"))
        label = label_of(op.get("label"))
        if not isinstance(body, StackEffect):
            return UnknownEffect(f"loop {label}: {body.reason}", max(1, body.depth))
        if body.net != 0:
            return UnknownEffect(
                f"loop {label}: body net effect {body.net:+d}, not 0", max(1, body.depth)
            )
        pops = max(1, body.pops)
        return StackEffect(pops, pops, max(1, body.depth))

    def seq(self, ops: Iterable[Op]) -> Effect:
        eff: Effect = NO_EFFECT
        for op in ops:
            eff = eff.then(self.op(op))
            if not eff.known:
                break
        return eff

    def op(self, op: Op) -> Effect:
        kind = op.kind
        if kind in ("Comment", "FnStart", "FnEnd", "Entry", "Loop"):
            return NO_EFFECT
        if kind == "Call":
            return self.call(call_target(str(op.value)))
        if kind == "ProofBlock":
            return self.seq(op.get("body"))
        if kind == "IfOnly":
            body = self.seq(op.get("then_body"))
            if isinstance(body, StackEffect) and body.net != 0:
                body = UnknownEffect(f"IfOnly body net effect {body.net:+d}, not 0", body.depth)
            return _COND.then(body)
        if kind == "IfElse":
            then, other = self.seq(op.get("then_body")), self.seq(op.get("else_body"))
            depth = max(then.depth, other.depth)
            if not isinstance(then, StackEffect):
                return _COND.then(UnknownEffect(f"then branch: {then.reason}", depth))
            if not isinstance(other, StackEffect):
                return _COND.then(UnknownEffect(f"else branch: {other.reason}", depth))
            if then.net != other.net:
                return _COND.then(
                    UnknownEffect(
                        f"branches differ: then net {then.net:+d}, else net {other.net:+d}", depth
                    )
                )
            pops = max(then.pops, other.pops)
            return _COND.then(StackEffect(pops, pops + then.net, depth))
        return _flat_effect(op, self.isa)


@lru_cache(maxsize=4096)
def _flat_effect(op: Op, isa: IsaVariant) -> Effect:
    """Effect of an op lowered in place (not a structure with bodies); cached per op."""
    return _texts_effect(expand(op), isa)


#: The condition of IfElse/IfOnly, consumed by ``skiz``.
_COND = StackEffect(1, 0, 1)


def op_effect(
    op: Op, *, callees: Mapping[str, Effect] | None = None, isa: IsaVariant = "release"
) -> Effect:
    """Stack effect of one op as lowered by the fixed lowering (spec/tir.md §1 "Effect").

    * flat ops: the composed ISA effects of their instructions (`tasmopt.lower.expansion`);
      ``Asm`` likewise from its lines (its declared ``effect`` is not trusted; lines that are
      not instructions, or contain ``skiz``/``call``/``recurse``, give `UnknownEffect`);
    * ``IfElse``: the condition (st0) plus the branch effect, known when both branches are
      known and have the same net effect; ``IfOnly``: condition plus a net-0 body;
    * ``Loop``: no effect in place (it is a subroutine entered by ``call``; see `loop_effect`);
    * ``Call``: ``callees[target]`` (keys are lowered targets, ``__foo``/``@m__f``), or the
      loop of that label inside ``op``, else `UnknownEffect`;
    * ``ProofBlock``: its body; ``Comment``, ``FnStart``, ``FnEnd``, ``Entry``: none.
    """
    loops: dict[str, Op] = {}
    _collect_loops((op,), loops)
    return _Resolver(callees, loops, isa).op(op)


def sequence_effect(
    ops: Iterable[Op], *, callees: Mapping[str, Effect] | None = None, isa: IsaVariant = "release"
) -> Effect:
    """Effect of an op list run in order: its entry depth requirement (``depth``) and net.

    Calls to a ``Loop`` label defined anywhere in ``ops`` resolve to that loop's subroutine
    effect (the builder's ``Dup, Call(L), Pop(1), Loop{L}`` idiom, spec/tir.md §3.4).
    """
    ops = tuple(ops)
    loops: dict[str, Op] = {}
    _collect_loops(ops, loops)
    return _Resolver(callees, loops, isa).seq(ops)


def loop_effect(
    op: Op, *, callees: Mapping[str, Effect] | None = None, isa: IsaVariant = "release"
) -> Effect:
    """Effect of calling a ``Loop`` subroutine: the counter at st0 (ends as 0) stays, the body
    must be net 0 (else `UnknownEffect`). Entry depth is max(1, body depth): the body runs
    with the decremented counter on top (spec/tir.md §3.4).

    Raises:
        ValueError: ``op`` is not a Loop.
    """
    if op.kind != "Loop":
        raise ValueError(f"loop_effect needs a Loop op, got {op.kind}")
    loops: dict[str, Op] = {}
    _collect_loops((op,), loops)
    return _Resolver(callees, loops, isa).loop(op)


def function_effects(
    functions: Mapping[str, Sequence[Op]],
    *,
    callees: Mapping[str, Effect] | None = None,
    isa: IsaVariant = "release",
) -> dict[str, Effect]:
    """Effects of calling each function of a module, resolving calls between them.

    Args:
        functions: function name -> its ops (``FnStart … Return, FnEnd``; e.g. the chunks
            of `tasmopt.lower.blocks.split_functions`).
        callees: known effects of other targets (lowered labels, e.g. ``@m__f``).

    Returns:
        lowered label (``__name``) -> effect; recursion and calls to unknown targets give
        `UnknownEffect`. Assumes each function returns only at its end (what the builder
        emits); an early ``Return`` inside a branch is not modelled.
    """
    bodies = {label_of(name): tuple(ops) for name, ops in functions.items()}
    loops: dict[str, Op] = {}
    for ops in bodies.values():
        _collect_loops(ops, loops)
    res = _Resolver(callees, loops, isa, bodies)
    return {label: res.call(label) for label in bodies}
