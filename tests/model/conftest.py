"""Fixtures for the model tests: small real blocks (from ``examples/``)."""

from __future__ import annotations

import pytest
from modelkit import EXAMPLES, lowered_blocks


@pytest.fixture(scope="session")
def example_blocks() -> list[tuple]:
    blocks = []
    for p in sorted(EXAMPLES.glob("*.json")):
        blocks.extend(lowered_blocks(p))
    return blocks
