"""RQ side of tasmopt: jobs (plain functions over `tasmopt`), queue helpers, the verify backend
that farms `BlockCheck`s out to the worker pool, the cron schedule of the learning loop, and the
worker's own metrics (design §1, §5).

Dependency direction: worker -> service.core (settings, the compile pipeline shared with the
API) -> tasmopt. Nothing here imports the API (`service.main`, `service.api`, `service.runners`);
a worker process also runs async compiles, `worker.compile.compile_job`.
"""
