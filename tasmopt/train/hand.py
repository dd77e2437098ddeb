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
baseline's). Scratch cells private to the function's call closure (its spill slots,
`tasmopt.optimizer.contract.private_by_function`) are not observable, as for the optimizer.
`tasmopt.vm.equivalence.check_function` then runs both on 16 conclusive
witnesses of each of several seeds (48 in all by default). A hand version passes when, on
every seed, it is equivalent, takes strictly fewer cycles (max over the witnesses on which the
baseline halts) and builds no taller acceptance table (`no_taller`), and when the witnesses of
the measurement seed exercised it (at least one run halted). The reported cycles are those of
the measurement seed, the witnesses the optimizer itself measures functions on.

``python -m tasmopt.train.hand`` verifies every hand version, prints a table and writes
``corpus/hand/results.json`` (``{"<module>:<function>": {"cycles", "baseline_cycles",
"reduction", "heights", ...}}``, read by ``benchmarks/search.py``; written only when every
version passes); ``--check`` verifies without writing and exits non-zero if a version fails
or the file is stale; ``--only SUBSTR`` checks some versions (and never writes).
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
from tasmopt.isa import IsaVariant
from tasmopt.lower.triton import lower
from tasmopt.module import ModuleText, label_lines
from tasmopt.optimizer.contract import private_by_function
from tasmopt.report import CompileOptions
from tasmopt.vm.equivalence import ACCEPTANCE_TABLES, check_function, no_taller, padded_height

