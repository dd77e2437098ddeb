"""Every op kind, lowered and executed in the simulator, against values computed here in
plain Python (Triton VM spec §5); the fixed lowering's corrections shown by execution."""

from __future__ import annotations

import random

import pytest
from lowerkit import EXAMPLE_B

from tasmopt.errors import TasmSyntaxError
from tasmopt.lower.blocks import split_functions
from tasmopt.lower.effects import function_effects
from tasmopt.lower.triton import lower
from tasmopt.tasm.parser import parse
from tasmopt.tir.codec import decode

sim = pytest.importorskip("tasmopt.vm.simulator")
run, VmInput = sim.run, sim.VmInput
tip5 = pytest.importorskip("tasmopt.vm.tip5")

P = 2**64 - 2**32 + 1
#: 16 recognisable words under the function's arguments (the VM's minimum stack).
FILLER = [1000 + i for i in range(16)]


def f(*body) -> list:
    """Wire TIR of ``fn f { body; return }``."""
    return [{"FnStart": "f"}, *body, "Return", "FnEnd"]


def program(tir: list, *, upstream: bool = False, isa: str = "release", entry: str = "__f"):
    """The lowered ops behind a harness ``call <entry>; halt``."""
    low = lower(decode(tir), isa=isa, upstream_bugs=upstream)
    return parse("\n".join([f"    call {entry}", "    halt", *low.lines]), isa)


def call(tir: list, args=(), *, upstream: bool = False, isa: str = "release", **inputs):
    """Run function ``f`` of ``tir`` on ``FILLER + args`` (bottom..top)."""
    prog = program(tir, upstream=upstream, isa=isa)
    return run(prog, VmInput(initial_stack=FILLER + list(args), **inputs), step_limit=20_000)


def returns(res, top: list) -> None:
    assert res.error is None, res.error
    assert res.stack == FILLER + top


# -- plain-Python references ---------------------------------------------------------------


def xmul(a, b):
    """XFE product mod x^3 - x + 1 (Triton VM spec §2); (c0, c1, c2)."""
    a0, a1, a2 = a
    b0, b1, b2 = b
    return (
        (a0 * b0 - a2 * b1 - a1 * b2) % P,
        (a1 * b0 + a0 * b1 - a2 * b2 + a2 * b1 + a1 * b2) % P,
        (a2 * b0 + a1 * b1 + a0 * b2 + a2 * b2) % P,
    )


def xinv(a):
    result, base, e = (1, 0, 0), a, P**3 - 2
    while e:
        if e & 1:
            result = xmul(result, base)
        base, e = xmul(base, base), e >> 1
    return result


def xadd(a, b):
    return tuple((x + y) % P for x, y in zip(a, b, strict=True))


RAM = {i: 11 * i + 3 for i in range(100, 120)}
H10 = [random.Random(7).randrange(P) for _ in range(10)]  # x0..x9, x0 on top
R, L, ACC = (5, 6, 7), (8, 9, 10), (11, 12, 13)

