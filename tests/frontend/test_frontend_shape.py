"""Shape compatibility with the Trident toolchain: our own functions of the same kind as
trident-std ones (written here from their TIR, not copied from library sources) compile to
the toolchain's TIR exactly where no upstream bug is involved, and differ only by the CF
fix where one is (spec/trident-language.md §8). Reference: shared/data/trident-std."""

from __future__ import annotations

import json
import os
from pathlib import Path

from frontend_util import LIB, functions, show

from tasmopt.frontend import compile_source, optimize
from tasmopt.tir.codec import decode

STD_DIR = Path(
    os.environ.get(
        "TASMOPT_TRIDENT_STD",
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / "trident-std",
    )
)


def toolchain(module: str, fn: str) -> str:
    path = STD_DIR / f"{module}.json"
    assert path.is_file(), f"trident-std module {module} not found at {STD_DIR}"
    return show(functions(decode(json.loads(path.read_text())["tir"]))[fn])


def ours(src: str, fn: str, *, unsound: bool = False) -> str:
    ops = compile_source(src, "t.tri", [LIB], optimized=False)
    return show(functions(optimize(ops, unsound=unsound))[fn])


def test_straight_line_copies_on_read_and_epilogue():
    # std.crypto.poseidon.sbox: x^5 through let-bound squares
    src = (
        "module t\npub fn sbox(x: Field) -> Field {\n    let x2 = x * x\n"
        "    let x4 = x2 * x2\n    let x5 = x4 * x\n    x5\n}"
    )
    assert ours(src, "sbox") == toolchain("std_crypto_poseidon", "sbox")


def test_local_calls_and_their_results():
    # std.crypto.poseidon.hash1 / hash3: chained calls of a local two-input function
    src = (
        "module t\npub fn hash2(a: Field, b: Field) -> Field { a * b + a }\n"
        "pub fn hash1(x: Field) -> Field { hash2(x, 1) }\n"
        "pub fn hash3(a: Field, b: Field, c: Field) -> Field {\n"
        "    let h = hash2(a, b)\n    hash2(h, c)\n}"
    )
    assert ours(src, "hash1") == toolchain("std_crypto_poseidon", "hash1")
    assert ours(src, "hash3") == toolchain("std_crypto_poseidon", "hash3")


def test_ram_read_of_a_computed_address():
    # std.math.lut.read
    src = (
        "module std.t\nuse vm.io.mem\n"
        "pub fn read(base: Field, i: Field) -> Field { mem.read(base + i) }"
    )
    assert ours(src, "read") == toolchain("std_math_lut", "read")


def test_pass_through_wrappers_and_the_b24_fix():
    # std.io.storage: pass-through wrappers (spec §7.3); write differs by the B24 swap
    src = (
        "module std.t\nuse vm.io.mem\n"
        "pub fn read(a: Field) -> Field { mem.read(a) }\n"
        "pub fn write(a: Field, v: Field) { mem.write(a, v) }\n"
        "pub fn read_digest(a: Field) -> Digest { mem.read_block(a) }"
    )
    assert ours(src, "read") == toolchain("std_io_storage", "read") == "RamRead{1}"
    assert toolchain("std_io_storage", "write") == "RamWrite{1}"
    assert ours(src, "write") == "Swap(1) RamWrite{1}"
    assert toolchain("std_io_storage", "read_digest") == "RamRead{5}"
    assert ours(src, "read_digest") == "Push(4) Add RamRead{5}"


def test_loop_idiom_prologue_and_epilogue():
    # std.math.fibonacci.fib256: the Dup/Call/Pop/Loop idiom around a correct body (B23)
    src = (
        "module t\npub fn fib256(n: Field) -> Field {\n    let mut a = 0\n"
        "    let mut b = 1\n    for i in 0..n bounded 256 {\n        let t = a + b\n"
        "        a = b\n        b = t\n    }\n    a\n}"
    )
    real = toolchain("std_math_fibonacci", "fib256")
    mine = ours(src, "fib256")
    head, tail = (
        "Push(0) Push(1) Dup(2) Call(loop__1) Pop(1) Loop(loop__1)[",
        "] Dup(1) Swap(3) Pop(3)",
    )
    assert real.startswith(head) and real.endswith(tail)
    assert mine.startswith(head) and mine.endswith(tail)
    # upstream's body sees an empty model (Dup(0) Dup(0) Add); ours reads a and b
    assert mine[len(head) : -len(tail)] == (
        "Dup(2) Dup(2) Add Dup(2) Swap(4) Pop(1) Dup(0) Swap(3) Pop(2)"
    )


def test_digest_epilogue_equals_upstream_with_its_unsound_rewrite():
    # std.crypto.auth.lock_and_read_kernel: Digest result over 5 dead elements. Our CF
    # epilogue is the rotation (Swap(5) Pop(1)) x 5; with upstream's unsound rewrite on we
    # produce the toolchain's TIR exactly.
    src = (
        "module t\npub fn check(d: Digest) { assert_digest(d, d) }\n"
        "pub fn verify_digest_preimage(expected: Digest) { check(expected) }\n"
        "pub fn lock_and_read_kernel(expected: Digest) -> Digest {\n"
        "    verify_digest_preimage(expected)\n    pub_read5()\n}"
    )
    real = toolchain("std_crypto_auth", "lock_and_read_kernel")
    assert ours(src, "lock_and_read_kernel", unsound=True) == real
    assert ours(src, "lock_and_read_kernel") == (
        "Dup(4) Dup(4) Dup(4) Dup(4) Dup(4) Call(verify_digest_preimage) ReadIo(5) "
        + " ".join(["Swap(5) Pop(1)"] * 5)
    )
