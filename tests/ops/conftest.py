"""Ops fixtures: `make_stack` (see `opskit.Stack`); every process is stopped after its test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from opskit import ADMIN_TOKEN, Stack


@pytest.fixture()
def make_stack(tmp_path) -> Iterator:
    """``make(database_url, redis_url=None, **env) -> Stack``; everything stopped after."""
    stacks: list[Stack] = []

    def make(database_url: str, redis_url: str | None = None, **env: str) -> Stack:
        logs = tmp_path / f"logs{len(stacks)}"
        logs.mkdir()
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DATABASE_", "REDIS_", "ADMIN_", "SPOOL_", "MODEL_"))
        }
        full = {
            **base,
            "DATABASE_URL": database_url,
            "ADMIN_TOKEN": ADMIN_TOKEN,
            "SPOOL_DIR": str(tmp_path / "spool"),
            "MODEL_STORE": str(tmp_path / "store"),
            "SPOOL_RETRY_S": "0.5",
            "MODEL_POLL_S": "0.5",
            "LOG_LEVEL": "WARNING",
            **env,
        }
        if redis_url:
            full["REDIS_URL"] = redis_url
        stack = Stack(env=full, logs=logs)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop_all()


@pytest.fixture(scope="session")
def timelock_request() -> dict:
    """examples/lock_timelock.json: a request with a verified saving."""
    import json

    from opskit import REPO

    return json.loads((REPO / "examples" / "lock_timelock.json").read_text())
