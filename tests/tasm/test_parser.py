"""TASM parser: every syntax rule of Triton VM spec §10, errors with line and column, and the
real Trident compiler output in data/trident-std."""

import json
from pathlib import Path

import pytest

from tasmopt.errors import TasmSyntaxError
from tasmopt.isa import P
from tasmopt.tasm import Instr, Label, parse

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "trident-std"


def items(text, isa="release"):
    return [str(i) for i in parse(text, isa).items]


def error(text, isa="release"):
    with pytest.raises(TasmSyntaxError) as info:
        parse(text, isa)
    return info.value


def where(text):
    e = error(text)
    return e.line, e.column


# --- tokens and whitespace ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pos"),
    [
        ("push10", (1, 1)),
        ("poppop", (1, 1)),
        ("halt\n  dup 0dup 0", (2, 7)),
        ("nop\nPUSH 1", (2, 1)),
    ],
)
def test_mnemonics_and_arguments_need_a_separator(text, pos):
    assert where(text) == pos


def test_any_unicode_whitespace_separates():
    assert items("push\u00a01\u2003halt\tnop\r\nnop") == ["push 1", "halt", "nop", "nop"]


@pytest.mark.parametrize("sep", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_information_separators_are_not_whitespace(sep):
    # Python's str.isspace() says True for U+001C..U+001F; Unicode White_Space (and Rust's
    # char::is_whitespace, which the reference parser uses) says no: `push{sep}1` is one word.
    assert sep.isspace()
    e = error(f"push{sep}1")
    assert (e.line, e.column) == (1, 1) and "unknown instruction" in str(e)
    assert where(f"halt {sep}") == (1, 6)
    with pytest.raises(TasmSyntaxError):
        parse(f"hint x = stack[{sep}0] halt")


def test_unicode_digits_are_not_arguments():
    # '²'.isdigit() and '٣'.isdigit() are True in Python; the spec allows only 0..9
    for arg in ("\u00b2", "\u0663", "\uff11"):
        assert where(f"dup {arg}") == (1, 5)
    with pytest.raises(TasmSyntaxError):
        parse("hint x = stack[\u0663] halt")


def test_argument_needed():
    e = error("nop\npush")
    assert (e.line, e.column) == (2, 5)
    assert where("push  \n") == (1, 5)


# --- comments -------------------------------------------------------------------------------


def test_line_comments():
    assert items("push 1// one\nhalt // end") == ["push 1", "halt"]
    assert items("halt //") == ["halt"]  # bare `//` at the end: accepted (spec §12.5)
    assert items("halt\n//\nnop") == ["halt", "nop"]
    assert items("skiz//c\nhalt") == ["skiz", "halt"]
    # a lone carriage return ends a line comment too (old Mac line ends); CRLF as well
    assert items("push 1 // one\rpop 1") == ["push 1", "pop 1"]
    assert items("push 1 // one\r\npop 1\r\n") == ["push 1", "pop 1"]
    assert items("halt //\rnop") == ["halt", "nop"]


def test_block_comments():
    assert items("/* a\n b */ halt") == ["halt"]
    assert items("push/*x*/1") == ["push 1"]
    assert items("push 1/**/push 2") == ["push 1", "push 2"]
    assert items("/* /* not nested */ halt") == ["halt"]
    assert items("/* x */") == []


def test_unterminated_block_comment():
    e = error("halt\n  /* open\n")
    assert (e.line, e.column) == (2, 3)
    assert "unterminated" in e.reason


# --- labels ---------------------------------------------------------------------------------


def test_labels():
    assert items("foo:call foo") == ["foo:", "call foo"]
    assert items("foo :halt") == ["foo:", "halt"]
    assert items("a-b: _x1: ünïcode: halt") == ["a-b:", "_x1:", "ünïcode:", "halt"]
    assert items("pops: _call: halt") == ["pops:", "_call:", "halt"]  # prefix/suffix is fine


def test_labels_name_instruction_indices():
    p = parse("a: push 1 b: halt c:")
    assert p.labels == {"a": 0, "b": 1, "c": 2}
    assert p.word_addresses == (0, 2) and p.length_words == 3
    assert p.words() == [1, 1, 0]
    p = parse("call end halt end:")
    assert p.words() == [49, 3, 0]  # label at L


@pytest.mark.parametrize(
    ("text", "pos"),
    [
        ("1abc: halt", (1, 1)),
        ("halt\n-a: halt", (2, 1)),
        ("push: halt", (1, 1)),
        ("nop hint: halt", (1, 5)),
        ("error_id: halt", (1, 1)),
        ("error_message: halt", (1, 1)),
        ("@foo: halt", (1, 1)),
        ("push 1 :", (1, 8)),
    ],
)
def test_invalid_labels(text, pos):
    assert where(text) == pos


def test_duplicate_label():
    e = error("a: halt\n  b: nop\n  a: halt")
    assert (e.line, e.column) == (3, 3)
    assert "duplicate" in e.reason


def test_call_to_undefined_label():
    e = error("call f\nhalt\ncall nowhere\nf: return")
    assert (e.line, e.column) == (3, 6)
    assert "undefined" in e.reason


def test_call_targets():
    assert items("call a a: halt") == ["call a", "a:", "halt"]  # forward reference
    assert where("call push") == (1, 6)
    assert where("call 12") == (1, 6)  # always a label, never a number
    # the Trident toolchain's unlinked cross-module symbols
    p = parse("call @ext__f halt")
    assert p.external_symbols == ("@ext__f",)
    with pytest.raises(TasmSyntaxError):
        parse("call @ext__f halt", allow_external=False)


# --- arguments ------------------------------------------------------------------------------


def test_push_literals():
    p = parse(
        "push -1 push +5 push 00457470286889025784 push 18446744069414584320 "
        "push -18446744069414584320 addi -4"
    )
    assert [i.arg for i in p.instructions] == [P - 1, 5, 457470286889025784, P - 1, 1, P - 4]


@pytest.mark.parametrize(
    "text",
    [
        "push 18446744069414584321",  # p
        "push -18446744069414584321",  # -p
        "push 99999999999999999999999",
        "push 0x10",
        "push 1.5",
        "push --1",
        "addi 18446744069414584321",
    ],
)
def test_push_literal_errors(text):
    e = error("nop\n" + text)
    assert (e.line, e.column) == (2, len(text.split()[0]) + 2)


@pytest.mark.parametrize("name", ["dup", "swap", "pick", "place"])
def test_stack_index_arguments(name):
    assert [i.arg for i in parse(" ".join(f"{name} {k}" for k in range(16))).instructions] == list(
        range(16)
    )
    for bad in ("16", "01", "-1", "+1", "x"):
        assert where(f"{name} {bad}") == (1, len(name) + 2)


@pytest.mark.parametrize("name", ["pop", "divine", "read_mem", "write_mem", "read_io", "write_io"])
def test_n_arguments(name):
    assert [i.arg for i in parse(" ".join(f"{name} {k}" for k in range(1, 6))).instructions] == [
        1,
        2,
        3,
        4,
        5,
    ]
    for bad in ("0", "6", "05", "-1"):
        assert where(f"{name} {bad}") == (1, len(name) + 2)


# --- assertion context ----------------------------------------------------------------------


def test_error_id_after_assert():
    p = parse("assert error_id 42 assert_vector error_id -7\nassert\n   error_id 0")
    assert [i.error_id for i in p.instructions] == [42, -7, 0]
    assert items("assert error_id 42") == ["assert error_id 42"]
    big = 2**127 - 1
    assert parse(f"assert error_id {big}").instructions[0].error_id == big


@pytest.mark.parametrize(
    ("text", "pos"),
    [
        ("push 1 error_id 4", (1, 8)),
        ("error_id 4", (1, 1)),
        ("assert error_id 1 error_id 2", (1, 19)),
        ("assert\nl: error_id 3", (2, 4)),
        ("assert error_id x", (1, 8)),
        ("assert error_id", (1, 8)),
        (f"assert error_id {2**127}", (1, 17)),
    ],
)
def test_error_id_placement_errors(text, pos):
    assert where(text) == pos


# --- hints and breakpoints -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "hint x = stack[0]",
        "hint x: Foo = stack[0]",
        "hint x_1 = stack[1..3]",
        "hint v: Vec<A, B<C>> = stack[0..2]",
        "hint p: **T = stack[0]",
        "hint _p : Digest = stack [ 0 .. 5 ]",
    ],
)
def test_type_hints_are_dropped(text):
    assert items(f"push 1 {text} halt") == ["push 1", "halt"]
    assert items(f"{text}//c\nhalt") == ["halt"]


