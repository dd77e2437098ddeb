"""The ``tasmopt`` command: serve the API, compile a file, run TASM in the simulator, run an RQ
worker or the scheduler, register checkpoints.

Output on stdout is the command's product (TASM, a run report); diagnostics go to stderr.
The service and the worker are imported only inside their commands, so the core library
never depends on them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import click

from tasmopt.errors import TasmoptError, TasmSyntaxError, TirError
from tasmopt.report import CompileOptions, CompileResult

__all__ = ["main"]

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _spill_option(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--spill``: the frontend's spill policy past 16 live elements (`tasmopt.frontend`)."""
    return click.option(
        "--spill",
        type=click.Choice(["lru", "next-use"]),
        default=default,
        show_default=True,
        help="Trident source: upstream's stack shape (lru) or our stack allocator (next-use).",
    )


@click.group(
    context_settings=_CONTEXT,
    epilog="""\b
Examples:
  tasmopt serve                                  # API on http://127.0.0.1:8000 (docs: /docs)
  tasmopt compile examples/lock_generation.json  # TASM + cost table
  tasmopt compile prog.tri -I lib                # Trident source: frontend, then optimizer
  tasmopt tir prog.tri -I lib                    # Trident source to TIR JSON
  tasmopt run prog.tasm --input 3,4              # simulate, print outputs and table heights
  tasmopt worker                                 # RQ worker for REDIS_URL
  tasmopt scheduler                              # RQ cron: the finetune check
  tasmopt checkpoint register model_store/v3 --promote --reason "..."
""",
)
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-v info, -vv debug).")
def main(verbose: int) -> None:
    """tasmopt: cheaper Triton VM assembly (TASM) for Trident IR, proven equivalent."""
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


# -- serve ------------------------------------------------------------------------------------


@main.command(
    epilog="""\b
Examples:
  tasmopt serve                          # embedded: SQLite in var/, verification in-process
  DATABASE_URL=postgresql://postgres@127.0.0.1/tasmopt REDIS_URL=redis://127.0.0.1:6379/0 \\
    tasmopt serve --host 0.0.0.0 --port 8080
  curl -s localhost:8000/compile -H 'content-type: application/json' \\
    -d @examples/lock_generation.json

Configuration comes from the environment (see README): DATABASE_URL, REDIS_URL, ...
The schema is migrated (alembic upgrade head) at start-up.
"""
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="TCP port.")
@click.option("--reload", is_flag=True, help="Restart on code changes (development).")
def serve(host: str, port: int, reload: bool) -> None:
    """Start the HTTP API (POST /compile, GET /healthz, /readyz, /docs)."""
    import uvicorn

    uvicorn.run("service.main:create_app", factory=True, host=host, port=port, reload=reload)


# -- compile ----------------------------------------------------------------------------------


def _load_request(
    path: Path, baseline: Path | None, ours: bool
) -> tuple[list[Any], str | None, dict[str, Any]]:
    """(tir, baseline_tasm, options) from a request file, a bare TIR array or a module file."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise click.ClickException(
            f"{path}:{exc.lineno}:{exc.colno}: malformed JSON: {exc.msg}"
        ) from None
    options: dict[str, Any] = {}
    if isinstance(obj, list):
        tir, base = obj, None
    elif isinstance(obj, dict) and "tir" in obj:
        tir = obj["tir"]
        base = obj.get("baseline_tasm", obj.get("compiler_tasm"))
        options = obj.get("options") or {}
    else:
        raise click.ClickException(
            f'{path}: expected a request {{"tir": [...], "baseline_tasm"?, "options"?}}, '
            'a TIR array, or a module file with "tir" and "compiler_tasm"'
        )
    if baseline is not None:
        base = baseline.read_text(encoding="utf-8")
    if ours:
        base = None
    return tir, base, options


def _options(given: dict[str, Any], **flags: Any) -> CompileOptions:
    known = {f.name for f in fields(CompileOptions)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise click.ClickException(f"unknown option(s) {unknown}; known: {sorted(known)}")
    merged = {**given, **{k: v for k, v in flags.items() if v is not None}}
    if "sources" in merged:
        merged["sources"] = tuple(merged["sources"])
    return replace(CompileOptions(), **merged)


def cost_table(result: CompileResult) -> list[str]:
    """One line per function (and a total), as TASM comments so the output stays valid TASM."""
    head = ("function", "source", "baseline", "cycles", "saved", "padded height")
    rows = [head]
    for f in result.functions:
        if not f.measured:  # no figures rather than zeros that read as measurements
            rows.append((f.name, f.source, "-", "-", "not measured", ""))
            continue
        rows.append(
            (
                f.name,
                f.source,
                str(f.baseline_cycles),
                str(f.cycles),
                f"{100 * f.cycle_reduction:.1f}%",
                f"{f.baseline_padded_height} -> {f.padded_height}",
            )
        )
    total = result.baseline_cycles
    saved = (total - result.cycles) / total if total else 0.0
    label = f"total ({result.unmeasured} not measured)" if result.unmeasured else "total"
    rows.append((label, "", str(total), str(result.cycles), f"{100 * saved:.1f}%", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    notes = [f"{f.name}: {f.reason}" for f in result.functions if f.reason]
    notes += [
        f"{f.name}: client baseline disagrees with our lowering: {f.mismatch.cause}"
        for f in result.functions
        if f.mismatch
    ]
    return ["// " + line for line in lines + notes]


@main.command(
    "compile",
    epilog="""\b
