"""TIR -> TASM lowering (spec/tir.md §3)."""
