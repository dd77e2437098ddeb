"""Trident IR: ops, JSON codec, validation, stack effects, blocks (spec/tir.md)."""
