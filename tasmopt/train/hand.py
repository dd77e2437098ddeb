"""Hand-optimized TASM for corpus functions: the first "better than the compiler" targets.

``corpus/hand/<module>/<function>.tasm`` holds one function as it should appear in its
module's TASM: the label line ``__<function>:``, the body, ``return``, and any subroutines the
function needs (its own loop and branch blocks, under labels unique to the function, e.g.
``__<function>__loop``). ``<module>`` is the dotted module name of the ``.tri`` header
(``field.inverse`` -> ``corpus/field/inverse.tri``).

Each hand version is checked against the compiler's output: the module is compiled with the
frontend (`tasmopt.frontend.compile_modules`) and lowered (`tasmopt.lower.triton.lower`);
baseline and hand harnesses come from `tasmopt.module.ModuleText.harness` (the hand text
overrides the function's own lines; callees of the same module keep their baseline code,
calls into other modules stay opaque, so the op stack at each of them must be the
baseline's). `tasmopt.vm.equivalence.check_function` then runs both on the witnesses of
several seeds. A hand version passes when every seed is equivalent, its cycles (max over the
witnesses on which the baseline halts) are strictly fewer than the baseline's, no acceptance
table is taller (`no_taller`), and the witnesses exercised it (at least one halting run).

``python -m tasmopt.train.hand`` verifies every hand version, prints a table and writes
``corpus/hand/results.json`` (``{"<module>:<function>": {"cycles", "baseline_cycles",
"reduction", "heights", ...}}``, read by ``benchmarks/search.py``); ``--check`` verifies
without writing and exits non-zero if a version fails or the file is stale.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tasmopt.errors import TasmSyntaxError
from tasmopt.frontend import compile_modules
from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText, label_lines
from tasmopt.vm.equivalence import ACCEPTANCE_TABLES, check_function, no_taller, padded_height

__all__ = ["HandVersion", "HandResult", "ROOT", "HAND_DIR", "DEFAULT_SEEDS", "WITNESSES",
           "discover", "module_path", "module_text", "verify", "verify_all", "results_json",
           "main"]

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"
HAND_DIR = CORPUS / "hand"
#: Witness seeds; each contributes `WITNESSES` conclusive witnesses (32 in all by default).
DEFAULT_SEEDS = (0, 1)
WITNESSES = 16
ISA = "release"

_CALL = re.compile(r"^\s*call\s+(\S+)")
_COMMENT = re.compile(r"//.*$")


@dataclass(frozen=True)
class HandVersion:
    """One hand-written function: ``corpus/hand/<module>/<function>.tasm``."""

    module: str
    function: str
    path: Path
    lines: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.module}:{self.function}"


@dataclass
class HandResult:
    """Verification of one `HandVersion` (cycles and heights: max over all seeds)."""

    key: str
    module: str
    function: str
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    cycles: int = 0
    baseline_cycles: int = 0
    reduction: float = 0.0
    heights: dict[str, int] = field(default_factory=dict)
    baseline_heights: dict[str, int] = field(default_factory=dict)
    padded_height: int = 0
    baseline_padded_height: int = 0
    seeds: list[int] = field(default_factory=list)
    witnesses: int = 0
    halted: int = 0
    lines: int = 0
    baseline_lines: int = 0

    def record(self) -> dict:
        """The entry of ``results.json``."""
        d = asdict(self)
        for k in ("key", "module", "function", "ok", "problems"):
            d.pop(k)
        return d


def module_path(module: str, corpus: Path = CORPUS) -> Path:
    """``field.inverse`` -> ``corpus/field/inverse.tri``."""
    return corpus.joinpath(*module.split(".")).with_suffix(".tri")


def discover(hand_dir: Path = HAND_DIR) -> list[HandVersion]:
    """Every ``<module>/<function>.tasm`` under ``hand_dir``, sorted by key."""
    out = []
    for path in sorted(hand_dir.glob("*/*.tasm")):
        lines = tuple(path.read_text().rstrip("\n").split("\n"))
        out.append(HandVersion(path.parent.name, path.stem, path, lines))
    return out


@functools.lru_cache(maxsize=None)
def module_text(module: str, corpus: Path = CORPUS) -> ModuleText:
    """The module's own functions, compiled by the frontend and lowered (the baseline)."""
    mods = compile_modules(module_path(module, corpus), [corpus])
    own = mods[-1]
    if own.name != module:
        raise ValueError(f"{module_path(module, corpus)} declares {own.name}, not {module}")
    return ModuleText.from_lowering(lower(own.ops, isa=ISA))


def _static_problems(hv: HandVersion, mod: ModuleText) -> list[str]:
    """Shape checks the simulator would not catch (a mistyped label becomes an opaque
    external call, not an error)."""
    fn = mod.functions.get(hv.function)
    if fn is None:
        return [f"module {hv.module} has no function {hv.function}"]
    labels = label_lines(hv.lines)
    if not labels or labels[0] != fn.label:
        return [f"the first label must be {fn.label}:"]
    problems = []
    others = {lab for name in mod.functions if name != hv.function
              for lab in label_lines(mod.section_lines(name))}
    clash = sorted(set(labels) & others)
    if clash:
        problems.append(f"labels also defined elsewhere in the module: {', '.join(clash)}")
    if len(set(labels)) != len(labels):
        problems.append("duplicate labels")
    known = set(labels) | {f.label for f in mod.functions.values()}
    for line in hv.lines:
        m = _CALL.match(_COMMENT.sub("", line))
        if m and not m.group(1).startswith("@") and m.group(1) not in known:
            problems.append(f"call to undefined label {m.group(1)}")
    return problems


