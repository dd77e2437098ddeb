"""`tasmopt worker`, `tasmopt scheduler`, `tasmopt checkpoint ...`: the processes and the
checkpoint registry of a deployment. The service and worker packages are imported inside the
commands only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

__all__ = ["worker", "scheduler", "checkpoint", "finetune"]


# -- worker -----------------------------------------------------------------------------------


@click.command(
    epilog="""\b
Examples:
  tasmopt worker                                   # REDIS_URL, or redis://127.0.0.1:6379/0
  tasmopt worker --url redis://cache:6379/2 --burst
  tasmopt worker --queues verify --metrics-port 9101
Queues, in priority order: verify (equivalence checks), compile (POST /compile/jobs),
deepen (background deepening of functions answered before their search was complete, and
spot checks of cached results), learn (the finetune job).
Metrics: http://<host>:<metrics-port>/metrics.
Equivalent RQ command (no metrics, no learning-loop database):
  rq worker verify compile deepen learn --url $REDIS_URL \\
    --serializer rq.serializers.JSONSerializer --worker-class rq.SimpleWorker
"""
)
@click.option("--url", help="Redis URL (default: REDIS_URL, else redis://127.0.0.1:6379/0).")
@click.option(
    "--queues",
    default=None,
    help="Comma-separated queues to work on, highest priority first "
    "[default: all, in the order above].",
)
@click.option("--burst", is_flag=True, help="Exit when the queues are empty.")
@click.option("--name", help="Worker name (default: host and pid).")
@click.option(
    "--fork", is_flag=True, help="Run each job in a forked child (isolation; ~40 ms more per job)."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Port of this worker's /metrics (default: WORKER_METRICS_PORT, 9100; 0: none).",
)
def worker(
    url: str | None,
    queues: str | None,
    burst: bool,
    name: str | None,
    fork: bool,
    metrics_port: int | None,
) -> None:
    """Run an RQ worker: equivalence checks, async compiles, deepening and the finetune job."""
    from service.core.config import Settings
    from worker import context
    from worker.metrics import MeteredSimpleWorker, MeteredWorker, start_metrics_server
    from worker.queue import QUEUES, SERIALIZER, connect

    settings = Settings()
    queues = queues if queues is not None else ",".join(QUEUES)
    names = [q.strip() for q in queues.split(",") if q.strip()]
    unknown = sorted(set(names) - set(QUEUES))
    if unknown or not names:
        raise click.BadParameter(
            f"unknown queue(s) {unknown}; known: {list(QUEUES)}", param_hint="--queues"
        )
    url = url or settings.redis_url or "redis://127.0.0.1:6379/0"
    context.configure(
        database_url=settings.database_url,
        connect_timeout_s=settings.db_connect_timeout_s,
        learning=context.learning_from(settings),
    )
    port = settings.worker_metrics_port if metrics_port is None else metrics_port
    if port:
        try:
            port = start_metrics_server(port)
        except OSError as exc:  # a busy port must not take the worker pool down
            logging.getLogger(__name__).error("worker metrics disabled: port %d: %s", port, exc)
            port = 0
    conn = connect(url, socket_timeout_s=None)
    cls = MeteredWorker if fork else MeteredSimpleWorker  # checks are pure: no fork needed
    w = cls(names, connection=conn, serializer=SERIALIZER, name=name)
    click.echo(
        f"worker {w.name} on {names} at {url}" + (f", metrics on :{port}" if port else ""), err=True
    )
    w.work(burst=burst, logging_level="WARNING")


# -- finetune ---------------------------------------------------------------------------------


@click.command(
    epilog="""\b
Examples:
  tasmopt finetune                 # FINETUNE_STEPS (200) steps on the configured database
  tasmopt finetune --steps 20      # a short run
  AUTO_PROMOTE=true tasmopt finetune
What it does (design §4 Stage 3): the replay buffer's newest judged candidates (what
`tasmopt serve` stored in DATABASE_URL, the embedded SQLite database by default) are
sampled by reward and recency, 10% history mixed in; the production checkpoint is trained
for N steps; the regression guard decodes the holdout corpus and the labeled online
results with both checkpoints and verifies every hypothesis. The new checkpoint is
registered as a candidate (or promoted with AUTO_PROMOTE), or rejected by the guard.
Ends with one line:
  finetune: outcome=<candidate|promoted|rejected|no_new_results> steps=N validity_before=X validity_after=Y
