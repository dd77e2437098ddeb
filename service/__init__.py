"""tasmopt's HTTP service: a thin FastAPI adapter over `tasmopt` (design §5)."""
