"""Request-size limit as a small ASGI middleware.

Unlike a middleware that answers by itself, this one raises `BodyTooLarge` from ``receive``
inside the route, so the 413 is produced by `service.errors` like every other error. A
declared Content-Length over the limit fails on the first read, before any byte is buffered;
a chunked body fails as soon as the running total passes the limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.core.errors import BodyTooLarge

__all__ = ["BodyLimit"]


class BodyLimit:
    """Refuse request bodies over `max_bytes` (bytes)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        total = 0

        async def limited() -> Message:
            nonlocal total
            if declared is not None and declared > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)
            message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
