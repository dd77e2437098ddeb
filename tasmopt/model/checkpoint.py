"""Checkpoints on disk: ``model_store/<version>/`` with ``model.safetensors`` (weights, no
pickles), ``config.json`` (version, model hyper-parameters, vocabulary fingerprint) and
``metrics.json`` (training and evaluation figures). Loadable on CPU or CUDA (design §3).
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from tasmopt.errors import TasmoptError
from tasmopt.model.config import ModelConfig
from tasmopt.model.model import TasmModel
from tasmopt.model.vocab import vocab

__all__ = [
    "CheckpointError",
    "WEIGHTS",
    "CONFIG",
    "METRICS",
    "save_checkpoint",
    "read_config",
    "read_metrics",
    "load_model",
    "for_inference",
    "Precision",
]

log = logging.getLogger(__name__)

WEIGHTS, CONFIG, METRICS = "model.safetensors", "config.json", "metrics.json"


class CheckpointError(TasmoptError):
    """A checkpoint directory that is missing, incomplete or made for another vocabulary."""


def save_checkpoint(
    model: TasmModel,
    directory: Path | str,
    version: str,
    *,
    metrics: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` to ``directory`` (created if needed).

    Args:
        version: the checkpoint's version string (e.g. ``"s1-20261122-0400"``).
        metrics: written to ``metrics.json`` if given.
        extra: more keys for ``config.json`` (e.g. the training data manifest).

    Returns:
        the directory.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / WEIGHTS), metadata={"version": version})
    voc = model.vocab
    config = {
        "version": version,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": model.config.to_dict(),
        "parameters": model.num_parameters(),
        "vocab": {"isa": voc.isa, "size": len(voc), "fingerprint": voc.fingerprint},
        **(extra or {}),
    }
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    if metrics is not None:
        (out / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    return out


def read_config(checkpoint_dir: Path | str) -> dict[str, Any]:
    """The checkpoint's ``config.json`` (always has ``version`` and ``model``).

    Raises:
        CheckpointError: missing or malformed file.
    """
    path = Path(checkpoint_dir) / CONFIG
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint config") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: malformed JSON: {exc}") from None
    if not isinstance(config, dict) or "version" not in config or "model" not in config:
        raise CheckpointError(f"{path}: config lacks 'version' or 'model'")
    return config


def read_metrics(checkpoint_dir: Path | str) -> dict[str, Any]:
    """The checkpoint's ``metrics.json``, or ``{}`` if it has none."""
    path = Path(checkpoint_dir) / METRICS
    return json.loads(path.read_text()) if path.exists() else {}


def load_model(checkpoint_dir: Path | str, device: str | torch.device = "cpu") -> TasmModel:
    """Load a checkpoint onto ``device`` in eval mode.

    Raises:
        CheckpointError: missing files, a vocabulary that differs from this code's (the
            ISA table changed since training), or weights that do not fit the config.
    """
    directory = Path(checkpoint_dir)
    config = read_config(directory)
    mc = ModelConfig.from_dict(config["model"])
    voc = vocab(mc.isa)
    want = config.get("vocab", {}).get("fingerprint")
    if want is not None and want != voc.fingerprint:
        raise CheckpointError(
            f"{directory}: trained with another vocabulary "
            f"({config['vocab'].get('size')} tokens); retrain or use the "
            "code version it was made with"
        )
    if not (directory / WEIGHTS).exists():
        raise CheckpointError(f"{directory / WEIGHTS}: missing")
    model = TasmModel(mc)
    state = load_file(str(directory / WEIGHTS), device="cpu")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{directory}: weights do not fit the config (missing "
            f"{missing[:3]}, unexpected {unexpected[:3]})"
        )
    model.to(device)
    model.eval()
    log.info(
        "loaded checkpoint %s (%d parameters) on %s",
        config["version"],
        model.num_parameters(),
        device,
    )
    return model


#: Weight precisions the model can decode in (`for_inference`).
Precision = Literal["float32", "int8"]


def for_inference(model: TasmModel, precision: Precision = "float32") -> TasmModel:
    """The model to decode with at ``precision``: ``float32`` as is; ``int8`` with every
    ``nn.Linear`` dynamically quantized (int8 weights, activations quantized per batch;
    PyTorch's ``quantize_dynamic``, CPU only). On 2 CPU cores int8 decodes the 30 real modules
    about 1.6x faster greedily, and its candidates differ from float32's on 23 of their 1,004
    blocks (`benchmarks/model.py --per-module --k 1 --precision float32 int8`).

    Raises:
        ValueError: an unknown precision, or int8 on a non-CPU device.
    """
    if precision == "float32":
        return model
    if precision != "int8":
        raise ValueError(f"unknown precision {precision!r} (float32 or int8)")
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 decoding is CPU-only; use float32 on a GPU")
    with warnings.catch_warnings():  # the per-tensor quantizer's deprecation notice
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    return quantized.eval()
