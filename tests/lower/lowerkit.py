"""The TIR examples of spec/tir.md §2.1 that the lowering tests share."""

from __future__ import annotations

EXAMPLE_A = [
    {"FnStart": "add_mul"},
    {"Dup": 1},
    {"Dup": 1},
    "Add",
    {"Dup": 0},
    {"Dup": 3},
    "Mul",
    {"Swap": 3},
    {"Pop": 3},
    "Return",
    "FnEnd",
]

EXAMPLE_B = [
    {"FnStart": "demo"},
    {"Dup": 0},
    {"Push": 0},
    "Eq",
    {
        "IfElse": {
            "then_body": [{"Push": 10}, {"WriteIo": 1}],
            "else_body": [{"Dup": 0}, {"IfOnly": {"then_body": [{"Push": 99}, {"WriteIo": 1}]}}],
        }
    },
    {"Dup": 0},
    {"Call": "loop__1"},
    {"Pop": 1},
    {"Loop": {"label": "loop__1", "body": [{"Hint": 1}, {"WriteIo": 1}]}},
    {"Pop": 1},
    "Return",
    "FnEnd",
]
