"""The focus of an anytime compile (issue 34 item 1, `tasmopt.optimizer.priority`): the
functions of highest expected saving are proven first, in a tier of their own, and what that
tier proves is kept when the deadline cuts the rest; the rest comes back unchanged, reported
``improving`` and left for deepening, and nothing unproven reaches the answer."""

from __future__ import annotations

from tasmopt.deadline import Deadline
from tasmopt.module import ModuleText
from tasmopt.optimizer import compile as compile_tir
from tasmopt.optimizer.priority import FOCUS_FUNCTIONS, focus, weights
from tasmopt.report import CompileOptions
from tasmopt.vm.equivalence import Verdict, check_blocks, check_function

_LATER = 5.0  # seconds left: a focus tier, not searched
_LABELS = {"leaf": "__leaf", "mid": "__mid", "top": "__top", "big": "__big"}


def _module(leaf_size: int, big_size: int) -> ModuleText:
    """``top`` calls ``mid`` twice, ``mid`` calls ``leaf`` three times; ``big`` calls nothing."""
    lines = ["__top:", "    call __mid", "    call __mid", "    return"]
    lines += ["__mid:", "    call __leaf", "    call __leaf", "    call __leaf", "    return"]
    lines += ["__leaf:", *["    push 1", "    pop 1"] * (leaf_size // 2), "    return"]
    lines += ["__big:", *["    push 2", "    pop 1"] * (big_size // 2), "    return"]
    return ModuleText.from_text("\n".join(lines), _LABELS)


def test_weights_count_call_paths_from_every_function() -> None:
    w = weights(_module(10, 10))
    # paths: top 1; mid 1 + 2 (from top); leaf 1 + 3 * paths(mid)
    assert w["top"] == (3, 1)
    assert w["mid"] == (4, 3)
    assert w["leaf"] == (11, 10)
    assert w["big"] == (11, 1)


def test_the_focus_is_the_concentrated_weight_not_the_largest_function() -> None:
    mod = _module(200, 400)  # big is twice leaf's size, leaf runs on ten call paths
    assert focus(mod, list(_LABELS), _LATER) == ({"leaf"}, False)
    # leaf not open: mid is what is dense
    assert focus(mod, ["top", "mid", "big"], _LATER) == ({"mid"}, False)


def test_no_focus_for_a_small_module_or_a_flat_one() -> None:
    assert focus(_module(10, 10), list(_LABELS), _LATER) == (frozenset(), False)  # size floor
    flat = ModuleText.from_text(
        "\n".join(
            line
            for name in ("a", "b", "c")
            for line in (f"__{name}:", *["    push 1", "    pop 1"] * 150, "    return")
        ),
        {"a": "__a", "b": "__b", "c": "__c"},
    )
    assert focus(flat, ["a", "b", "c"], 0.1) == (frozenset(), False)  # all weigh the same


def test_keccak256_focus_is_the_power_of_two_table(trident_std) -> None:
    """keccak256's ``u32_pow2`` (351 cycles: 32 comparisons) runs under every rotation."""
    from tasmopt.optimizer.prepare import decode_tir, lower_module

    mod = trident_std["std_crypto_keccak256"]
    _, ours, _ = lower_module(decode_tir(mod["tir"]), mod["compiler_tasm"], CompileOptions())
    fo, searched = focus(ours, list(ours.functions), 0.1)
    assert "u32_pow2" in fo and len(fo) <= FOCUS_FUNCTIONS
    assert not searched  # 566 instructions: searching it would take the whole deadline
    assert "keccak_round" not in fo  # the largest inclusive cost, but not concentrated


class _Cache(dict):
    def get_many(self, keys):
        return {k: self[k] for k in keys if k in self}


def test_a_deadline_after_the_focus_tier_keeps_its_proofs_and_leaves_the_rest(
    trident_std, monkeypatch
) -> None:
    """The deadline expires when the tier after the focus starts verifying: the focus's
    proven rewrites are in the answer, every other function is the client's text, reported
    unmeasured and ``improving`` (with a cache placeholder, so deepening takes it up), and
    the answer's functions behave as the client's on the verifier's witnesses."""
    mod = trident_std["std_crypto_keccak256"]
    from tasmopt.optimizer.prepare import decode_tir, lower_module

    _, ours, _ = lower_module(decode_tir(mod["tir"]), mod["compiler_tasm"], CompileOptions())
    fo, _ = focus(ours, list(ours.functions), _LATER)
    seen: set[tuple[str, ...]] = set()

    def record(checks):
        seen.update(c.baseline for c in checks)
        return check_blocks(checks)

    compile_tir(  # the blocks of the focus alone
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(sources=("rules",), use_cache=False, only=tuple(fo)),
        verify=record,
    )
    monkeypatch.setattr("tasmopt.optimizer.FOCUS_WITHIN_S", 1e9)  # a deadline the test controls
    deadline = Deadline(600.0)
    calls: list[int] = []

    def verify(checks):
        calls.append(len(checks))
        if any(c.baseline not in seen for c in checks):  # the next tier: the whole module
            deadline.cancel("the test's deadline")
            return [Verdict(False, "rejected", "unverified: deadline") for _ in checks]
        return check_blocks(checks)

    cache = _Cache()
    r = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(sources=("rules", "search"), deadline=deadline),
        verify=verify,
        cache=cache,
    )
    assert len(calls) >= 2 and deadline.expired
    by = {f.name: f for f in r.functions}
    pow2 = by["u32_pow2"]
    assert pow2.measured and pow2.cycles < pow2.baseline_cycles // 10  # 351 -> a few
    client = ModuleText.from_text(mod["compiler_tasm"], _labels(r))
    out = ModuleText.from_text(r.tasm, _labels(r))
    looked = {n for n, f in by.items() if f.measured}
    assert looked and looked <= fo
    for name, f in by.items():
        if name in looked:
            continue
        assert f.status == "improving" and not f.measured
        assert "returned unchanged" in (f.reason or "")
        assert out.section_lines(name) == client.section_lines(name)
    placeholders = {e.name for e in r.cache_entries if not e.measured}
    assert placeholders >= set(by) - looked  # deepening takes every function up
    for name in ("u32_pow2", "shl_u32", "rot_lane_small"):  # the rewrite and its callers
        v = check_function(client.harness(name, "release"), out.harness(name, "release"), seed=5)
        assert v.equivalent, (name, v.reason)
    assert by["shl_u32"].cycles is None or by["shl_u32"].cycles <= by["shl_u32"].baseline_cycles


def _labels(result) -> dict[str, str]:
    return {f.name: "__" + f.name for f in result.functions}


def test_the_focus_tier_is_for_request_deadlines_not_deepening(trident_std, monkeypatch) -> None:
    """Under a request's deadline coin's concentrated ``hash_leaf`` gets a tier of its own;
    under a deepening run's long deadline (or none) the whole module goes first. (The plan
    is observed where it is made: the answer's timings name only the tiers that finished.)"""
    import tasmopt.optimizer as optimizer

    mod = trident_std["coin"]
    planned: list[frozenset[str]] = []

    def recording(text, workable, remaining_s):
        out = focus(text, workable, remaining_s)
        planned.append(out[0])
        return out

    monkeypatch.setattr(optimizer, "focus", recording)

    def plan(deadline):
        planned.clear()
        opts = CompileOptions(
            sources=("rules", "search"), use_cache=False, search_budget_s=0.05, deadline=deadline
        )
        compile_tir(mod["tir"], mod["compiler_tasm"], options=opts)
        return list(planned)

    assert plan(Deadline(9.0)) == [frozenset({"hash_leaf"})]
    assert plan(Deadline(120.0)) == []
    assert plan(None) == []


def test_a_small_focus_under_a_short_deadline_is_searched_even_in_a_small_module() -> None:
    """A leaf of at most FOCUS_SEARCH_INSTRUCTIONS on many call paths: searched when the
    deadline is near (the only tier that searches before it ends), not when there is time
    for the quick tier and the search tier after it; a small module gets such a focus only
    searched."""
    from tasmopt.optimizer.priority import FOCUS_SEARCH_INSTRUCTIONS, FOCUS_SEARCH_WITHIN_S

    mod = _module(10, 10)  # 29 instructions: under the size floor
    assert focus(mod, list(_LABELS), FOCUS_SEARCH_WITHIN_S) == ({"leaf"}, True)
    assert focus(mod, list(_LABELS), FOCUS_SEARCH_WITHIN_S + 0.1) == (frozenset(), False)
    big_leaf = _module(FOCUS_SEARCH_INSTRUCTIONS + 10, 900)
    assert focus(big_leaf, list(_LABELS), 0.1) == ({"leaf"}, False)


def test_poseidon_under_a_short_deadline_searches_its_sbox_first(trident_std, monkeypatch) -> None:
    """std.crypto.poseidon's ``sbox`` (13 instructions, on 55 call paths): under a short
    deadline the focus tier searches it (13 -> 7 cycles; the rules alone find nothing) before
    the quick tier starts. The deadline here expires as the next tier starts verifying: the
    searched rewrite is in the answer, proven, and the rest is the client's text."""
    import tasmopt.optimizer as optimizer
    from tasmopt.optimizer import priority

    mod = trident_std["std_crypto_poseidon"]
    seen: set[tuple[str, ...]] = set()

    def record(checks):
        seen.update(c.baseline for c in checks)
        return check_blocks(checks)

    compile_tir(  # the blocks of sbox alone
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(sources=("rules", "search"), use_cache=False, only=("sbox",)),
        verify=record,
    )
    monkeypatch.setattr(optimizer, "FOCUS_WITHIN_S", 1e9)  # a deadline the test controls
    monkeypatch.setattr(priority, "FOCUS_SEARCH_WITHIN_S", 1e9)
    deadline = Deadline(600.0)

    def verify(checks):
        if any(c.baseline not in seen for c in checks):  # the next tier: the whole module
            deadline.cancel("the test's deadline")
            return [Verdict(False, "rejected", "unverified: deadline") for _ in checks]
        return check_blocks(checks)

    r = compile_tir(
        mod["tir"],
        mod["compiler_tasm"],
        options=CompileOptions(sources=("rules", "search"), use_cache=False, deadline=deadline),
        verify=verify,
    )
    assert deadline.expired
    by = {f.name: f for f in r.functions}
    assert by["sbox"].measured and by["sbox"].cycles < by["sbox"].baseline_cycles
    client = ModuleText.from_text(mod["compiler_tasm"], _labels(r))
    out = ModuleText.from_text(r.tasm, _labels(r))
    v = check_function(client.harness("sbox", "release"), out.harness("sbox", "release"), seed=3)
    assert v.equivalent, v.reason
    for name in set(by) - {"sbox"}:
        assert out.section_lines(name) == client.section_lines(name), name


def test_sha256_under_a_short_deadline_searches_two_small_leaves(trident_std) -> None:
    """``rotr`` and ``add32`` (16 and 12 instructions, under 61 and 48 call paths): searched
    together when the deadline is near; with time left, ``rotr`` alone, by the rules."""
    from tasmopt.optimizer.prepare import decode_tir, lower_module

    mod = trident_std["std_crypto_sha256"]
    _, ours, _ = lower_module(decode_tir(mod["tir"]), mod["compiler_tasm"], CompileOptions())
    assert focus(ours, list(ours.functions), 0.15) == ({"rotr", "add32"}, True)
    assert focus(ours, list(ours.functions), _LATER) == ({"rotr"}, False)
