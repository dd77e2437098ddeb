"""Trident AST to TIR, following the upstream builder's conventions (copies on read,
epilogue ``Swap/Pop`` cleanup, spilling past 16 live elements, deferred branch and loop
bodies, ``Dup/Call/Pop/Loop`` loops; spec/trident-language.md §7), correct where §8 lists
a Rust bug.

CF choices that change the TIR shape compared with the toolchain's:

* struct values are as wide as their fields (B1/B2/B4); every call models the callee's
  declared result width (B5), so later depths differ from Rust's after such calls;
* a branch or loop body pops its own locals before it ends (B10/B23) and a value-yielding
  ``if``/``match`` leaves one model temp of the value's width;
* ``x = e`` moves all w elements: ``w x (Swap(d), Pop(1))`` (B13); tuple assignment
  likewise per name (B12); multi-width returns never use the RAM round trip for k <= 15
  (B16: rotations plus fix-up ``Swap(1)..Swap(k-1)``);
* spills store top element first with order-preserving swap chains and ``Push(a),
  WriteMem(1), Pop(1)`` (B18); spill addresses are project-wide; a read of a spilled
  variable copies it straight from RAM (``Push(a+i), ReadMem(1), Pop(1)``, no ``Dup``)
  instead of reloading the variable on top of pending operands; a body that spilled an
  outer variable stores/reloads to restore the layout it started with;
* ``Swap(1)`` before ``Lt``, ``DivMod``, ``Pow`` (B19); ``as_u32`` asserts (B20);
* loop bodies see the outer variables plus the counter on top; the loop variable is
  materialized only when the body reads it (B23);
* ``let _ = e`` pops its value at once (Rust keeps it until the epilogue).

With ``Allocator(policy="next-use")`` (issue 11, item 3) the builder also tracks its
position in the body (`tasmopt.frontend.liveness`) and:

* evicts the variable used furthest in the future, and drops dead ones instead of storing
  them, unless an open branch or loop body owes them to its start layout
  (`tasmopt.frontend.stack`);
* takes a variable itself at its last read when it is on top (no ``Dup``, nothing to pop
  later); a commutative operator (ISA ``commutative``) reads a right operand that is on
  top first and uses a left operand in place right under the first value;
* ends an ``if``/``else`` with its start layout less the variables dead after it (not owed
  to an enclosing loop), dropping dead strays in place instead of a RAM rebuild;
* builds each function once per `TRIALS` entry (when to drop dead values eagerly, whether
  to use join layouts, whether a call evaluates its leading plain arguments last) and keeps
  the one with the lowest `weighted_cost`; a build with late reads only where it moves fewer
  words through RAM than the build it would replace (the rotation's swaps cost program
  words, which can raise a padded height the static proxy does not see).

* takes a variable itself at its last read when it is below the top too: ``pick d`` per
  element (an ``Asm`` op: TIR has no ``pick``) instead of ``Dup(d)`` and a later drop, so
  its slots are free at once; order-preserving moves (spill and drop chains, argument
  rotations, cleanup under a value) are ``pick`` too instead of ``Swap`` chains;
* builds each function also with its struct variables split into their leaf fields
  (`tasmopt.frontend.scalarize`: each field spilled, dropped and picked on its own).

Sources (what this allocator takes from the literature on stack machines, and where it
stops): Koopman, "A Preliminary Exploration of Optimized Stack Code Generation" (JFAR 6(3),
1994) keeps values on the operand stack across a basic block and consumes a value where it
is at its last use instead of copying it (here: ``pick`` at the last read, `in_place`,
`rename`); Maierhofer and Ertl, "Local Stack Allocation" (CC 1998) refine it within a block;
Bailey, "Inter-Boundary Scheduling of Stack Operations" (EuroForth 2000) and Shannon and
Bailey, "Global Stack Allocation" (EuroForth 2006) carry values across block boundaries
with agreed layouts at the joins (here: branch and loop regions end with their start or
join layout, `join_layout`). Eviction is Belady's furthest-next-use rule over a path-aware
liveness (`tasmopt.frontend.liveness`); struct variables are split into their fields as an
optimizing compiler's scalar replacement of aggregates does (`tasmopt.frontend.scalarize`).
Unlike the upstream Trident builder (copy on every read, LRU spills, one word per RAM round
trip), nothing here is copied that is not read again. What is not done: no expression DAG
is rescheduled (operands are evaluated in source order, but for chains of Field ``+``/``*``
and a commutative operator's operands), no function is inlined.

Every choice is about which copies exist, never about values: the differential tests run
every trial build against a Python interpretation of random programs, and every corpus
program under both policies.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from tasmopt.errors import FrontendError
from tasmopt.frontend import ast as A
from tasmopt.frontend.build_expr import ExprBuilder
from tasmopt.frontend.liveness import Liveness
from tasmopt.frontend.scalarize import forward_copies, scalarize
from tasmopt.frontend.source import Pos
from tasmopt.frontend.stack import (
    CAPACITY,
    Allocator,
    Entry,
    OutOfReach,
    Snapshot,
    StackModel,
    place,
    pop_chunks,
)
from tasmopt.frontend.symbols import FnSig, ModuleEnv, Var, VarRef
from tasmopt.frontend.types import FIELD, U32, ArrayTy, width
from tasmopt.isa import swap_chain
from tasmopt.tir.ops import Op

__all__ = ["build_module"]


class _FnBuilder(ExprBuilder):
    def __init__(
        self,
        mb: _ModuleBuilder,
        sig: FnSig,
        live: Liveness | None = None,
        eager: int | None = None,
        joins: bool = False,
        late: bool = False,
        form: tuple[list[Var], A.Block] | None = None,
        lazy: bool = False,
    ) -> None:
        self.mb = mb
        self.sig = sig
        #: (parameters, body) to build: the declaration's, or its scalarized copy
        self.params, self.fn_body = form if form is not None else _declared_form(sig)
        self.joins = joins  # next-use: branches end without the variables dead after them
        self.late = late  # next-use: a call's leading plain reads after its other arguments
        self.eager = eager  # next-use: drop dead variables at statements from this many elements
        self.out: list[Op] = []
        self.model = StackModel(self.emit_op, mb.alloc)
        self.live = live  # next-use: the body's liveness (None: lru, upstream's shape)
        if live is not None:
            self.model.next_use = self.next_use
            self.model.droppable = self.droppable
            self.model.lazy = lazy
            self.model.later = self.used_later
        self.at = 0  # the liveness position being built
        self.frozen: list[set[Var]] = []  # variables of the open regions' start layouts
        self.reads_here: dict[Var, int] = {}  # reads done at the current position
        self.no_take = False  # reads copy, never take (a loop's bound, `for_stmt`)
        self.replacing: Var | None = None  # replaced in place by the assignment being built
        self.holes: dict[Var, Entry] = {}  # where such a variable was picked up from

    def fail(self, message: str, pos: Pos) -> FrontendError:
        return self.mb.env.source.error(message, pos)

    # -- function ---------------------------------------------------------------------------

    def build(self) -> list[Op]:
        sig, body, params = self.sig, self.fn_body, self.params
        self.emit("FnStart", sig.name)
        if not self.pass_through(body, params):
            for var in params:
                self.model.push(var, var.width)
            m = self.model
            k = self.forwarded(body, params)
            if k and m.total > CAPACITY:
                for _ in params[k:]:  # the rest wait in RAM (on top: one chunked store each)
                    m.spill(m.entries[-1])
            else:
                m.ensure_space(0)
            k = width(sig.ret)
            self.body(body, k)
            if k == 0:
                self.emit_all(pop_chunks(self.model.total))
            else:
                self.cleanup_under(k, self.model.total - k)
        self.emit("Return")
        self.emit("FnEnd")
        return self.out

    # -- liveness (next-use policy) ----------------------------------------------------------

    def late_reads(self) -> bool:
        """Next-use, in the trial builds that ask for it: a call's leading literals and
        variable reads are evaluated after its other arguments and rotated under them, so
        that their copies do not sit on the stack while those are computed."""
        return self.live is not None and self.late

    def rhs_first(self, e: A.BinExpr) -> bool:
        """Next-use: the right operand is a whole one-element variable on top of the stack
        and the left one is not: reading it first lets its last read take it."""
        m = self.model
        if self.live is None or not m.entries or m.entries[-1].var is None:
            return False
        top = m.entries[-1].var
        return _scalar_ref(e.rhs) is top and _scalar_ref(e.lhs) is not top

    def operands(self, e: A.BinExpr) -> list[A.Expr] | None:
        """Next-use: a chain of three or more Field ``+`` (or ``*``) operands that are all
        variable reads or literals (`_plain_read`; ``as_field`` of one too: no code) is
        evaluated in the order its variables sit on the stack, topmost first: field addition and multiplication are
        commutative and associative (Goldilocks), so the value is the same, and each
        variable read for the last time is taken where it is (``sum(s) = s.w0 + .. + s.w15``
        is fifteen ``add``)."""
        if self.live is None or e.op not in ("+", "*") or e.ty != FIELD:
            return None
        chain: list[A.Expr] = []
        todo: list[A.Expr] = [e]
        while todo:
            x = todo.pop()
            if isinstance(x, A.BinExpr) and x.op == e.op and x.ty == FIELD:
                todo += [x.rhs, x.lhs]  # type: ignore[list-item]  # typed operands of a checked BinExpr
            else:
                chain.append(x)
        if len(chain) < 3 or not all(_plain_read(x) for x in chain):
            return None
        m = self.model

        def depth(x: A.Expr) -> float:
            best = math.inf
            for n in _nodes(x):
                ref = getattr(n, "ref", None)
                if isinstance(n, A.PathExpr) and isinstance(ref, VarRef):
                    i = m.index_of(ref.var)
                    if i is not None:
                        best = min(best, m.depth(ref.var) + ref.offset)
            return best

        return sorted(chain, key=depth)

    def owed(self, var: Var) -> bool:
        """Part of an open branch/loop body's start (or join) layout: the body must end
        with it, so it may not vanish before."""
        return any(var in f for f in self.frozen)

    def consume(self, ref: VarRef, under: bool = False) -> bool:
        """Next-use: the last read of a whole variable that is on top of the stack (with
        ``under``: right under a one-element operand on top, for a commutative operator),
        dead after this read and not owed to an open region's layout, takes the variable
        itself (no ``Dup``, and nothing left to pop later). The last read is counted per
        position: the liveness lists one use per occurrence, this builder counts the reads
        done (a refused ``under`` attempt is not a read: the caller reads normally)."""
        live, m, var = self.live, self.model, ref.var
        if live is None or not live.known(var) or ref.offset or ref.width != var.width:
            return False
        if self.no_take:
            return False
        at = -2 if under else -1
        if under and (
            len(m.entries) < 2 or m.entries[-1].var is not None or m.entries[-1].width != 1
        ):
            return False
        done = self.reads_here.get(var, 0) + 1
        last = (
            done == live.count_at(var, self.at)
            and live.next_after(var, self.at) is None
            and not self.owed(var)
        )
        taken = last and len(m.entries) >= -at and m.entries[at].var is var
        if taken or not under:
            self.reads_here[var] = done
        if taken:
            m.entries[at].var = None
            m.dead.add(var)
        elif last and not under:
            taken = self.pick_up(var)
        return taken

    def in_place(self, values: Sequence[A.Expr]) -> bool:
        """Next-use: every value is a whole variable (or, scalarized, a struct's leaf
        variables in layout order), they are the topmost entries in this order, and each is
        read for the last time here: the entries themselves become the values (a call's
        arguments, a literal's parts), no code at all. The common case: a call forwarding
        the parameters it was given (``mix(sbox4(s))``, ``f(s, r)``)."""
        live, m = self.live, self.model
        if live is None or not values:
            return False
        groups: list[list[Var]] = []
        for value in values:
            reads = _whole_reads(value)
            if reads is None:
                return False
            groups.append(reads)
        flat = [v for g in groups for v in g]
        n = len(flat)
        if n > len(m.entries) or len({id(v) for v in flat}) != n:
            return False
        if any(v.width == 0 for v in flat):
            return False
        if any(e.var is not v for e, v in zip(m.entries[-n:], flat, strict=True)):
            return False
        for v in flat:
            if not (
                live.known(v)
                and self.reads_here.get(v, 0) + 1 == live.count_at(v, self.at)
                and live.next_after(v, self.at) is None
                and not self.owed(v)
            ):
                return False
        for v in flat:
            self.reads_here[v] = self.reads_here.get(v, 0) + 1
            m.dead.add(v)
        del m.entries[-n:]
        for g in groups:
            m.push(None, sum(v.width for v in g))
        return True

    def forwarded(self, body: A.Block, params: list[Var]) -> int:
        """Next-use: how many leading parameters the first call the body evaluates takes as
        its arguments, whole, in order, each read there for the only time (``round(s, r) =
        mix(sbox4(add_constants(s, r)))``: all; ``two_steps(n, s1, s2) = parent(parent(n,
        s1), s2)``: two); 0 when it is not such a call. With more than 16 parameter elements
        the build then spills only the parameters after those (on top: one chunked store
        each) instead of choosing victims, and `in_place` hands the others on where they
        are."""
        live = self.live
        if live is None or not params:
            return 0
        first: object | None = body.stmts[0] if body.stmts else body.tail
        at = live.at(first) if first is not None else None
        if at is None:
            return 0
        node = getattr(first, "value", getattr(first, "expr", first))
        while isinstance(node, A.CallExpr) and node.args and isinstance(node.args[0], A.CallExpr):
            node = node.args[0]
        if not isinstance(node, A.CallExpr):
            return 0
        reads: list[Var] = []
        for a in node.args:
            sub = _whole_reads(a)
            if sub is None:
                return 0
            reads += sub
        k = len(reads)
        if k == 0 or k > len(params) or any(r is not p for r, p in zip(reads, params[:k])):
            return 0
        if any(live.count_at(p, at) != 1 or live.next_after(p, at) is not None for p in reads):
            return 0
        return k

    def pick_up(self, var: Var) -> bool:
        """Next-use, the last read of a whole variable below the top: ``pick d`` per element
        (deepest first, so the elements keep their order) moves the variable itself to
        the top instead of copying it, and its slots are free at once (the hand-written
        idiom: consume last uses with ``pick``); False when it is out of reach."""
        m = self.model
        i = m.index_of(var)
        if i is None:
            return False
        d = m.depth(var) + var.width - 1
        if d >= CAPACITY:
            return False
        for _ in range(var.width):
            m.emit_swap_chain(d)
        del m.entries[i]
        m.push(None, var.width)
        m.dead.add(var)
        return True

    def take_under(self, e: object) -> bool:
        """A commutative operator's second operand is a one-element variable right under
        the first operand's value, read for the last time: use it in place (through a free
        cast too: ``as_field`` has no code)."""
        inner = _free_cast(e)
        if inner is not None:
            e = inner
        ref = getattr(e, "ref", None)
        return (
            isinstance(ref, VarRef) and _scalar_ref(e) is not None and self.consume(ref, under=True)
        )

    def goto(self, node: object) -> None:
        """Enter a statement or block tail: later eviction choices see its position, and
        the variables dead from here on that may vanish are dropped now when that is cheap
        (on top, or under a block of variables as wide: `StackModel.drop_dead`)."""
        if self.live is not None:
            p = self.live.at(node)
            if p is not None:
                self.at = p
                self.reads_here = {}
                if self.eager is not None and self.model.total >= self.eager:
                    self.model.drop_dead(deep=True)

    def next_use(self, var: Var) -> float:
        """Position of the variable's next use; now for builder temporaries, inf if dead.
        A use in the statement being built counts by where its next read falls among the
        statement's reads (`Liveness.within`), so that a victim is chosen among values read
        in the same statement too."""
        if self.live is None or not self.live.known(var):
            return float(self.at)
        p = self.live.next_use(var, self.at)
        if p is None:
            return math.inf
        if p == self.at:
            return p + self.live.within(var, p, self.reads_here.get(var, 0))
        return float(p)

    def used_later(self, var: Var) -> bool:
        """Known to the liveness, not used in the statement being built (`StackModel.lazy`:
        such a variable may wait out of reach)."""
        live = self.live
        if live is None or not live.known(var) or self.owed(var):
            return False
        p = live.next_use(var, self.at)
        return p is None or p > self.at

    def droppable(self, var: Var) -> bool:
        """Dead, and not part of an open branch/loop body's start layout (the body must
        end with that layout, so such a variable is stored, not dropped)."""
        return (
            self.live is not None
            and self.live.known(var)
            and self.live.next_use(var, self.at) is None
            and not self.owed(var)
        )

    def pass_through(self, body: A.Block, params: list[Var]) -> bool:
        """Body = a call of the parameters in order: emit only the callee (spec §7.3)."""
        call = body.tail
        if body.stmts or not isinstance(call, A.CallExpr) or len(call.args) != len(params):
            return False
        for a, p in zip(call.args, params, strict=True):
            ref = getattr(a, "ref", None)
            if not (
                isinstance(ref, VarRef)
                and ref.var is p
                and ref.offset == 0
                and ref.width == p.width
                and len(getattr(a, "segments", ())) == 1
            ):
                return False
        t = call.target
        if t.kind == "intrinsic":
            self.emit_all(t.intrinsic.ops)
        else:
            self.emit("Call", t.label)
        return True

    def body(self, body: A.Block, k: int) -> None:
        """The function body; leaves the k-wide result on top of the model."""
        tail = body.tail
        ref = getattr(tail, "ref", None)
        if k > 1 and isinstance(ref, VarRef) and ref.offset == 0 and ref.var.width == k:
            for s in body.stmts:
                self.stmt(s)
            m = self.model
            self.goto(tail)
            if m.entries and m.entries[-1].var is ref.var:  # already on top: no copy
                m.name_top(None)
            else:
                self.expr(tail)  # type: ignore[arg-type]  # a block's tail is an Expr
            return
        self.block(body, want=k > 0)
        last = body.stmts[-1] if body.stmts else None
        if tail is None and isinstance(last, A.AsmStmt) and last.body.effect == k:
            self.model.merge_top(k)

    # -- blocks and regions -----------------------------------------------------------------

    def block(self, b: A.Block, want: bool) -> None:
        for s in b.stmts:
            self.stmt(s)
        if b.tail is not None:
            self.goto(b.tail)
            self.expr(b.tail)
            w = width(b.tail.ty)
            if not want and w:
                self.emit_all(pop_chunks(w))
                self.model.pop_entries(1)

    def region(
        self, build, snap: Snapshot, w: int, pos: Pos, join: Snapshot | None = None
    ) -> tuple[list[Op], set[Var]]:
        """Build a branch/arm body into its own op list, starting from ``snap`` and ending
        with exactly the ``join`` layout (default: ``snap``'s) plus a w-wide value."""
        join = snap if join is None else join
        saved = self.out
        self.out = []
        self.model.restore(snap)
        self.frozen.append(_vars_of(join))
        try:
            build()
            self.close_region(join, w, pos)
        finally:
            self.frozen.pop()
        ops, self.out = self.out, saved
        return ops, set(self.model.ram_valid)

    def join_layout(self, s: A.Stmt, snap: Snapshot) -> Snapshot:
        """The layout an ``if``/``else`` ends with: its start layout less the variables dead
        after it (next-use policy; the start layout itself otherwise). Both branches end
        with it, so neither has to keep or restore a value nobody reads again."""
        live = self.live
        after = live.after(s) if live is not None else None
        if live is None or after is None:
            return snap

        def dead(v: Var | None) -> bool:  # and not owed to an enclosing region's layout
            return (
                v is not None
                and live.known(v)
                and live.next_use(v, after) is None
                and not self.owed(v)
            )

        if not any(dead(v) for v, _, _ in snap.entries) and not any(map(dead, snap.spilled)):
            return snap
        return Snapshot(
            [e for e in snap.entries if not dead(e[0])],
            {v: a for v, a in snap.spilled.items() if not dead(v)},
            {v for v in snap.ram_valid if not dead(v)},
        )

    def close_region(self, snap: Snapshot, w: int, pos: Pos) -> None:
        m = self.model
        self.drop_strays(snap, w)
        below = m.entries[:-1] if w else m.entries
        extra = m.fast_extra(snap, below)
        try:
            if extra is not None:
                self.cleanup_under(w, extra)
                return
            stash = Var("__value", ArrayTy(FIELD, w), False, Pos(0, 0)) if w else None
            if stash is not None:
                m.name_top(stash)
                m.spill(m.entries[-1])
            m.rebuild(snap)
            if stash is not None:
                m.reload(stash, make_room=False)
                m.name_top(None)
        except OutOfReach:
            raise self.fail(
                "too many live values to restore the stack after this block", pos
            ) from None

    def drop_strays(self, target: Snapshot, w: int) -> None:
        """Next-use: when the target's on-stack variables appear in order below the w-wide
        value, every other variable down there is dead (`droppable`) and nothing the
        target has spilled is on the stack, drop those strays in place (order-preserving,
        ``Swap`` chain and ``Pop`` per element) instead of the general rebuild's RAM round
        trips. Otherwise leave the layout alone."""
        m = self.model
        if self.live is None:
            return
        below = m.entries[:-1] if w else m.entries
        want = [v for v, _, _ in target.entries]
        if any(v is None for v in want):
            return
        kept = [e for e in below if e.var in want]
        strays = [e for e in below if e.var not in want]
        if not strays or [e.var for e in kept] != want:
            return
        if any(
            e.var is None or e.var in target.spilled or not self.droppable(e.var) for e in strays
        ):
            return
        cost = sum(e.width * (m.depth(e.var) + 1) for e in strays if e.var is not None)
        if cost > STRAY_BUDGET:
            return
        for e in reversed(strays):
            assert e.var is not None
            m.drop(e.var)
            m.dead.add(e.var)

    # -- statements -------------------------------------------------------------------------

    def stmt(self, s: A.Stmt) -> None:
        self.goto(s)
        try:
            self._stmt(s)
        except OutOfReach:
            raise self.fail(
                "too many live values here: a variable is deeper than 15 stack elements", s.pos
            ) from None

    def _stmt(self, s: A.Stmt) -> None:
        m = self.model
        if isinstance(s, A.LetStmt):
            self.let(s)
        elif isinstance(s, A.AssignStmt):
            self.assign(s)
        elif isinstance(s, A.IfStmt):
            self.if_stmt(s)
        elif isinstance(s, A.ForStmt):
            self.for_stmt(s)
        elif isinstance(s, A.EventStmt):
            tag, n, values = s.resolved
            for v in values if s.kind == "reveal" else reversed(values):
                self.expr(v)
            kind = "Reveal" if s.kind == "reveal" else "Seal"
            self.emit_op(Op(kind, fields=(("name", s.name), ("tag", tag), ("field_count", n))))
            m.pop_entries(n)
        elif isinstance(s, A.MatchStmt):
            self.match(s)
        elif isinstance(s, A.AsmStmt):
            self.asm(s)
        elif isinstance(s, A.ExprStmt):
            self.expr(s.expr)
            w = width(s.expr.ty)
            if w:
                self.emit_all(pop_chunks(w))
                m.pop_entries(1)
        else:  # ReturnStmt: only a final one exists, and the checker made it the tail
            raise self.fail("'return' is only allowed as the last statement", s.pos)

    def let(self, s: A.LetStmt) -> None:
        m = self.model
        if self.rename(s):
            return
        self.expr(s.value)
        if not s.is_tuple:
            if s.vars[0] is None:  # let _ = e
                self.emit_all(pop_chunks(width(s.value.ty)))
                m.pop_entries(1)
            else:
                m.name_top(s.vars[0])
            return
        widths = [width(t) for t in s.elem_tys]  # type: ignore[attr-defined]  # set by the checker on every destructuring let
        names = list(s.vars)
        trailing = 0
        while names and names[-1] is None:
            names.pop()
            trailing += widths.pop()
        m.pop_entries(1)
        for var, w in zip(names, widths, strict=True):
            m.push(var if var is not None else Var("_", ArrayTy(FIELD, w), False, s.pos), w)
        if trailing:
            m.push(None, trailing)
            self.emit_all(pop_chunks(trailing))
            m.pop_entries(1)

    def rename(self, s: A.LetStmt) -> bool:
        """Next-use: ``let x = v`` or ``let (x0, .., xk) = v`` of whole variables ``v``
        (one, or a scalarized struct's leaves in layout order) that sit next to each other
        on the stack in that order, each read here for the last time: the new names take
        their slots where they are (no ``pick``, no code). False (nothing done) otherwise."""
        live, m = self.live, self.model
        srcs = _whole_reads(s.value)
        if live is None or not srcs or any(v is None for v in s.vars):
            return False
        i = m.index_of(srcs[0])
        n = len(srcs)
        if i is None or any(
            i + k >= len(m.entries) or m.entries[i + k].var is not v for k, v in enumerate(srcs)
        ):
            return False
        for v in srcs:
            if (
                not live.known(v)
                or self.reads_here.get(v, 0) + 1 != live.count_at(v, self.at)
                or live.next_after(v, self.at) is not None
                or self.owed(v)
            ):
                return False
        total = sum(v.width for v in srcs)
        widths = [width(t) for t in s.elem_tys] if s.is_tuple else [total]  # type: ignore[attr-defined]  # set by the checker on every destructuring let
        if sum(widths) != total or 0 in widths:
            return False
        for v in srcs:
            self.reads_here[v] = self.reads_here.get(v, 0) + 1
            m.dead.add(v)
        tick = m.stamp()
        m.entries[i : i + n] = [Entry(v, w, tick) for v, w in zip(s.vars, widths, strict=True)]
        return True

    def replaced_in_place(self, s: A.AssignStmt) -> Var | None:
        """Next-use: ``x = e(x)`` for a one-element variable ``x`` on the stack that ``e``
        reads exactly once (whole) and that no open region owes: that read is the last one
        of the old value, so it is picked up (``pick d``, its slot left as a hole) and the
        new value is placed back into the hole (``place d``) instead of ``Dup`` + ``Swap,
        Pop``: one instruction and, while ``e`` is evaluated, one slot less."""
        if self.live is None or s.is_tuple:
            return None
        ref = s.vars[0]
        if not isinstance(ref, VarRef) or ref.offset or ref.width != 1 or ref.var.width != 1:
            return None
        var = ref.var
        if self.model.index_of(var) is None or self.owed(var):
            return None
        nodes = _nodes(s.value)
        if any(isinstance(n, A.Block | A.IfStmt | A.MatchStmt) for n in nodes):
            return None  # no region may open while the hole is there
        reads = [
            n
            for n in nodes
            if isinstance(n, A.PathExpr) and isinstance(n.ref, VarRef) and n.ref.var is var
        ]
        return var if len(reads) == 1 and reads[0].ref.width == 1 else None

    def replace_read(self, ref: VarRef) -> bool:
        """The read of the variable being replaced in place (`replaced_in_place`): pick it
        up and leave a hole where it was; False for any other read."""
        var = ref.var
        if var is not self.replacing:
            return False
        m = self.model
        i = m.index_of(var)
        if i is None:
            return False
        d = m.depth(var)
        if d >= CAPACITY:
            return False
        if d:
            m.emit_swap_chain(d)
        hole = Entry(None, 0, m.stamp())
        m.entries[i] = hole
        self.holes[var] = hole
        m.push(None, 1)
        self.replacing = None
        self.reads_here[var] = self.reads_here.get(var, 0) + 1
        return True

    def fill(self, hole: Entry, var: Var) -> None:
        """The new value of a variable replaced in place (on top) goes into its hole
        (``place d``), or, where the hole is out of reach, stays on top as the variable."""
        m = self.model
        i = next(k for k, e in enumerate(m.entries) if e is hole)
        d = sum(e.width for e in m.entries[i + 1 :]) - 1
        m.pop_entries(1)
        if 0 < d < CAPACITY:
            self.emit_all(place(d))
            m.entries[i] = Entry(var, 1, m.stamp())
        else:
            del m.entries[i]
            m.push(var, 1)
        m.ram_valid.discard(var)

    def store(self, ref: VarRef) -> None:
        """Move the top ref.width elements of the value on top into the variable slot
        (B12/B13): ``w x (Swap(d), Pop(1))`` with d counted with the value on the stack;
        straight into RAM when the variable is spilled."""
        m, var, w = self.model, ref.var, ref.width
        if var not in m.spilled and m.depth(var) + ref.offset + w - 1 >= 16:
            m.spill_var(var)  # too deep to swap into: write its RAM home
        if var in m.spilled:
            first = var.width - ref.offset - w
            m.store_top_to(var, first, w)
            return
        d = m.depth(var) + ref.offset
        for _ in range(w):
            self.swap(d)
            self.emit("Pop", 1)
        m.ram_valid.discard(var)

    def assign(self, s: A.AssignStmt) -> None:
        m = self.model
        self.replacing = self.replaced_in_place(s)
        try:
            self.expr(s.value)
        finally:
            self.replacing = None
        if not s.is_tuple:
            hole = self.holes.pop(s.vars[0].var, None)
            if hole is not None:
                self.fill(hole, s.vars[0].var)
                return
            self.store(s.vars[0])
            m.pop_entries(1)
            return
        widths = [width(t) for t in s.elem_tys]  # type: ignore[attr-defined]  # set by the checker on every destructuring let
        for ref, w in zip(reversed(s.vars), reversed(widths), strict=True):
            if ref is None:
                self.emit_all(pop_chunks(w))
            else:
                self.store(ref)
            top = m.entries[-1]
            top.width -= w
            if top.width == 0:
                m.entries.pop()

    def if_stmt(self, s: A.IfStmt) -> None:
        m = self.model
        self.expr(s.cond)
        m.pop_entries(1)
        w = width(s.ty)
        snap = m.snapshot()
        join = snap if s.els is None or not self.joins else self.join_layout(s, snap)
        then_ops, valid = self.region(lambda: self.block(s.then, w > 0), snap, w, s.pos, join)
        if s.els is not None:
            els = s.els
            else_ops, valid2 = self.region(lambda: self.block(els, w > 0), snap, w, s.pos, join)
            valid &= valid2
            op = Op(
                "IfElse", fields=(("then_body", tuple(then_ops)), ("else_body", tuple(else_ops)))
            )
        else:
            valid &= snap.ram_valid
            op = Op("IfOnly", fields=(("then_body", tuple(then_ops)),))
        m.restore(join, valid)
        m.dead |= _vars_of(snap) - _vars_of(join)  # dropped at the join: a later drop is a no-op
        self.emit_op(op)
        m.push(None, w)

    def for_stmt(self, s: A.ForStmt) -> None:
        m = self.model
        label = self.mb.fresh_label("loop")
        v = s.loop_var
        zero = isinstance(s.start, A.IntLit) and s.start.value == 0
        # The bound is copied, not taken, even at its last read: the loop passes of the
        # optimizer (`tasmopt.optimizer.pointers`: pointer-walking `read_mem` loops with
        # `recurse_or_return`) need the slot the copy leaves below the counter; measured on
        # the corpus, taking it cost up to 2.3x the cycles of memcpy-like loops.
        self.no_take = True
        if v is not None:
            self.expr(s.start)
            m.name_top(v)
            self.expr(s.end)
            if not zero:
                self.read(VarRef(v, 0, 1, U32))
                self.emit("Sub")
                m.pop_entries(2)
                m.push(None, 1)
        elif zero:
            self.expr(s.end)
        elif isinstance(s.start, A.IntLit) and isinstance(s.end, A.IntLit):
            self.push_const(max(0, s.end.value - s.start.value))
        else:
            self.expr(s.start)
            self.expr(s.end)
            self.emit("Swap", 1)
            self.emit("Sub")
            m.pop_entries(2)
            m.push(None, 1)
        self.no_take = False
        counter = Var("__counter", U32, False, s.pos)
        m.name_top(counter)
        snap = m.snapshot()
        idiom = v is not None and [e[0] for e in snap.entries[-2:]] == [v, counter]

        def body() -> None:
            self.block(s.body, want=False)
            if v is not None and not idiom:  # v = v + 1, through the model
                self.read(VarRef(v, 0, 1, U32))
                self.push_const(1)
                self.emit("Add")
                m.pop_entries(2)
                m.push(None, 1)
                self.store(VarRef(v, 0, 1, U32))
                m.pop_entries(1)

        body_ops, valid = self.region(body, snap, 0, s.pos)
        if idiom:
            body_ops += [Op("Swap", 1), Op("Push", 1), Op("Add"), Op("Swap", 1)]
        m.restore(snap, valid & snap.ram_valid)
        self.emit("Call", label)
        self.emit("Pop", 1)
        self.emit_op(Op("Loop", fields=(("label", label), ("body", tuple(body_ops)))))
        m.pop_entries(1)
        if v is not None:
            m.drop(v)

    def match(self, s: A.MatchStmt) -> None:
        m = self.model
        w = width(s.ty)
        self.expr(s.scrutinee)
        scrut = Var("__match", s.scrutinee.ty, False, s.pos)
        m.name_top(scrut)
        self.arms(s.arms, 0, scrut, w)
        i = m.index_of(scrut)
        if w and i == len(m.entries) - 2:  # the usual case: right under the value
            self.cleanup_under(w, 1)
            del m.entries[i]
        else:
            m.drop(scrut)

    def arms(self, arms: list[A.MatchArm], i: int, scrut: Var, w: int) -> None:
        m = self.model
        arm = arms[i]
        if arm.pattern == "_" or i == len(arms) - 1:
            snap = m.snapshot()
            ops, valid = self.region(lambda: self.block(arm.body, w > 0), snap, w, arm.pos)
            self.out.extend(ops)
            m.restore(snap, valid)
            m.push(None, w)
            return
        self.read(VarRef(scrut, 0, 1, scrut.ty))
        self.push_const(int(arm.pattern))
        self.emit("Eq")
        m.pop_entries(2)
        snap = m.snapshot()
        then_ops, valid = self.region(lambda: self.block(arm.body, w > 0), snap, w, arm.pos)

        else_ops, valid2 = self.region(
            lambda: self.arms(arms, i + 1, scrut, w), snap, w, arms[i + 1].pos
        )
        m.restore(snap, valid & valid2)
        self.emit_op(
            Op("IfElse", fields=(("then_body", tuple(then_ops)), ("else_body", tuple(else_ops))))
        )
        m.push(None, w)

    def asm(self, s: A.AsmStmt) -> None:
        if s.body.target not in (None, "triton"):
            return
        m = self.model
        m.spill_all()
        self.emit_op(Op("Asm", fields=(("lines", s.body.lines), ("effect", s.body.effect))))
        for _ in range(max(0, s.body.effect)):
            m.push(None, 1)
        need = -s.body.effect
        while need > 0:
            if not m.entries or m.entries[-1].var is not None:
                raise self.fail(
                    f"asm block pops {-s.body.effect} elements, but the stack "
                    "holds fewer temporaries",
                    s.pos,
                )
            top = m.entries[-1]
            take = min(need, top.width)
            top.width -= take
            need -= take
            if top.width == 0:
                m.entries.pop()


class _ModuleBuilder:
    def __init__(self, env: ModuleEnv, alloc: Allocator) -> None:
        self.env = env
        self.alloc = alloc
        self.labels = 0

    def fresh_label(self, prefix: str) -> str:
        self.labels += 1
        return f"{prefix}__{self.labels}"

    def build(self) -> list[Op]:
        ops: list[Op] = []
        if self.env.ast.kind == "program":
            ops += [Op("Comment", text) for text in self.env.notes.get("sec_ram", [])]
            ops.append(Op("Entry", "main"))
        for sig in self.env.build:
            if sig.generic:
                continue
            ops += self.function(sig)
        return ops

    def function(self, sig: FnSig) -> list[Op]:
        """One function's TIR. Under ``next-use`` it is built once per form (`FORMS`) and
        trial (`TRIALS`) and the build with the lowest `weighted_cost` is kept (ties: the
        earlier one: the declared form, the lazier trial); the allocator and label counters
        continue from the kept build."""
        if self.alloc.policy != "next-use":
            return _FnBuilder(self, sig).build()
        declared = _declared_form(sig)
        bases = [declared]
        forwarded = forward_copies(*declared)
        if forwarded is not None:
            bases.append(forwarded)
        forms = []
        for base in bases:
            split = scalarize(*base) if "scalarized" in FORMS else None
            if "declared" in FORMS or split is None:
                forms.append(base)
            if split is not None:
                forms.append(split)
        start = (self.alloc.spill_next, self.alloc.index_next, self.labels)
        best: tuple[float, list[Op], tuple[int, int, int]] | None = None
        traffic = math.inf  # the kept build's RAM traffic
        trials = [(*t, False) for t in TRIALS] + [(*t, True) for t in LAZY_TRIALS]
        for form in forms:
            live = Liveness(form[1], form[0])
            for eager, joins, late, lazy in trials:
                self.alloc.spill_next, self.alloc.index_next, self.labels = start
                try:
                    ops = _FnBuilder(self, sig, live, eager, joins, late, form, lazy).build()
                except FrontendError:
                    if form is declared and not lazy:
                        raise
                    continue  # out of reach in this build: the others decide
                cost, moved = weighted_cost(ops), weighted_cost(ops, kinds=RAM_TRAFFIC)
                if late and moved >= traffic:
                    continue  # late reads only where they save RAM round trips (docstring)
                if best is None or cost < best[0]:
                    state = (self.alloc.spill_next, self.alloc.index_next, self.labels)
                    best = (cost, ops, state)
                    traffic = moved
        if best is None:  # no build succeeded: the declared form as written decides (or fails)
            self.alloc.spill_next, self.alloc.index_next, self.labels = start
            live = Liveness(declared[1], declared[0])
            ops = _FnBuilder(self, sig, live, None, False, False, declared).build()
            best = (0.0, ops, (self.alloc.spill_next, self.alloc.index_next, self.labels))
        self.alloc.spill_next, self.alloc.index_next, self.labels = best[2]
        return best[1]


def _declared_form(sig: FnSig) -> tuple[list[Var], A.Block]:
    """The function's parameters and body as declared (the checker's)."""
    body = sig.decl.body
    assert body is not None
    return sig.decl.param_vars, body  # type: ignore[attr-defined]  # set by the checker on every FnDecl it accepted


def _nodes(node: object) -> list[object]:
    """Every AST node of an expression, as often as the tree reaches it: a struct literal's
    parts twice (``fields`` and ``ordered``), so `replaced_in_place` sees a variable read
    inside one as read twice and leaves it alone (measured: counting it once made the
    corpus test programs 1.2% slower)."""
    out: list[object] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list | tuple):
            stack.extend(n)
        elif dataclasses.is_dataclass(n) and not isinstance(n, type | Var | VarRef):
            out.append(n)
            stack.extend(
                getattr(n, f.name) for f in dataclasses.fields(n) if f.name not in _NODE_SKIP
            )
    return out


