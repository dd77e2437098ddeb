# tasmopt image: the API (default command), the RQ workers and the scheduler (docker-compose.yml
# picks the command). CPU only.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# torch first, the CPU build from the PyTorch CPU index: the PyPI wheel of the same version
# pulls in CUDA (several GB). The version is the one pinned in pyproject.toml.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

# The code, installed editable so that migrations/ is found next to the packages, as in a
# checkout. model_store/ is mounted by docker-compose.yml (MODEL_STORE=/app/model_store).
COPY pyproject.toml README.md alembic.ini ./
COPY tasmopt ./tasmopt
COPY service ./service
COPY worker ./worker
RUN pip install -e .
COPY migrations ./migrations

RUN useradd --create-home --uid 10001 --user-group tasmopt \
    && mkdir -p /app/var/spool /app/model_store \
    && chown -R tasmopt:tasmopt /app/var
USER tasmopt

EXPOSE 8000 9100
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"]

CMD ["uvicorn", "service.main:create_app", "--factory", "--host", "0.0.0.0", "--port", "8000"]