CASES = [
    # (id, body ops, args bottom..top, inputs, expected stack above FILLER, expected output)
    ("push", [{"Push": P - 1}], [], {}, [P - 1], []),
    ("pop", [{"Pop": 2}], [1, 2, 3], {}, [1], []),
    ("dup", [{"Dup": 2}], [1, 2, 3], {}, [1, 2, 3, 1], []),
    ("swap", [{"Swap": 2}], [1, 2, 3], {}, [3, 2, 1], []),
    ("swap0", [{"Swap": 0}], [1, 2], {}, [1, 2], []),
    ("add", ["Add"], [P - 1, 5], {}, [4], []),
    ("sub", ["Sub"], [10, 3], {}, [7], []),
    ("sub-neg", ["Sub"], [3, 10], {}, [P - 7], []),
    ("mul", ["Mul"], [2**40, 2**40], {}, [2**80 % P], []),
    ("neg", ["Neg"], [5], {}, [P - 5], []),
    ("invert", ["Invert"], [7], {}, [pow(7, P - 2, P)], []),
    ("eq", ["Eq"], [4, 4], {}, [1], []),
    ("eq0", ["Eq"], [4, 5], {}, [0], []),
    ("lt", ["Lt"], [9, 3], {}, [1], []),  # st0 < st1
    ("and", ["And"], [0b1100, 0b1010], {}, [0b1000], []),
    ("or", ["Or"], [0b1100, 0b1010], {}, [0b1110], []),
    ("xor", ["Xor"], [0b1100, 0b1010], {}, [0b0110], []),
    ("pop_count", ["PopCount"], [0xFF00FF], {}, [16], []),
    ("split", ["Split"], [2**40 + 7], {}, [256, 7], []),
    ("div_mod", ["DivMod"], [7, 100], {}, [14, 2], []),  # numerator st0
    ("shl", ["Shl"], [3, 5], {}, [96], []),
    ("shr", ["Shr"], [1000, 3], {}, [125], []),
    ("log2", ["Log2"], [1000], {}, [9], []),
    ("pow", ["Pow"], [10, 2], {}, [1024], []),  # base st0, exponent st1
    ("read_io", [{"ReadIo": 3}], [], {"public_input": [7, 8, 9]}, [7, 8, 9], []),
    ("write_io", [{"WriteIo": 2}], [1, 2], {}, [], [2, 1]),
    ("read_mem", [{"ReadMem": 2}], [110], {"ram": RAM}, [RAM[110], RAM[109], 108], []),
    ("assert", [{"Assert": 1}], [1], {}, [], []),
    ("assert_vector", [{"Assert": 5}], [5, 4, 3, 2, 1, 5, 4, 3, 2, 1], {}, [5, 4, 3, 2, 1], []),
    ("hash", [{"Hash": {"width": 5}}], H10[::-1], {}, tip5.hash_fixed(H10)[::-1], []),
    (
        "reveal",
        [{"Reveal": {"name": "E", "tag": 4, "field_count": 2}}],
        [21, 22],
        {},
        [],
        [4, 22, 21],
    ),
    (
        "seal",
        [{"Seal": {"name": "S", "tag": 5, "field_count": 2}}],
        [21, 22],
        {},
        [],
        tip5.hash_fixed([5, 0, 0, 0, 0, 0, 0, 0, 22, 21]),
    ),
    (
        "ram_read",
        [{"RamRead": {"width": 5}}],
        [104],
        {"ram": RAM},
        [RAM[104], RAM[103], RAM[102], RAM[101], RAM[100]],
        [],
    ),
    ("hint", [{"Hint": 3}], [], {"secret_input": [4, 5, 6]}, [4, 5, 6], []),
    (
        "sponge",
        ["SpongeInit", "SpongeAbsorb", "SpongeSqueeze"],
        H10[::-1],
        {},
        None,
        [],
    ),  # checked below
    ("ext_mul", ["ExtMul"], [3, 2, 1, 10], {}, [30, 20, 10], []),
    ("ext_invert", ["ExtInvert"], [3, 2, 1], {}, list(xinv((1, 2, 3)))[::-1], []),
    (
        "fold_ext",
        ["FoldExt"],
        [*ACC[::-1], 110, 100],
        {"ram": {100: R[0], 101: R[1], 102: R[2], 110: L[0], 111: L[1], 112: L[2]}},
        [*xadd(ACC, xmul(R, L))[::-1], 113, 103],
        [],
    ),
    (
        "fold_base",
        ["FoldBase"],
        [*ACC[::-1], 110, 100],
        {"ram": {100: 4, 110: L[0], 111: L[1], 112: L[2]}},
        [*xadd(ACC, tuple(4 * c % P for c in L))[::-1], 113, 101],
        [],
    ),
    (
        "comment_asm",
        [{"Comment": "x"}, {"Asm": {"lines": ["push 3", " add"], "effect": 0}}],
        [4],
        {},
        [7],
        [],
    ),
    (
        "proof_block",
        [{"ProofBlock": {"program_hash": "h", "body": [{"Push": 2}, "Mul"]}}],
        [5],
        {},
        [10],
        [],
    ),
]