"""
)
@click.option(
    "--steps", type=click.IntRange(1), help="Optimizer steps (default: FINETUNE_STEPS, 200)."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
def finetune(steps: int | None, seed: int) -> None:
    """Run the scheduled micro-finetune once, now, in the foreground."""
    from dataclasses import replace

    from service.core.config import Settings
    from service.core.db import engine_from_settings, migrate
    from service.core.model_watcher import bootstrap_embedded
    from tasmopt.store import make_sessionmaker
    from tasmopt.train.online import finetune_line
    from worker import context
    from worker.jobs import finetune_job

    settings = Settings()
    engine = engine_from_settings(settings)
    migrate(engine)
    factory = make_sessionmaker(engine)
    if settings.embedded:
        bootstrap_embedded(factory, settings.model_store)
    learning = context.learning_from(settings)
    cfg = replace(learning.config, steps=steps or learning.config.steps, seed=seed)
    context.configure(session_factory=factory, learning=replace(learning, config=cfg))
    try:
        out = finetune_job("cli", force=True, progress=True)
    finally:
        context.reset()
    click.echo(out.get("line") or finetune_line(out["outcome"]))


# -- scheduler --------------------------------------------------------------------------------


@click.command(
    epilog="""\b
Examples:
  tasmopt scheduler                    # FINETUNE_CRON (default every 15 minutes)
  tasmopt scheduler --interval 60      # every minute instead (demos, tests)
Run exactly one scheduler per Redis; the jobs run on `tasmopt worker` (queue learn).
"""
)
@click.option("--url", help="Redis URL (default: REDIS_URL, else redis://127.0.0.1:6379/0).")
@click.option("--cron", "cron_expr", help="Cron expression (default: FINETUNE_CRON).")
@click.option("--interval", type=click.IntRange(1), help="Period in seconds instead of cron.")
def scheduler(url: str | None, cron_expr: str | None, interval: int | None) -> None:
    """Run the RQ cron scheduler that enqueues the finetune check (design §4 Stage 3)."""
    from service.core.config import Settings
    from worker.cron import build_scheduler
    from worker.queue import connect

    settings = Settings()
    url = url or settings.redis_url or "redis://127.0.0.1:6379/0"
    cron_expr = cron_expr or settings.finetune_cron
    sched = build_scheduler(
        connect(url, socket_timeout_s=None),
        cron=None if interval else cron_expr,
        interval_s=interval,
        min_results=settings.finetune_min_results,
        max_age_h=settings.finetune_max_age_h,
    )
    click.echo(
        f"scheduler {sched.name} at {url}: finetune check "
        + (f"every {interval} s" if interval else f"on cron {cron_expr!r}"),
        err=True,
    )
    sched.start()


# -- checkpoint -------------------------------------------------------------------------------


@click.group(
    epilog="""\b
Examples:
  tasmopt checkpoint register model_store/v3 --reason "stage 2 run 14"
  tasmopt checkpoint register model_store/v3 --promote --reason "beats v2 on holdout"
  tasmopt checkpoint list
The registry is the DATABASE_URL database (migrated); actions are audited as cli:<user>.
Promote and roll back through the admin API too (POST /admin/checkpoints/{version}/promote).
"""
)
def checkpoint() -> None:
    """Register and list model checkpoints (the production pointer lives in the database)."""


def _session_factory() -> Any:
    from service.core.config import Settings
    from service.core.db import engine_from_settings
    from tasmopt.store import make_sessionmaker

    settings = Settings()
    return make_sessionmaker(engine_from_settings(settings)), settings


@checkpoint.command("register")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--reason", required=True, help="Why (kept in the audit log).")
@click.option("--promote", is_flag=True, help="Make it production right away.")
def checkpoint_register(directory: Path, reason: str, promote: bool) -> None:
    """Register DIRECTORY (config.json, model.safetensors, metrics.json) as a candidate."""
    import getpass

    from tasmopt.store import (
        StoreError,
        describe_checkpoint,
        promote_checkpoint,
        record_admin_action,
        register_checkpoint,
    )

    factory, settings = _session_factory()
    actor = f"cli:{getpass.getuser()}"
    try:
        info = describe_checkpoint(directory, store=settings.model_store)
        with factory() as session, session.begin():
            row, created = register_checkpoint(session, info=info)
            if created:
                record_admin_action(
                    session,
                    actor=actor,
                    action="register",
                    target=row.version,
                    reason=reason,
                    detail={"path": row.path, "sha256": row.sha256},
                )
            if promote and row.status != "production":
                _, previous = promote_checkpoint(session, version=row.version)
                record_admin_action(
                    session,
                    actor=actor,
                    action="promote",
                    target=row.version,
                    reason=reason,
                    detail={"previous": previous.version if previous else None},
                )
            status, version = row.status, row.version
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"{version}: {status} ({info.path}, sha256 {info.sha256[:12]}…)"
        + ("" if created else " (already registered)")
    )


@checkpoint.command("list")
def checkpoint_list() -> None:
    """Print the registered checkpoints, newest first."""
    from tasmopt.store import list_checkpoints

    factory, _settings = _session_factory()
    with factory() as session:
        rows = list_checkpoints(session)
        for c in rows:
            click.echo(f"{c.version}\t{c.status}\t{c.stage}\t{c.sha256[:12]}\t{c.path}")
    if not rows:
        click.echo("no checkpoints registered", err=True)
