"""The baseline served when the optimizer fails: the client's TASM, else our lowering."""

from __future__ import annotations

from typing import Any

from tasmopt.tir.codec import decode

__all__ = ["baseline_tasm"]


def baseline_tasm(tir: list[Any], client_tasm: str | None) -> str:
    """The TASM to serve unchanged.

    Raises:
        TirError: the TIR itself is bad (then the request is a 4xx after all).
    """
    if client_tasm is not None:
        return client_tasm
    from tasmopt.lower.triton import lower

    return lower(decode(tir)).text()
