"""Persistence (design §2 BuildResult, §3 checkpoints): SQLAlchemy models and queries.

The schema is owned by Alembic (`migrations/`); this package only declares the mapping and
offers keyword-only query functions over a caller-provided `Session`. It never decides when
sessions start or end, and it imports nothing from the service or the worker.
"""

from tasmopt.store.cache import (
    count_function_results,
    delete_function_result,
    get_function_results,
    purge_function_results,
    put_function_result,
    record_cache_hits,
    record_spot_check,
    update_as_returned,
)
from tasmopt.store.checkpoints import (
    CheckpointInfo,
    checkpoint_dir,
    describe_checkpoint,
    get_checkpoint,
    list_admin_actions,
    list_checkpoints,
    production_checkpoint,
    promote_checkpoint,
    record_admin_action,
    register_checkpoint,
    reject_checkpoint,
    rollback_checkpoint,
)
from tasmopt.store.engine import make_engine, make_sessionmaker
from tasmopt.store.errors import Conflict, InvalidCheckpoint, NotFound, StoreError
from tasmopt.store.models import (
    SOURCES,
    AdminAction,
    Base,
    BuildResult,
    Checkpoint,
    CompileJob,
    FinetuneRun,
    FunctionResult,
    Trajectory,
)
from tasmopt.store.queries import (
    count_build_results,
    existing_ids,
    get_build_result,
    insert_build_results,
    list_build_results,
)
from tasmopt.store.records import build_records, fallback_records
from tasmopt.store.runs import (
    buffer_counts,
    get_compile_job,
    last_finetune_run,
    list_finetune_runs,
    record_finetune_run,
    results_since,
    save_compile_job,
)
from tasmopt.store.trajectories import (
    KEEP_TRAJECTORIES,
    REPLAY_WINDOW,
    ReplayBlock,
    count_trajectories,
    prune_trajectories,
    replay_blocks,
)

__all__ = [
    "checkpoint_dir",
    "KEEP_TRAJECTORIES",
    "REPLAY_WINDOW",
    "ReplayBlock",
    "Trajectory",
    "count_trajectories",
    "prune_trajectories",
    "replay_blocks",
    "SOURCES",
    "Base",
    "BuildResult",
    "Checkpoint",
    "AdminAction",
    "CompileJob",
    "FinetuneRun",
    "FunctionResult",
    "get_function_results",
    "put_function_result",
    "delete_function_result",
    "count_function_results",
    "purge_function_results",
    "record_cache_hits",
    "record_spot_check",
    "update_as_returned",
    "StoreError",
    "NotFound",
    "Conflict",
    "InvalidCheckpoint",
    "CheckpointInfo",
    "describe_checkpoint",
    "register_checkpoint",
    "get_checkpoint",
    "list_checkpoints",
    "production_checkpoint",
    "promote_checkpoint",
    "rollback_checkpoint",
    "reject_checkpoint",
    "record_admin_action",
    "list_admin_actions",
    "save_compile_job",
    "get_compile_job",
    "record_finetune_run",
    "last_finetune_run",
    "list_finetune_runs",
    "results_since",
    "buffer_counts",
    "make_engine",
    "make_sessionmaker",
    "build_records",
    "fallback_records",
    "insert_build_results",
    "existing_ids",
    "get_build_result",
    "list_build_results",
    "count_build_results",
]
