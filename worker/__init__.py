"""RQ side of tasmopt: jobs (plain functions over `tasmopt`), queue helpers, the verify backend
that farms `BlockCheck`s out to the worker pool, the cron schedule of the learning loop, and the
worker's own metrics (design §1, §5).

Dependency direction: worker -> tasmopt. Nothing here imports the service; a worker process
also runs async compiles, ``service.jobs.compile_job``, which RQ imports by name.
"""
