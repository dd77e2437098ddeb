"""TASM: program model, parser and printer (Triton VM spec §10)."""

from tasmopt.tasm.parser import parse, parse_field_literal, parse_instructions
from tasmopt.tasm.program import EXTERNAL_PREFIX, Instr, Item, Label, Program, format_field

__all__ = [
    "parse",
    "parse_instructions",
    "parse_field_literal",
    "Instr",
    "Label",
    "Item",
    "Program",
    "format_field",
    "EXTERNAL_PREFIX",
]