@pytest.mark.parametrize("name, body, args, inputs, top, output", CASES, ids=[c[0] for c in CASES])
def test_op_kinds_execute(name, body, args, inputs, top, output):
    res = call(f(*body), args, **inputs)
    if name == "sponge":
        sponge = tip5.Sponge()
        sponge.absorb(H10)
        top = sponge.squeeze()[::-1]
    returns(res, top)
    assert res.public_output == output


def test_memory_writes():
    res = call(f({"WriteMem": 2}), [31, 32, 20])  # RAM[p] = st1, RAM[p+1] = st2
    returns(res, [22])
    assert (res.ram[20], res.ram[21]) == (32, 31)
    res = call(f({"RamWrite": {"width": 1}}), [77, 50])  # pointer on top, value below
    returns(res, [])
    assert res.ram[50] == 77
    res = call(
        f({"RamWrite": {"width": 3}}, {"Push": 52}, {"RamRead": {"width": 3}}), [3, 2, 1, 50]
    )
    returns(res, [3, 2, 1])


def test_sponge_load_and_merkle():
    vals = {200 + k: 1000 * k + 1 for k in range(10)}
    res = call(f("SpongeInit", "SpongeLoad", "SpongeSqueeze"), [9, 9, 9, 9, 200], ram=vals)
    sponge = tip5.Sponge()
    sponge.absorb([vals[200 + k] for k in range(10)])
    squeezed = sponge.squeeze()
    returns(res, [vals[203], vals[202], vals[201], vals[200], 210, *squeezed[::-1]])
    c, s = (1, 2, 3, 4, 5), (6, 7, 8, 9, 10)
    res = call(f("MerkleStep"), [6, *c[::-1]], secret_digests=[s])  # i even: c is left
    returns(res, [3, *tip5.hash_pair(c, s)[::-1]])
    ram = {300 + k: s[k] for k in range(5)}
    res = call(f("MerkleLoad"), [300, 42, 7, *c[::-1]], ram=ram)  # i odd: c is right
    returns(res, [305, 42, 3, *tip5.hash_pair(s, c)[::-1]])


def test_failures_are_the_isa_ones():
    assert call(f({"Assert": 1}), [2]).error.kind == "AssertionFailed"
    assert call(f("And"), [2**32, 1]).error.kind == "FailedU32Conversion"
    assert call(f("Invert"), [0]).error.kind == "InverseOfZero"


def test_calls_return_and_halt():
    tir = [{"FnStart": "g"}, "Add", "Return", "FnEnd"] + f({"Call": "g"}, {"Push": 2}, "Mul")
    returns(call(tir, [3, 4]), [14])
    res = call(f({"Call": "@m__g"}, {"Push": 1}))
    returns(res, [1])
    assert [e.symbol for e in res.external_calls] == ["@m__g"]
    res = call(f({"Push": 1}, "Halt", {"Push": 2}))
    returns(res, [1])
    res = run(
        parse(
            "\n".join(
                lower(
                    decode(
                        [
                            {"Entry": "main"},
                            {"FnStart": "main"},
                            {"Push": 5},
                            {"WriteIo": 1},
                            "Return",
                            "FnEnd",
                        ]
                    )
                ).lines
            )
        ),
        VmInput(),
    )
    assert res.error is None and res.public_output == [5]


@pytest.mark.parametrize(
    "a, b",
    [
        (0, 0),
        (1, 0),
        (0xFFFFFFFF, 0),
        (0xFFFFFFFF, 0x12345678),
        (0x80000000, 1),
        (0xF0F0F0F0, 0x0F0F0F0F),
        (12, 10),
    ]
    + [(random.Random(i).getrandbits(32), random.Random(-i).getrandbits(32)) for i in range(8)],
)
def test_or_is_a_u32_or(a, b):
    returns(call(f("Or"), [a, b]), [a | b])


def test_upstream_or_does_not_assemble():
    with pytest.raises(TasmSyntaxError, match="unknown instruction 'or'"):
        program(f("Or"), upstream=True)


