"""Errors of the store: a record that does not exist, or a change that conflicts with the
records' state. The service maps them to 404 and 409 (`service/errors.py`)."""

from __future__ import annotations

from tasmopt.errors import TasmoptError

__all__ = ["StoreError", "NotFound", "Conflict", "InvalidCheckpoint"]


class StoreError(TasmoptError):
    """Root of the store's errors."""


class NotFound(StoreError):
    """The record asked for does not exist (e.g. an unknown checkpoint version)."""


class Conflict(StoreError):
    """The change contradicts the stored state (promoting a rejected checkpoint, rolling back
    with no previous production, registering a version twice with different weights)."""


class InvalidCheckpoint(StoreError):
    """A checkpoint directory without ``config.json``/``model.safetensors``, or whose
    ``config.json`` has no ``version``."""
