"""`GET /metrics`: Prometheus text exposition of this API process (see `service.core.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.core.metrics import render

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response, include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Counters, histograms and gauges of this process, for Prometheus to scrape."""
    return Response(render(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
