"""Keys of the per-function result cache (design §1): what a function's answer depends on.

A cached answer is reused only where everything that decides its meaning and its proof is the
same: the function's TIR and its callees' (its call closure), the text our lowering gives that
closure (labels included: the cached lines are spliced into it), the client's text of the same
closure when it sent a baseline (the program the answer was proven against), the ISA variant,
the number of witnesses, the verifier's version (`tasmopt.vm.equivalence.VERIFIER_VERSION`),
and the scratch cells the proofs treated as private (`tasmopt.optimizer.contract`: privacy
depends on the whole request, so a request where a cell is not private gets another key).
Anything else in the request (other functions, options such as the seed) does not enter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from tasmopt.lower.blocks import split_functions
from tasmopt.lower.triton import Lowering
from tasmopt.module import ModuleText
from tasmopt.optimizer.contract import private_by_function
from tasmopt.report import CompileOptions
from tasmopt.tir.codec import tir_hash
from tasmopt.tir.ops import Op
from tasmopt.vm.equivalence import VERIFIER_VERSION

__all__ = ["KEY_FORMAT", "function_keys"]

#: Version of the key's layout; bump when the payload below changes.
KEY_FORMAT = 2


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def function_keys(
    ops: Sequence[Op],
    low: Lowering,
    ours: ModuleText,
    client: ModuleText | None,
    options: CompileOptions,
    private: dict[str, frozenset[int]] | None = None,
) -> dict[str, str]:
    """Cache key (64 hex digits) of every function whose answer may be cached.

    Functions whose TIR cannot be lowered, or that the client's baseline lacks, get no key
    (they are passed through, which costs nothing to redo).
    """
    chunk_hash = {c.name: tir_hash(c.ops) for c in split_functions(ops)}
    if private is None:
        private = private_by_function(ours, client, options.isa)
    keys: dict[str, str] = {}
    for lf in low.functions:
        if not lf.name or lf.unlowerable or lf.name not in ours.functions:
            continue
        if client is not None and lf.name not in client.functions:
            continue
        closure = ours.closure(lf.name)
        our_text, _ = ours.closure_text(lf.name)
        client_text = client.closure_text(lf.name)[0] if client is not None else None
        payload = {
            "format": KEY_FORMAT,
            "verifier": VERIFIER_VERSION,
            "isa": options.isa,
            "witnesses": options.witnesses,
            "function": lf.name,
            "tir": {n: chunk_hash.get(n, "") for n in closure},
            "ours": _sha(our_text),
            "client": None if client_text is None else _sha(client_text),
            "private": sorted(private.get(lf.name, ())),
        }
        if options.rewrite_mismatched:  # a mismatched function's answer differs (opt-in)
            payload["rewrite_mismatched"] = True
        keys[lf.name] = _sha(json.dumps(payload, sort_keys=True))
    return keys