@pytest.mark.parametrize(
    ("text", "pos"),
    [
        ("hint x = stack[3..1]", (1, 1)),
        ("hint x = stack[2..2]", (1, 1)),
        ("hint X = stack[0]", (1, 1)),
        ("hint 1x = stack[0]", (1, 1)),
        ("hint x = stack", (1, 1)),
        ("hint x = stack[0]halt", (1, 18)),  # a fixed parser bug: `halt` used to be dropped
    ],
)
def test_type_hint_errors(text, pos):
    assert where(text) == pos


def test_break_is_dropped():
    assert items("push 1 break halt break") == ["push 1", "halt"]


# --- the program model --------------------------------------------------------------------


def test_items_and_isa_variants():
    p = parse("start: push 1 assert error_id 3 halt")
    assert p.items == (Label("start"), Instr("push", 1), Instr("assert", None, 3), Instr("halt"))
    assert error("b_horner_step").reason.startswith("unknown instruction")
    assert items("b_horner_step x_horner_step", "head") == ["b_horner_step", "x_horner_step"]


def test_round_trip_through_text():
    text = "main: push -1 push 457 call f halt f: dup 15 assert error_id 9 return"
    p = parse(text)
    assert parse(p.text()).items == p.items


# --- real compiler output -------------------------------------------------------------------


