"""RQ side of tasmopt: jobs (plain functions over `tasmopt`), queue helpers, and the
verify backend that farms `BlockCheck`s out to the worker pool (design §1, §5).

Dependency direction: worker -> tasmopt. Nothing here imports the service.
"""