#: dataclass fields that hold no expression of the body
_NODE_SKIP = frozenset({"pos", "ty", "target", "generics", "ann", "name_pos", "var_pos", "ref"})


def _plain_read(e: object) -> bool:
    """A literal, a variable or constant read, or a free cast (an intrinsic without code,
    ``as_field``) of one: no side effect, no failure, nothing computed."""
    if isinstance(e, A.IntLit | A.BoolLit | A.PathExpr):
        return True
    return _free_cast(e) is not None and _plain_read(e.args[0])  # type: ignore[attr-defined]  # a CallExpr (checked by _free_cast)


def _free_cast(e: object) -> A.Expr | None:
    """The argument of a one-argument intrinsic call that emits no code (``as_field``)."""
    if not isinstance(e, A.CallExpr) or len(e.args) != 1:
        return None
    t = e.target
    if t is None or t.kind != "intrinsic" or t.intrinsic.ops:
        return None
    return e.args[0]


def _whole_reads(e: object) -> list[Var] | None:
    """The variables an expression reads whole, in order: one for a whole-variable path, the
    leaves of a tuple of such paths (a scalarized struct read); None for anything else."""
    ref = getattr(e, "ref", None)
    if isinstance(e, A.PathExpr) and isinstance(ref, VarRef):
        return [ref.var] if ref.offset == 0 and ref.width == ref.var.width else None
    if isinstance(e, A.TupleExpr):
        out: list[Var] = []
        for x in e.elems:
            sub = _whole_reads(x)
            if sub is None:
                return None
            out += sub
        return out
    return None