FILE.tri is Trident source: the frontend compiles it and its imports (-I adds library
roots) and the linked TIR is optimized with our own lowering as the baseline. The frontend's
stack allocator (--spill next-use, the default here) takes values where they are at their
last read, splits struct variables into fields, updates them in place and spills the value
used furthest ahead, five words per RAM round trip; --spill lru is upstream's shape.
FILE.json is one of:
  a request     {"tir": [...], "baseline_tasm": "...", "options": {"seed": 1}}
  a TIR array   [{"FnStart": "f"}, {"Push": 1}, "Return", "FnEnd"]
  a module file from trident-std ({"tir": [...], "compiler_tasm": "..."}); its
                compiler_tasm is the baseline, as if the toolchain had sent it
\b
Examples:
  tasmopt compile examples/lock_generation.json
  tasmopt compile prog.json --baseline prog.tasm -o prog.opt.tasm
  tasmopt compile corpus/hash/sponge.tri -I corpus --deadline-ms 2000
  tasmopt compile prog.json --json | jq '.functions[] | {name, cycles, baseline_cycles}'

Stdout is TASM followed by the cost table as // comments (still valid TASM); -o writes
the TASM to a file and prints only the table. Exit status 1 on invalid input.
""",
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-I",
    "--include",
    "include",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="FILE.tri only: a library root (holding std/, vm/, os/ or modules); repeatable.",
)
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The compiler's TASM for the same TIR (what to beat and fall back to).",
)
@_spill_option("next-use")
@click.option("--ours", is_flag=True, help="Ignore any baseline in FILE; use our own lowering.")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON instead.")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the TASM here."
)
@click.option("--isa", type=click.Choice(["release", "head"]), help="Instruction-set variant.")
@click.option("--seed", type=int, help="Witness seed (results are deterministic for a seed).")
@click.option("--witnesses", type=click.IntRange(16, 1024), help="Differential witnesses.")
@click.option("--budget", "search_budget_s", type=click.FloatRange(0), help="Search seconds.")
@click.option(
    "--inline/--no-inline",
    default=None,
    help="Function-level inlining of small callees where proven and cheaper (default: on).",
)
@click.option(
    "--rewrite-mismatched",
    is_flag=True,
    default=None,
    help="Optimize a function whose baseline disagrees with our lowering on the baseline's "
    "own text (proven equivalent to it) instead of returning it unchanged (default: off).",
)
@click.option(
    "--deadline-ms",
    type=click.IntRange(1),
    help="Answer within this many milliseconds with what is proven by then (functions cut "
    "short keep their baseline; their figures say 'not measured'). Default: no deadline.",
)
@click.option(
    "-q", "--quiet", is_flag=True, help="No progress bar (it shows only on a terminal anyway)."
)
@click.option(
    "--skip",
    "skip",
    multiple=True,
    metavar="PASS",
    help="Do not run this function-level pass (repeatable), e.g. --skip dots. An unknown "
    "name lists them all.",
)
def compile_cmd(
    file: Path,
    include: tuple[Path, ...],
    baseline: Path | None,
    ours: bool,
    as_json: bool,
    output: Path | None,
    isa: str | None,
    seed: int | None,
    witnesses: int | None,
    search_budget_s: float | None,
    inline: bool | None,
    rewrite_mismatched: bool | None,
    spill: str,
    deadline_ms: int | None,
    quiet: bool,
    skip: tuple[str, ...],
) -> None:
    """Optimize FILE.json (TIR) or FILE.tri (Trident source, through the frontend) and print
    the cheapest verified TASM with a cost table."""
    from tasmopt.optimizer import compile as compile_tir

    if file.suffix == ".tri":
        tir, base, given = _frontend_tir(file, include, linked=True, spill=spill), None, {}
    else:
        tir, base, given = _load_request(file, baseline, ours)
    opts = _options(
        given,
        isa=isa,
        seed=seed,
        witnesses=witnesses,
        search_budget_s=search_budget_s,
        inline=inline,
        rewrite_mismatched=rewrite_mismatched or None,
    )
    if skip:
        from tasmopt.optimizer import PASSES

        unknown = sorted(set(skip) - set(PASSES))
        if unknown:
            raise click.BadParameter(
                f"unknown pass {', '.join(unknown)}; one of {', '.join(PASSES)}",
                param_hint="--skip",
            )
        opts = replace(opts, skip=frozenset(skip))
    if deadline_ms is not None:
        from tasmopt.deadline import Deadline

        opts = replace(opts, deadline=Deadline(deadline_ms / 1000))
    try:
        with _progress_bar(quiet):
            result = compile_tir(tir, base, options=opts)
    except TasmSyntaxError as exc:
        where = baseline or f"{file} (baseline)"
        raise click.ClickException(f"{where}:{exc.line}:{exc.column}: {exc.reason}") from None
    except TirError as exc:
        raise click.ClickException(f"{file}: {exc}") from None
    except TasmoptError as exc:
        raise click.ClickException(f"{file}: {type(exc).__name__}: {exc}") from None
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        if output:
            output.write_text(result.tasm + "\n", encoding="utf-8")
        return
    table = "\n".join(cost_table(result))
    if output:
        output.write_text(result.tasm + "\n", encoding="utf-8")
        click.echo(table)
    else:
        click.echo(result.tasm.rstrip("\n"))
        click.echo(table)


@contextlib.contextmanager
def _progress_bar(quiet: bool) -> Iterator[None]:
    """A progress bar on stderr naming the compile's stage (`tasmopt.optimizer.progress`);
    it appears after a second, and never with ``quiet`` or when stderr is not a terminal."""
    from tasmopt.optimizer import progress

    if quiet or not sys.stderr.isatty():
        yield
        return
    from tqdm import tqdm

    bar = tqdm(desc="compile", unit=" stage", file=sys.stderr, delay=1.0, leave=False)

    def tell(name: str) -> None:
        bar.set_postfix_str(name, refresh=False)
        bar.update(1)

    try:
        with progress(tell):
            yield
    finally:
        bar.close()


# -- tir --------------------------------------------------------------------------------------


def _frontend_tir(
    file: Path, include: tuple[Path, ...], linked: bool = False, spill: str = "lru"
) -> list[Any]:
    """Wire TIR of a Trident project; frontend errors print their diagnostics and exit 1."""
    from tasmopt.errors import FrontendError
    from tasmopt.frontend import compile_modules, link
    from tasmopt.tir.codec import encode

    try:
        modules = compile_modules(file, include, spill=spill)
    except FrontendError as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    ops = link(modules) if linked else tuple(op for m in modules for op in m.ops)
    return encode(ops)


@main.command(
    epilog="""\b