def test_shr_is_a_right_shift_upstream_is_not():
    prog, bad = program(f("Shr")), program(f("Shr"), upstream=True)
    for a in (0, 1, 1000, 0xFFFFFFFF, 0x87654321):
        for b in range(32):
            returns(run(prog, VmInput(initial_stack=FILLER + [a, b])), [a >> b])
    res = run(bad, VmInput(initial_stack=FILLER + [1000, 3]))
    returns(res, [2**3 % 1000])  # upstream: 2^st0 mod st1
    assert (
        run(prog, VmInput(initial_stack=FILLER + [5, 32])).error.kind == "FailedU32Conversion"
    )  # documented domain: shift < 32


def test_if_else_both_branches_and_if_only():
    tir = f({"IfElse": {"then_body": [{"Push": 1}, "Add"], "else_body": [{"Push": 2}, "Mul"]}})
    returns(call(tir, [5, 1]), [6])
    returns(call(tir, [5, 7]), [6])  # any non-zero condition takes the then branch
    returns(call(tir, [5, 0]), [10])
    only = f({"IfOnly": {"then_body": [{"Push": 9}, {"WriteIo": 1}]}})
    res = call(only, [0])
    returns(res, [])
    assert res.public_output == []
    res = call(only, [3])
    returns(res, [])
    assert res.public_output == [9]


@pytest.mark.parametrize("x, output", [(0, [10]), (1, [99, 501]), (3, [99, 501, 502, 503])])
def test_example_b_nested_ifs_and_loop(x, output):
    prog = program(EXAMPLE_B, entry="__demo")
    res = run(prog, VmInput(initial_stack=FILLER + [x], secret_input=[501, 502, 503]))
    returns(res, [])
    assert res.public_output == output


def test_example_b_upstream_runs_wrong():
    prog = program(EXAMPLE_B, upstream=True, entry="__demo")
    res = run(prog, VmInput(initial_stack=FILLER + [0], secret_input=[501]))
    # falls through into __loop__1 with x = 0 on top: `skiz return` leaves demo early,
    # skipping its final `pop 1`
    assert res.error is None and res.stack == FILLER + [0]
    res = run(
        prog,
        VmInput(initial_stack=FILLER + [3], secret_input=list(range(500, 530))),
        step_limit=20_000,
    )
    assert res.error is not None or res.public_output != [99, 500, 501, 502]


def loop_fn(n_body: list) -> list:
    return f(
        {"Dup": 0},
        {"Call": "loop__1"},
        {"Pop": 1},
        {"Loop": {"label": "loop__1", "body": n_body}},
        {"Pop": 1},
    )


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_loop_runs_its_body_exactly_n_times(n):
    res = call(loop_fn([{"Push": 7}, {"WriteIo": 1}]), [n])
    returns(res, [])
    assert res.public_output == [7] * n
    res = call(loop_fn([{"Dup": 0}, {"WriteIo": 1}]), [n])  # the body sees the counter
    returns(res, [])
    assert res.public_output == list(range(n - 1, -1, -1))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_upstream_loop_falls_through(n):
    res = call(loop_fn([{"Push": 7}, {"WriteIo": 1}]), [n], upstream=True)
    assert res.error is not None or res.public_output != [7] * n or res.stack != FILLER


def test_nested_loops_and_loop_in_a_branch():
    inner = [
        {"Push": 2},
        {"Call": "loop__2"},
        {"Pop": 1},
        {"Loop": {"label": "loop__2", "body": [{"Push": 7}, {"WriteIo": 1}]}},
    ]
    res = call(loop_fn(inner), [3])
    returns(res, [])
    assert res.public_output == [7] * 6
    tir = f(
        {
            "IfElse": {
                "then_body": [
                    {"Dup": 0},
                    {"Call": "loop__1"},
                    {"Pop": 1},
                    {"Loop": {"label": "loop__1", "body": [{"Push": 8}, {"WriteIo": 1}]}},
                ],
                "else_body": [],
            }
        },
        {"Pop": 1},
    )
    res = call(tir, [4, 1])
    returns(res, [])
    assert res.public_output == [8] * 4