def verify(hv: HandVersion, *, seeds: Sequence[int] = DEFAULT_SEEDS,
           witnesses: int = WITNESSES, corpus: Path = CORPUS) -> HandResult:
    """Check one hand version against the baseline on every seed (see the module doc)."""
    res = HandResult(hv.key, hv.module, hv.function, seeds=list(seeds))
    try:
        mod = module_text(hv.module, corpus)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        res.problems.append(f"module does not compile: {exc}")
        return res
    res.problems += _static_problems(hv, mod)
    if res.problems:
        return res
    res.baseline_lines = sum(1 for ln in mod.section_lines(hv.function) if ln.strip())
    res.lines = sum(1 for ln in hv.lines if _COMMENT.sub("", ln).strip())
    try:
        base = mod.harness(hv.function, ISA)
        cand = mod.harness(hv.function, ISA, override={hv.function: list(hv.lines)})
    except TasmSyntaxError as exc:
        res.problems.append(f"does not parse: {exc}")
        return res
    for seed in seeds:
        v = check_function(base, cand, seed=seed, witnesses=witnesses)
        res.witnesses += v.conclusive
        res.halted += v.halted
        if not v.equivalent:
            res.problems.append(f"seed {seed}: not equivalent: {v.reason}")
            continue
        res.cycles = max(res.cycles, v.cycles)
        res.baseline_cycles = max(res.baseline_cycles, v.baseline_cycles)
        for acc, hs in ((res.heights, v.heights), (res.baseline_heights, v.baseline_heights)):
            for k, h in hs.items():
                acc[k] = max(acc.get(k, 0), h)
        if not no_taller(v.heights, v.baseline_heights):
            taller = sorted(k for k in ACCEPTANCE_TABLES
                            if v.heights.get(k, 0) > v.baseline_heights.get(k, 0))
            res.problems.append(f"seed {seed}: taller tables: {', '.join(taller) or 'padded'}")
    if res.problems:
        return res
    res.padded_height = padded_height(res.heights)
    res.baseline_padded_height = padded_height(res.baseline_heights)
    if res.halted == 0:
        res.problems.append("no witness halted: the function was never run to the end")
    if res.cycles >= res.baseline_cycles:
        res.problems.append(f"{res.cycles} cycles, baseline {res.baseline_cycles}: not fewer")
    if res.baseline_cycles:
        res.reduction = round(1 - res.cycles / res.baseline_cycles, 4)
    res.ok = not res.problems
    return res


def verify_all(versions: Iterable[HandVersion], **kwargs) -> list[HandResult]:
    return [verify(hv, **kwargs) for hv in versions]


def results_json(results: Sequence[HandResult]) -> dict:
    """``results.json`` content for the passing results, sorted by key."""
    return {r.key: r.record() for r in sorted(results, key=lambda r: r.key) if r.ok}


def _table(results: Sequence[HandResult], holdout: set[str]) -> str:
    rows = [f"{'module:function':40s} {'base':>7s} {'hand':>7s} {'saved':>7s} {'halted':>7s}  "]
    for r in results:
        flag = " (holdout)" if r.module in holdout else ""
        if r.ok:
            rows.append(f"{r.key:40s} {r.baseline_cycles:7d} {r.cycles:7d} {r.reduction:7.1%} "
                        f"{r.halted:3d}/{r.witnesses:<3d}{flag}")
        else:
            rows.append(f"{r.key:40s} FAILED: {'; '.join(r.problems)}{flag}")
    good = [r.reduction for r in results if r.ok]
    if good:
        mods = {r.module for r in results if r.ok}
        rows.append(f"{len(good)} of {len(results)} verified, {len(mods)} modules, "
                    f"{sum(r.module in holdout for r in results if r.ok)} from holdout; "
                    f"median reduction {statistics.median(good):.1%}, "
                    f"mean {statistics.mean(good):.1%}")
    return "\n".join(rows)


def _holdout(corpus: Path = CORPUS) -> set[str]:
    path = corpus / "holdout.txt"
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text().split("\n")
            if ln.strip() and not ln.startswith("#")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tasmopt.train.hand", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="verify only; fail if a version fails or results.json is stale")
    ap.add_argument("--only", metavar="SUBSTR", action="append", default=[],
                    help="only keys containing SUBSTR (repeatable; implies no write)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    ap.add_argument("--witnesses", type=int, default=WITNESSES, help="per seed")
    ap.add_argument("--hand-dir", type=Path, default=HAND_DIR)
    args = ap.parse_args(argv)
    versions = discover(args.hand_dir)
    if args.only:
        versions = [hv for hv in versions if any(s in hv.key for s in args.only)]
    results = verify_all(versions, seeds=args.seeds, witnesses=args.witnesses)
    print(_table(results, _holdout()))
    failed = [r for r in results if not r.ok]
    out = args.hand_dir / "results.json"
    content = json.dumps(results_json(results), indent=1, sort_keys=True) + "\n"
    if args.check:
        if not args.only and (not out.exists() or out.read_text() != content):
            print(f"{out} is stale: run python -m tasmopt.train.hand", file=sys.stderr)
            return 1
    elif not args.only:
        out.write_text(content)
        print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