Examples:
  tasmopt tir prog.tri                       # TIR JSON of prog.tri and its imports
  tasmopt tir prog.tri -I lib -I ../trident  # library roots for std./vm./os. modules
  tasmopt tir prog.tri --linked --indent 2   # labels made unique per module (runnable)

The TIR is what the Trident toolchain would send (dependencies first, module-local labels,
cross-module calls as @module__fn), built by our frontend: correct where the upstream builder
is not; --spill next-use uses our stack allocator (values taken at their last read, structs
split into fields, furthest-next-use spills; its swap chains become pick/place in the
optimizer) instead of upstream's least-recently-used shape. Errors print as file:line:col diagnostics
(exit 1).
"""
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-I",
    "--include",
    "include",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A library root (holding std/, vm/, os/ or modules); repeatable.",
)
@click.option("--linked", is_flag=True, help="Prefix labels per module (one runnable list).")
@click.option("--indent", type=int, help="Pretty-print the JSON with this indent.")
@_spill_option("lru")
def tir(
    file: Path, include: tuple[Path, ...], linked: bool, indent: int | None, spill: str
) -> None:
    """Compile Trident source FILE.tri to TIR and print it as JSON."""
    click.echo(json.dumps(_frontend_tir(file, include, linked=linked, spill=spill), indent=indent))


# -- run --------------------------------------------------------------------------------------


def _ints(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None


@main.command(
    epilog="""\b