def _modules():
    return sorted(DATA.glob("*.json")) if DATA.exists() else []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.stem)
def test_trident_std_compiler_tasm_parses(path):
    module = json.loads(path.read_text())
    text = module["compiler_tasm"]
    if path.stem == "std_crypto_sha256":
        # its TIR contains `Dup 24`, which lowers to an invalid `dup 24`
        e = error(text)
        assert (e.line, e.column) == (1883, 9)
        assert text.splitlines()[1882].strip() == "dup 24"
        assert "0..15" in e.reason and "'24'" in e.reason
        return
    program = parse(text)
    assert len(program) > 0
    for fn in module["functions"]:
        assert f"__{fn}" in program.labels
    assert set(program.external_symbols) <= set(module["external_calls"])


def test_parsing_is_memoized_per_text_and_variant_and_errors_are_not():
    """The same text parses to the same (immutable) Program once per process; another ISA
    variant or another ``allow_external`` is another parse; a syntax error is raised every
    time (nothing cached for it); a long text is memoized too."""
    from tasmopt.tasm.parser import SHORT_TEXT, parse

    text = "push 1\npush 2\nadd\nhalt\n"
    assert parse(text) is parse(text)
    assert parse(text, "head") is not parse(text) and parse(text, "head") == parse(text, "head")
    assert parse(text, allow_external=False) is not parse(text)
    for _ in range(2):
        with pytest.raises(TasmSyntaxError):
            parse("push\n")
    long = "push 1\npop 1\n" * (SHORT_TEXT // 10) + "halt\n"
    assert len(long) > SHORT_TEXT and parse(long) is parse(long)
    assert len(parse(long).instructions) == 2 * (SHORT_TEXT // 10) + 1
