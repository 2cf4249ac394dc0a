"""The one bounded reader of request bodies: JSON, forms and pages alike.

Nothing reads a body any other way: a body larger than ``SIGNOFF_MAX_BODY_BYTES`` is
refused as it streams in (or at once, when ``Content-Length`` says so), so never more
than the limit is held in memory.
"""

from __future__ import annotations

from starlette.requests import Request

from signoff.errors import ErrorCode, PayloadTooLarge


async def read_bounded_body(
    request: Request, limit: int, refusal: type[PayloadTooLarge] = PayloadTooLarge
) -> bytes:
    """The raw body, at most ``limit`` bytes; raises ``refusal`` (413
    ``ERR_PAYLOAD_TOO_LARGE``) beyond it. The body is kept on the request, so Starlette's
    own readers (``request.form()``, ``request.body()``) reuse it instead of reading more.
    """
    cached: bytes | None = getattr(request, "_body", None)
    if cached is not None:
        if len(cached) > limit:
            raise refusal(_message(limit), error_code=ErrorCode.PAYLOAD_TOO_LARGE)
        return cached
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise refusal(_message(limit), error_code=ErrorCode.PAYLOAD_TOO_LARGE)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise refusal(_message(limit), error_code=ErrorCode.PAYLOAD_TOO_LARGE)
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body
    return body


def _message(limit: int) -> str:
    return f"request body exceeds {limit} bytes"