def _scalar_ref(e: object) -> Var | None:
    """The variable an expression reads whole when it is a plain one-element variable
    (no field path), else None."""
    ref = getattr(e, "ref", None)
    if isinstance(ref, VarRef) and ref.width == ref.var.width == 1:
        if len(getattr(e, "segments", ())) == 1:
            return ref.var
    return None


def _vars_of(snap: Snapshot) -> set[Var]:
    """The variables a layout holds, on the stack or spilled."""
    return {v for v, _, _ in snap.entries if v is not None} | set(snap.spilled)


#: Most moves (``Swap`` + ``Pop``, per element) `drop_strays` spends on dead variables at
#: the end of a branch before it falls back to the general rebuild.
STRAY_BUDGET = 24
#: The forms each function is built in under ``next-use``, every trial each, the cheapest
#: build kept: ``declared`` (as written) and ``scalarized`` (struct variables split into
#: their leaf fields, `tasmopt.frontend.scalarize`; skipped where there is none). The tests
#: build each form alone.
FORMS: tuple[str, ...] = ("declared", "scalarized")
#: Eager-drop thresholds tried per function under ``next-use`` (None: drop only when a
#: spill is needed). Dropping a dead value early frees its slot before the pressure comes
#: but costs ``Swap(d), Pop(1)`` per element, where the end of the body pops five at once.
EAGER: tuple[int | None, ...] = (None, 12, 8, 0)
#: (eager threshold, join layouts, late reads) per trial build, in order of preference on
#: ties.
TRIALS = tuple((e, j, r) for r in (False, True) for j in (False, True) for e in EAGER)
#: Trials also built with variables allowed out of reach while they sleep
#: (`StackModel.lazy`): a build that needs one too early fails and is dropped.
LAZY_TRIALS = tuple((e, j, False) for j in (False, True) for e in (None, 0))
#: TIR ops that move words between the op stack and RAM (spills, reloads, scratch arrays).
RAM_TRAFFIC = frozenset({"WriteMem", "ReadMem"})
#: Assumed trips per loop level in `weighted_cost` (a guess; loops run 0..2^32 times).
LOOP_WEIGHT = 8