__all__ = [
    "HandVersion",
    "HandResult",
    "ROOT",
    "HAND_DIR",
    "DEFAULT_SEEDS",
    "MEASURE_SEED",
    "WITNESSES",
    "discover",
    "module_path",
    "module_text",
    "verify",
    "verify_all",
    "results_json",
    "holdout_modules",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"
HAND_DIR = CORPUS / "hand"
ISA: IsaVariant = "release"
#: The optimizer measures a whole function with ``check_function(reference, candidate,
#: seed=options.seed + 2, witnesses=options.witnesses)`` (`tasmopt.optimizer`); with the
#: default `CompileOptions` that is seed 2 and 16 witnesses. ``cycles`` in results.json is
#: measured on exactly those witnesses, so benchmarks/search.py compares like with like
#: (for loops the cycle count is the max over the witnesses, so the seed matters).
MEASURE_SEED = CompileOptions().seed + 2
WITNESSES = CompileOptions().witnesses
#: Verification seeds, the measurement seed first; each contributes `WITNESSES`
#: conclusive witnesses (48 in all by default).
DEFAULT_SEEDS = (MEASURE_SEED, 0, 1)

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
    """Verification of one `HandVersion`.

    ``cycles``, ``baseline_cycles``, ``reduction`` and the heights are measured on the
    first seed (`MEASURE_SEED`, the optimizer's witnesses); ``cycles_max`` and
    ``baseline_cycles_max`` are the max over all seeds; ``witnesses`` and ``halted`` count
    the conclusive and the halting witnesses of all seeds; ``per_seed`` has the details;
    ``lines`` and ``baseline_lines`` count the non-blank, non-comment lines (labels included)
    of the hand text and of the compiler's sections of the function.
    """

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
    cycles_max: int = 0
    baseline_cycles_max: int = 0
    seeds: list[int] = field(default_factory=list)
    witnesses: int = 0
    halted: int = 0
    per_seed: list[dict] = field(default_factory=list)
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


@functools.cache
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
    others = {
        lab
        for name in mod.functions
        if name != hv.function
        for lab in label_lines(mod.section_lines(name))
    }
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


def verify(
    hv: HandVersion,
    *,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    witnesses: int = WITNESSES,
    corpus: Path = CORPUS,
) -> HandResult:
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
    res.baseline_lines = sum(
        1 for ln in mod.section_lines(hv.function) if _COMMENT.sub("", ln).strip()
    )
    res.lines = sum(1 for ln in hv.lines if _COMMENT.sub("", ln).strip())
    try:
        base = mod.harness(hv.function, ISA)
        cand = mod.harness(hv.function, ISA, override={hv.function: list(hv.lines)})
    except TasmSyntaxError as exc:
        res.problems.append(f"does not parse: {exc}")
        return res
    # the optimizer's contract (design §2): scratch cells private to the function's call
    # closure (its spill slots) are not observable, so the hand version need not write them
    private = private_by_function(mod, None, ISA).get(hv.function, frozenset())
    for i, seed in enumerate(seeds):
        v = check_function(base, cand, seed=seed, witnesses=witnesses, private_cells=private)
        res.witnesses += v.conclusive
        res.halted += v.halted
        res.per_seed.append(
            {
                "seed": seed,
                "cycles": v.cycles,
                "baseline_cycles": v.baseline_cycles,
                "witnesses": v.conclusive,
                "halted": v.halted,
            }
        )
        if not v.equivalent:
            res.problems.append(f"seed {seed}: not equivalent: {v.reason}")
            continue
        if i == 0:
            res.cycles, res.baseline_cycles = v.cycles, v.baseline_cycles
            res.heights, res.baseline_heights = dict(v.heights), dict(v.baseline_heights)
        res.cycles_max = max(res.cycles_max, v.cycles)
        res.baseline_cycles_max = max(res.baseline_cycles_max, v.baseline_cycles)
        if v.halted and v.cycles >= v.baseline_cycles:
            res.problems.append(
                f"seed {seed}: {v.cycles} cycles, baseline {v.baseline_cycles}: not fewer"
            )
        if not no_taller(v.heights, v.baseline_heights):
            taller = sorted(
                k for k in ACCEPTANCE_TABLES if v.heights.get(k, 0) > v.baseline_heights.get(k, 0)
            )
            res.problems.append(f"seed {seed}: taller tables: {', '.join(taller) or 'padded'}")
    if res.problems:
        return res
    res.padded_height = padded_height(res.heights)
    res.baseline_padded_height = padded_height(res.baseline_heights)
    if res.per_seed[0]["halted"] == 0:
        res.problems.append(f"no witness of seed {seeds[0]} halted: nothing was measured")
    if res.baseline_cycles:
        res.reduction = round(1 - res.cycles / res.baseline_cycles, 4)
    res.ok = not res.problems
    return res


def verify_all(versions: Iterable[HandVersion], **kwargs) -> list[HandResult]:
    """`verify` each version (keyword arguments as for `verify`)."""
    return [verify(hv, **kwargs) for hv in versions]


def linked_lines(hv: HandVersion) -> list[str]:
    """The hand text as it appears in a linked program: labels and calls ``__x`` of the
    module become ``__<module_prefix>__x`` (as `tasmopt.frontend.link` names them)."""
    prefix = hv.module.replace(".", "_") + "__"
    return [
        re.sub(r"(?<![\w@])__(?=\w)", "__" + prefix, line, count=1)
        if line.strip() and not line.lstrip().startswith("//")
        else line
        for line in hv.lines
    ]


def spliced_program(
    program: str | Path, versions: Sequence[HandVersion] | None = None, corpus: Path = CORPUS
) -> tuple[str, list[str]]:
    """A corpus program (``.tri``) linked and lowered as usual, with every hand version of
    a function it contains in place of the compiler's code.

    Returns:
        (TASM text, keys of the hand versions spliced in).
    """
    from tasmopt.frontend import link

    ops = link(compile_modules(program, [corpus]))
    mod = ModuleText.from_lowering(lower(ops, isa=ISA))
    replace: dict[int, list[str]] = {}
    skip: set[int] = set()
    used = []
    for hv in versions if versions is not None else discover():
        name = hv.module.replace(".", "_") + "__" + hv.function
        fn = mod.functions.get(name)
        if fn is None:
            continue
        used.append(hv.key)
        replace[fn.sections[0][0]] = linked_lines(hv) + [""]
        skip |= {i for a, b in fn.sections for i in range(a, b)}
    out: list[str] = []
    for i, line in enumerate(mod.lines):
        if i in replace:
            out.extend(replace[i])
        if i not in skip:
            out.append(line)
    return "\n".join(out), used


def results_json(results: Sequence[HandResult]) -> dict:
    """``results.json`` content for the passing results, sorted by key."""
    return {r.key: r.record() for r in sorted(results, key=lambda r: r.key) if r.ok}


def _table(results: Sequence[HandResult], holdout: set[str]) -> str:
    rows = [f"{'module:function':40s} {'base':>7s} {'hand':>7s} {'saved':>7s} {'halted':>7s}  "]
    for r in results:
        flag = " (holdout)" if r.module in holdout else ""
        if r.ok:
            rows.append(
                f"{r.key:40s} {r.baseline_cycles:7d} {r.cycles:7d} {r.reduction:7.1%} "
                f"{r.halted:3d}/{r.witnesses:<3d}{flag}"
            )
        else:
            rows.append(f"{r.key:40s} FAILED: {'; '.join(r.problems)}{flag}")
    good = [r.reduction for r in results if r.ok]
    if good:
        mods = {r.module for r in results if r.ok}
        rows.append(
            f"{len(good)} of {len(results)} verified, {len(mods)} modules, "
            f"{sum(r.module in holdout for r in results if r.ok)} from holdout; "
            f"median reduction {statistics.median(good):.1%}, "
            f"mean {statistics.mean(good):.1%}"
        )
    return "\n".join(rows)


def holdout_modules(corpus: Path = CORPUS) -> set[str]:
    """The module names listed in ``corpus/holdout.txt``."""
    path = corpus / "holdout.txt"
    if not path.exists():
        return set()
    return {
        ln.strip() for ln in path.read_text().split("\n") if ln.strip() and not ln.startswith("#")
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tasmopt.train.hand",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="verify only; fail if a version fails or results.json is stale",
    )
    ap.add_argument(
        "--only",
        metavar="SUBSTR",
        action="append",
        default=[],
        help="only keys containing SUBSTR (repeatable; implies no write)",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    ap.add_argument("--witnesses", type=int, default=WITNESSES, help="per seed")
    ap.add_argument("--hand-dir", type=Path, default=HAND_DIR)
    args = ap.parse_args(argv)
    versions = discover(args.hand_dir)
    if args.only:
        versions = [hv for hv in versions if any(s in hv.key for s in args.only)]
    results = verify_all(versions, seeds=args.seeds, witnesses=args.witnesses)
    print(_table(results, holdout_modules()))
    failed = [r for r in results if not r.ok]
    out = args.hand_dir / "results.json"
    content = json.dumps(results_json(results), indent=1, sort_keys=True) + "\n"
    if args.check:
        if not args.only and (not out.exists() or out.read_text() != content):
            print(f"{out} is stale: run python -m tasmopt.train.hand", file=sys.stderr)
            return 1
    elif not args.only and not failed:
        out.write_text(content)
        print(f"wrote {out}")
    elif not args.only:
        print(f"{len(failed)} version(s) failed: {out} left as it was", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