def test_final_flush_makes_code_without_fnend_run():
    tir = [{"Push": 1}, {"IfOnly": {"then_body": [{"Push": 9}, {"WriteIo": 1}]}}, "Halt"]
    with pytest.raises(TasmSyntaxError, match="undefined label"):
        parse(lower(decode(tir), upstream_bugs=True).text())
    res = run(parse(lower(decode(tir)).text()), VmInput())
    assert res.error is None and res.public_output == [9]


def test_head_isa_lowering_runs():
    res = call(f({"Push": 2}, "Add"), [3], isa="head")
    returns(res, [5])


# -- real data --------------------------------------------------------------------------------

_CONTROL = ("TooShallow", "InstructionPointerOverflow", "JumpStackIsEmpty")


def _ones_input() -> dict:
    return {
        "public_input": [1] * 200,
        "secret_input": [1] * 200,
        "secret_digests": [(1, 1, 1, 1, 1)] * 20,
    }


def test_real_blocks_fit_their_entry_depth(trident_std):
    """Each block's TASM runs on exactly 16 + entry_depth words without TooShallow and
    leaves 16 + entry_depth + net_effect when it completes (all-ones input: asserts hold)."""
    completed = total = 0
    for module in trident_std.values():
        low = lower(decode(module["tir"]))
        for fn in low.functions:
            if fn.unlowerable:  # passed through untouched by the optimizer (sha256's dup 24)
                continue
            for b in fn.blocks:
                total += 1
                prog = parse("\n".join(low.lines[b.start : b.end] + ["    halt"]))
                res = run(
                    prog,
                    VmInput(initial_stack=[1] * (16 + b.entry_depth), **_ones_input()),
                    measure=False,
                )
                if res.error is None:
                    completed += 1
                    assert len(res.stack) == 16 + b.entry_depth + b.net_effect
                else:
                    assert res.error.kind not in _CONTROL, (fn.name, b.path, res.error)
    assert total > 900 and completed > 0.8 * total


def test_real_functions_with_known_effects_run(trident_std):
    """The fixed lowering of each library function whose effect is known statically runs
    without control-flow failures on 16 + depth words and leaves 16 + depth + net."""
    completed = total = 0
    for module in trident_std.values():
        ops = decode(module["tir"])
        chunks = [c for c in split_functions(ops) if not c.name.startswith("__")]
        effects = function_effects({c.name: c.ops for c in chunks})
        low = lower(ops)
        prog_text = "\n".join(low.lines)
        unlowerable = {fn.name for fn in low.functions if fn.unlowerable}
        if unlowerable:
            prog_text = "\n".join(
                line for line in low.lines if line.strip() not in ("dup 24", "dup 25")
            )
        for c in chunks:
            eff = effects["__" + c.name]
            if not eff.known or c.name in unlowerable:
                continue
            total += 1
            prog = parse(f"    call __{c.name}\n    halt\n{prog_text}")
            res = run(
                prog,
                VmInput(initial_stack=[1] * (16 + eff.depth), **_ones_input()),
                step_limit=200_000,
                measure=False,
            )
            if res.error is None:
                completed += 1
                assert len(res.stack) == 16 + eff.depth + eff.net, c.name
            else:
                assert res.error.kind not in _CONTROL, (c.name, res.error)
    assert total > 100 and completed > 0.5 * total


def test_every_variant_is_executed_somewhere_in_this_file():
    from tasmopt.lower.validate import iter_ops
    from tasmopt.tir.ops import VARIANTS

    in_cases = {op.kind for case in CASES for _, op, _ in iter_ops(decode(f(*case[1])))}
    elsewhere = {
        "WriteMem",
        "RamWrite",
        "SpongeLoad",
        "MerkleStep",
        "MerkleLoad",
        "Call",
        "Halt",
        "Entry",
        "IfElse",
        "IfOnly",
        "Loop",
    }  # the tests above
    assert in_cases | elsewhere == set(VARIANTS)