def weighted_cost(
    ops: list[Op] | tuple[Op, ...], weight: float = 1.0, kinds: frozenset[str] | None = None
) -> float:
    """Instructions, an op inside a loop body counting ``LOOP_WEIGHT`` times per loop level
    (both branches of an ``if`` count in full): a static proxy for clock cycles. With
    ``kinds``, only the ops of those kinds count (`RAM_TRAFFIC`: the RAM round trips)."""
    total = 0.0
    i = 0
    while i < len(ops):
        op = ops[i]
        if op.kind == "Loop":
            total += weighted_cost(op.get("body"), weight * LOOP_WEIGHT, kinds)
        elif op.bodies:
            total += sum(weighted_cost(b, weight, kinds) for _, b in op.bodies)
        elif kinds is None or op.kind in kinds:
            total += weight
            i += _chain_rest(ops, i) if kinds is None else 0
        i += 1
    return total


def _chain_rest(ops: list[Op] | tuple[Op, ...], i: int) -> int:
    """How many more ops after ``ops[i]`` belong to one ``pick``/``place`` chain of swaps
    (`tasmopt.isa.swap_chain`): one instruction once the optimizer's rules have merged it
    (`tasmopt.frontend.stack.pick`)."""
    args: list[int | None] = []
    for op in ops[i:]:
        if op.kind != "Swap" or not isinstance(op.value, int):
            break
        args.append(op.value)
    chain = swap_chain(args)
    return 0 if chain is None else chain[2] - 1


def build_module(env: ModuleEnv, alloc: Allocator) -> list[Op]:
    """Raw builder TIR of one checked module (spec §7.1): for a program the ``sec ram``
    comments and ``Entry("main")``, then every function with a body in source order.

    Raises:
        FrontendError: code that needs a value deeper than 15 elements that no spill can
            bring within reach (e.g. more than 16 live anonymous temporaries).
    """
    return _ModuleBuilder(env, alloc).build()