Examples:
  tasmopt run prog.tasm                                 # no input
  tasmopt run prog.tasm --input 1,2,3 --secret 7        # public and secret input
  tasmopt run lib.tasm --start __add_mul --stack 0,0,0,0,0,0,0,0,0,0,0,0,0,0,5,7
  tasmopt run prog.tasm --isa head --step-limit 10000

Field elements are integers reduced mod p = 2^64 - 2^32 + 1 (so -1 is p - 1). Prints the
public output, the final stack (top first), clock cycles, every AET table height and the
padded height; on a VM error, the error and the heights of the executed prefix (exit 1).
"""
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input", "public", callback=_ints, help="Public input, comma-separated.")
@click.option("--secret", callback=_ints, help="Secret input (for divine), comma-separated.")
@click.option(
    "--stack",
    callback=_ints,
    help="Initial op stack bottom..top, at least 16 words (default: spec §3).",
)
@click.option(
    "--isa",
    type=click.Choice(["release", "head"]),
    default="release",
    show_default=True,
    help="Instruction-set variant.",
)
@click.option(
    "--start",
    default="0",
    show_default=True,
    help="Label or instruction index where execution begins.",
)
@click.option(
    "--step-limit",
    type=click.IntRange(1),
    default=1_000_000,
    show_default=True,
    help="Most instructions to execute.",
)
def run(
    file: Path,
    public: list[int] | None,
    secret: list[int] | None,
    stack: list[int] | None,
    isa: str,
    start: str,
    step_limit: int,
) -> None:
    """Run FILE.tasm in the simulator and report outputs, cycles and table heights."""
    from tasmopt.tasm.parser import parse
    from tasmopt.vm.simulator import VmInput
    from tasmopt.vm.simulator import run as run_vm

    try:
        program = parse(file.read_text(encoding="utf-8"), isa)  # type: ignore[arg-type]  # click validated --isa against ISA_VARIANTS
    except TasmSyntaxError as exc:
        raise click.ClickException(f"{file}:{exc.line}:{exc.column}: {exc.reason}") from None
    vm_input = VmInput(public_input=public or (), secret_input=secret or (), initial_stack=stack)
    where: int | str = int(start) if start.lstrip("-").isdigit() else start
    try:
        result = run_vm(program, vm_input, start=where, step_limit=step_limit)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if result.error is None:
        click.echo("status: halted")
    else:
        click.echo(f"status: error: {result.error}")
    click.echo(f"public output: {', '.join(map(str, result.public_output)) or '(none)'}")
    click.echo(f"stack (top first): {' '.join(map(str, reversed(result.stack)))}")
    click.echo(f"clock cycles: {result.cycles}")
    if result.heights is not None:
        heights = result.heights.as_dict()
        width = max(map(len, heights))
        click.echo("table heights:")
        for name, rows in heights.items():
            click.echo(f"  {name.ljust(width)}  {rows}")
        click.echo(f"padded height: {result.heights.padded_height}")
    if result.error is not None:
        sys.exit(1)


def _register_groups() -> None:
    from tasmopt.cli_corpus import corpus
    from tasmopt.cli_ops import checkpoint, finetune, scheduler, worker
    from tasmopt.cli_train import eval_cmd, train

    for command in (train, eval_cmd, worker, scheduler, checkpoint, finetune, corpus):
        main.add_command(command)


_register_groups()


if __name__ == "__main__":
    main()
