"""The builder's compile-time stack model: named and anonymous entries, LRU spilling to RAM
past 16 live elements, reloads, and reconciling a branch or loop body back to the layout
it started from (spec/trident-language.md §7.2, CF fix B18).

CF spill: the spilled variable's elements are stored top element first, each brought to
the top by ``Swap(1), Swap(2), ..., Swap(e)`` (which keeps the order of everything else),
or, when the topmost entries are variables exactly as wide as the spilled one, by one
``Swap(D)`` each (those variables then take its slots, upstream's shape), then
``Push(addr + i), WriteMem(1), Pop(1)`` (pointer on st0, as the ISA wants); element
i (deepest = 0) lives at ``addr + i``; a variable keeps its RAM home once it has one.
Reload is upstream's ``Push(addr + i), ReadMem(1), Pop(1)`` for i = 0..w-1, used only to
rebuild a layout at the end of a branch or loop body (reads copy from RAM instead).

Under ``next-use`` the RAM layout is the chunked one (`StackModel.chunked`): element i of a
w-wide variable at ``home + w - 1 - i``, stored by ``pick`` (the variable to the top in
order) and ``Push(home), WriteMem(<=5)...``, read by ``Push(home + w - 1 - first),
ReadMem(<=5)...``: one round trip per five words instead of one per word.

Spill policies (`Allocator.policy`): ``"lru"`` (default) picks the least recently used
variable, as upstream does (the corpus baselines keep upstream's shape). ``"next-use"``
(issue 11, item 3) picks the variable whose next use is furthest away (Belady), and a
variable that is dead (no later use, `tasmopt.frontend.liveness`) and was declared inside
the current branch or loop body is *dropped* instead of stored: the same moves, ``Pop(1)``
in place of ``Push(a), WriteMem(1), Pop(1)``, no RAM home. Before an ``asm`` block such
variables are dropped too instead of spilled, and at every statement the builder drops the
ones that are cheap to remove (`StackModel.drop_dead`), so dead values stop taking slots
before the pressure comes. The builder supplies the liveness (`StackModel.next_use`,
`StackModel.droppable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tasmopt.frontend.symbols import Var
from tasmopt.tir.ops import Op

__all__ = [
    "CAPACITY",
    "Allocator",
    "Entry",
    "Snapshot",
    "StackModel",
    "OutOfReach",
    "pick",
    "place",
    "pop_chunks",
]

#: Op-stack elements reachable by dup/swap (spec/tir.md §0).
CAPACITY = 16
#: Spill base (spec/tir.md §0) and the runtime-index scratch base (spec §7.1).
SPILL_BASE = 2**30
INDEX_BASE = 2**29
#: Spill policies (module docstring).
POLICIES = ("lru", "next-use")


class OutOfReach(Exception):
    """An element the code needs is deeper than 15 (the builder reports it with a position)."""


@dataclass
class Allocator:
    """RAM addresses for spills/scratch and for runtime-indexed arrays. One per project
    (CF: upstream's per-module allocators let one module's spills overwrite another's)."""

    spill_next: int = SPILL_BASE
    index_next: int = INDEX_BASE
    #: which variable to spill past 16 elements: one of `POLICIES`
    policy: str = "lru"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown spill policy {self.policy!r}: expected one of {POLICIES}")

    def spill(self, n: int) -> int:
        addr = self.spill_next
        self.spill_next += n
        return addr

    def index(self, n: int) -> int:
        addr = self.index_next
        self.index_next += n
        return addr


@dataclass(eq=False)
class Entry:
    """A model entry: a variable (or None for an anonymous temp), its width, LRU tick."""

    var: Var | None
    width: int
    tick: int = 0


@dataclass
class Snapshot:
    entries: list[tuple[Var | None, int, int]]
    spilled: dict[Var, int]
    ram_valid: set[Var] = field(default_factory=set)

    @property
    def on_stack(self) -> list[Var | None]:
        return [v for v, _, _ in self.entries]


def pick(e: int) -> list[Op]:
    """``pick e`` as TIR (Triton VM spec, instruction ``pick``: st_e to the top, the elements
    above it one deeper): ``Swap(1) .. Swap(e)``. TIR has no ``pick`` of its own, and an
    ``Asm`` op would end the optimizer's straight-line block there (spec/tir.md §1, design
    §2); the optimizer's rules turn the chain into one ``pick e`` (`tasmopt.rules`) and the
    builder's cost proxy counts it as one (`tasmopt.frontend.builder.weighted_cost`)."""
    return [Op("Swap", k) for k in range(1, e + 1)]


def place(e: int) -> list[Op]:
    """``place e`` (the top to st_e, the elements above it one higher; the inverse of
    ``pick e``) as TIR: ``Swap(e) .. Swap(1)`` (see `pick`)."""
    return [Op("Swap", k) for k in range(e, 0, -1)]


def ram_chunks(n: int) -> list[int]:
    """Word counts of at most 5 (``read_mem``/``write_mem`` arguments) totalling n."""
    return [min(5, n - k) for k in range(0, n, 5)]


def pop_chunks(n: int) -> list[Op]:
    """``Pop`` ops of at most 5 totalling n."""
    out = []
    while n > 0:
        out.append(Op("Pop", min(5, n)))
        n -= min(5, n)
    return out


class StackModel:
    """Entries bottom to top; ops go to ``emit``."""

    def __init__(self, emit: Callable[[Op], None], alloc: Allocator) -> None:
        self.emit = emit
        self.alloc = alloc
        self.entries: list[Entry] = []
        self.spilled: dict[Var, int] = {}
        self.home: dict[Var, int] = {}
        self.ram_valid: set[Var] = set()
        self.tick = 0
        #: variables dropped while dead (``next-use`` policy); a later `drop` is a no-op
        self.dead: set[Var] = set()
        #: the builder's liveness, read under the ``next-use`` policy only: next use
        #: position of a variable (inf when dead), and whether a dead one may vanish here
        self.next_use: Callable[[Var], float] = lambda var: 0.0
        self.droppable: Callable[[Var], bool] = lambda var: False
        #: let variables go out of reach instead of spilling them (`ensure_space`), and
        #: whether a variable's next use is at a later statement than the one being built
        self.lazy = False
        self.later: Callable[[Var], bool] = lambda var: False

    # -- queries ----------------------------------------------------------------------------

    @property
    def total(self) -> int:
        return sum(e.width for e in self.entries)

    def index_of(self, var: Var) -> int | None:
        for i in range(len(self.entries) - 1, -1, -1):
            if self.entries[i].var is var:
                return i
        return None

    def depth(self, var: Var) -> int:
        """Elements above the variable's top element."""
        i = self.index_of(var)
        assert i is not None, var
        return sum(e.width for e in self.entries[i + 1 :])

    # -- pushes and pops --------------------------------------------------------------------

    def stamp(self) -> int:
        self.tick += 1
        return self.tick

    def push(self, var: Var | None, width: int) -> None:
        """Model a value the code just pushed (nothing for width 0)."""
        if width > 0:
            self.entries.append(Entry(var, width, self.stamp()))

    def pop_entries(self, n: int) -> int:
        """Forget the top n entries (their ops are emitted by the caller); their width."""
        w = 0
        for _ in range(n):
            w += self.entries.pop().width
        return w

    def merge_top(self, n: int) -> None:
        """The top n entries become one anonymous temp (tuple, array, struct literal)."""
        if n > 1:
            w = self.pop_entries(n)
            self.push(None, w)

    def name_top(self, var: Var | None) -> None:
        self.entries[-1].var = var
        self.entries[-1].tick = self.stamp()

    # -- spilling ---------------------------------------------------------------------------

    def ensure_space(self, w: int, protect: Iterable[Var] = ()) -> None:
        """Spill least recently used variables until ``w`` more elements fit in 16; with
        `lazy`, not while the elements pushed out of reach all belong to variables not used
        before a later statement (`sleeps`)."""
        keep = set(protect)
        while self.total + w > CAPACITY:
            if self.lazy and self.sleeps(self.total + w - CAPACITY):
                return
            victim = self.victim(keep)
            if victim is None:
                return
            self.evict(victim)

    def sleeps(self, n: int) -> bool:
        """Whether the bottom ``n`` elements may go out of reach: they belong to whole
        variables (no temporary a pending operation needs) whose next use is at a later
        statement (`later`). A build that then needs one of them before the stack comes
        back down fails with `OutOfReach`, and its trial is dropped (`tasmopt.frontend
        .builder`)."""
        acc = 0
        for e in self.entries:
            if acc >= n:
                return True
            if e.var is None or not self.later(e.var):
                return False
            acc += e.width
        return acc >= n

    def victim(self, keep: set[Var]) -> Entry | None:
        """The variable to evict: least recently used (``lru``) or used furthest in the
        future, least recently used among equals (``next-use``); None if none is in reach."""
        best: Entry | None = None
        best_key = (0.0, 0)
        above = 0
        next_use = self.alloc.policy == "next-use"
        for e in reversed(self.entries):
            # stored top element first, each element is at depth `above` when its turn comes
            if e.var is not None and e.var not in keep and above < CAPACITY:
                key = (-self.next_use(e.var) if next_use else 0.0, e.tick)
                if best is None or key < best_key:
                    best, best_key = e, key
            above += e.width
        return best

    def evict(self, entry: Entry) -> None:
        """Make room: drop the variable if it is dead and may vanish here, else spill it."""
        assert entry.var is not None
        if self.alloc.policy == "next-use" and self.droppable(entry.var):
            self.spill(entry, store=False)
        else:
            self.spill(entry)

    def drop_dead(self, deep: bool = False) -> None:
        """Drop dead variables (`droppable`) on top of the stack (``Pop``); with ``deep``
        also those below a top block of variables as wide as they are (``Swap(d), Pop(1)``
        per element, the block takes their slots). Only under the ``next-use`` policy."""
        if self.alloc.policy != "next-use":
            return
        while self.entries:
            top = self.entries[-1]
            if top.var is not None and self.droppable(top.var):
                for op in pop_chunks(top.width):
                    self.emit(op)
                self.entries.pop()
                self.dead.add(top.var)
                continue
            if not deep:
                return
            above = 0
            for i in range(len(self.entries) - 1, -1, -1):
                e = self.entries[i]
                if (
                    e.var is not None
                    and self.droppable(e.var)
                    and above + e.width <= CAPACITY
                    and self.aligned_block(i, e.width) is not None
                ):
                    self.spill(e, store=False)
                    break
                above += e.width
            else:
                return

    def spill_var(self, var: Var) -> bool:
        """Spill this variable if it is on the stack and within reach; True if it was."""
        i = self.index_of(var)
        if i is None or sum(e.width for e in self.entries[i + 1 :]) >= CAPACITY:
            return False
        self.spill(self.entries[i])
        return True

    def spill(self, entry: Entry, store: bool = True) -> None:
        """Store a variable to its RAM home and drop it from the stack (order-preserving);
        ``store=False`` drops a dead variable with the same moves and no RAM write."""
        var = entry.var
        assert var is not None
        i = self.entries.index(entry)
        above = sum(e.width for e in self.entries[i + 1 :])
        addr = self.home.get(var) if store else 0
        if addr is None:
            addr = self.home[var] = self.alloc.spill(entry.width)
        if self.chunked:
            self._spill_chunked(i, above, addr, store)
            return
        j = self.aligned_block(i, entry.width)
        for k in range(entry.width - 1, -1, -1):
            if j is None:
                self.emit_swap_chain(above)
            else:  # the top block of variables takes V's place
                self.emit(Op("Swap", above))
            if store:
                self.emit(Op("Push", addr + k))
                self.emit(Op("WriteMem", 1))
            self.emit(Op("Pop", 1))
        if j is None:
            del self.entries[i]
        else:
            block = self.entries[j:]
            del self.entries[j:]
            self.entries[i : i + 1] = block
        if store:
            self.spilled[var] = addr
            self.ram_valid.add(var)
        else:
            self.dead.add(var)

    @property
    def chunked(self) -> bool:
        """RAM homes in the ``next-use`` layout: element i of a w-wide variable at
        ``home + w - 1 - i`` (its top element first), so that a variable on top of the stack
        is stored by one ``Push(home)`` and ``WriteMem`` of up to five words at a time, and
        read back in order by ``Push(home + w - 1)`` and ``ReadMem`` (Triton VM spec,
        ``write_mem n``: top word to the pointer, upwards; ``read_mem n``: from the pointer,
        downwards, the first word deepest). Upstream's one-word round trips (``lru``)
        keep element i at ``home + i``."""
        return self.alloc.policy == "next-use"

    def address(self, var: Var, k: int) -> int:
        """RAM address of element k (deepest = 0) of a spilled variable."""
        home = self.spilled[var]
        return home + (var.width - 1 - k if self.chunked else k)

    def _spill_chunked(self, i: int, above: int, addr: int, store: bool) -> None:
        """`spill` in the chunked layout: the variable brought to the top in order by
        ``pick`` (deepest element first), then stored by ``WriteMem`` chunks (or popped);
        where its deepest element is out of reach, element by element from the top."""
        entry = self.entries[i]
        var, w = entry.var, entry.width
        assert var is not None
        if above + w - 1 < CAPACITY:
            for _ in range(w if above else 0):
                self.emit_swap_chain(above + w - 1)
            if store:
                self.emit(Op("Push", addr))
                for n in ram_chunks(w):
                    self.emit(Op("WriteMem", n))
                self.emit(Op("Pop", 1))
            else:
                for op in pop_chunks(w):
                    self.emit(op)
        else:
            for k in range(w - 1, -1, -1):  # element k is at depth `above` when its turn comes
                self.emit_swap_chain(above)
                if store:
                    self.emit(Op("Push", addr + w - 1 - k))
                    self.emit(Op("WriteMem", 1))
                self.emit(Op("Pop", 1))
        del self.entries[i]
        if store:
            self.spilled[var] = addr
            self.ram_valid.add(var)
        else:
            self.dead.add(var)

    def emit_ram_read(self, var: Var, first: int, width: int) -> None:
        """Push elements ``first .. first + width - 1`` of a spilled variable (deepest
        first): one ``ReadMem`` per five words in the chunked layout, else one round trip
        per word (upstream's)."""
        if self.chunked:
            self.emit(Op("Push", self.address(var, first)))
            for n in ram_chunks(width):
                self.emit(Op("ReadMem", n))
            self.emit(Op("Pop", 1))
            return
        for k in range(first, first + width):
            self.emit(Op("Push", self.address(var, k)))
            self.emit(Op("ReadMem", 1))
            self.emit(Op("Pop", 1))

    def aligned_block(self, i: int, w: int) -> int | None:
        """Index of the first of the topmost entries above entry i that are all variables
        and exactly w wide in total (they can be swapped into its slots), else None."""
        acc = 0
        for j in range(len(self.entries) - 1, i, -1):
            e = self.entries[j]
            if e.var is None:
                return None
            acc += e.width
            if acc == w:
                return j
            if acc > w:
                return None
        return None

    def emit_swap_chain(self, e: int) -> None:
        """Bring st_e to the top, shifting st0..st_{e-1} down by one: ``Swap(1) .. Swap(e)``
        (`pick`: upstream's shape, and one ``pick e`` after the optimizer's rules)."""
        if e >= CAPACITY:
            raise OutOfReach(e)
        for op in pick(e):
            self.emit(op)

    def reload(self, var: Var, make_room: bool = True) -> None:
        """Bring a spilled variable back on top of the stack."""
        w = var.width
        if make_room:
            self.ensure_space(w, (var,))
        self.emit_ram_read(var, 0, w)
        del self.spilled[var]
        self.push(var, w)
        self.ram_valid.add(var)

    def store_top_to(self, var: Var, first: int, w: int) -> None:
        """Pop the top w elements into elements first..first+w-1 of a spilled variable."""
        if self.chunked:  # the top element is element first + w - 1, at the lowest address
            self.emit(Op("Push", self.address(var, first + w - 1)))
            for n in ram_chunks(w):
                self.emit(Op("WriteMem", n))
            self.emit(Op("Pop", 1))
            return
        for k in range(first + w - 1, first - 1, -1):
            self.emit(Op("Push", self.address(var, k)))
            self.emit(Op("WriteMem", 1))
            self.emit(Op("Pop", 1))

    def drop(self, var: Var) -> None:
        """Remove a variable wherever it is (popped if on top, else moved up first)."""
        if var in self.spilled:
            del self.spilled[var]
            return
        if var in self.dead and self.index_of(var) is None:
            return
        i = self.index_of(var)
        assert i is not None, var
        entry = self.entries[i]
        above = sum(e.width for e in self.entries[i + 1 :])
        if above == 0:
            for op in pop_chunks(entry.width):
                self.emit(op)
        else:
            for _ in range(entry.width):
                self.emit_swap_chain(above)
                self.emit(Op("Pop", 1))
        del self.entries[i]

    def spill_all(self) -> None:
        """Spill every variable (before an ``asm`` block, as upstream does)."""
        while True:
            named = [e for e in self.entries if e.var is not None]
            if not named:
                return
            self.evict(named[-1])

    # -- regions ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(
            [(e.var, e.width, e.tick) for e in self.entries],
            dict(self.spilled),
            set(self.ram_valid),
        )

    def restore(self, snap: Snapshot, ram_valid: set[Var] | None = None) -> None:
        self.entries = [Entry(v, w, t) for v, w, t in snap.entries]
        self.spilled = dict(snap.spilled)
        self.ram_valid = set(snap.ram_valid if ram_valid is None else ram_valid)

    def fast_extra(self, target: Snapshot, below: list[Entry]) -> int | None:
        """Width of entries to pop if ``target`` is a prefix of ``below`` and every entry
        above it can simply be dropped; None otherwise."""
        want = target.entries
        if len(below) < len(want):
            return None
        for e, (v, w, _) in zip(below, want, strict=False):
            if e.var is not v or e.width != w:
                return None
        extra = 0
        on_target = {v for v, _, _ in want if v is not None}
        for e in below[len(want) :]:
            v = e.var
            if v is not None and (
                v in on_target or (v in target.spilled and v not in self.ram_valid)
            ):
                return None
            extra += e.width
        for v in target.spilled:
            if v not in self.spilled and not any(e.var is v for e in below[len(want) :]):
                return None
        return extra

    def rebuild(self, target: Snapshot) -> None:
        """General reconcile (no value on top): store/drop everything above the common
        prefix, then reload the target's entries in order."""
        want = target.entries
        k = 0
        while (
            k < len(want)
            and k < len(self.entries)
            and self.entries[k].var is want[k][0]
            and want[k][0] is not None
            and self.entries[k].width == want[k][1]
        ):
            k += 1
        on_target = {v for v, _, _ in want[k:] if v is not None}
        pending = 0
        while len(self.entries) > k:
            e = self.entries[-1]
            v = e.var
            keep = v is not None and (
                v in on_target or (v in target.spilled and v not in self.ram_valid)
            )
            if keep:
                for op in pop_chunks(pending):
                    self.emit(op)
                pending = 0
                self.spill(e)
            else:
                pending += e.width
                self.entries.pop()
                if v is not None and v in target.spilled:  # its RAM copy is current
                    self.spilled[v] = target.spilled[v]
        for op in pop_chunks(pending):
            self.emit(op)
        for v, _w, _ in want[k:]:
            if v is None or v not in self.spilled:
                raise OutOfReach(f"cannot rebuild the stack layout ({v})")
            self.reload(v, make_room=False)
        for v in target.spilled:
            if v not in self.spilled:  # on the stack here but spilled in the target
                raise OutOfReach(f"cannot rebuild the stack layout ({v})")
