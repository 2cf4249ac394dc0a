"""Live updates: one Server-Sent Events stream per open console page."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response, StreamingResponse

from signoff.console import live
from signoff.console.auth import SignedIn
from signoff.console.shared import page_router, service_context
from signoff.services.wait_slots import WaitKind

router = page_router()


@router.get("/events")
async def events(request: Request, principal: SignedIn) -> Response:
    """Server-Sent Events: ``change`` whenever a task changed; the page then asks what.
    At most ``SIGNOFF_MAX_STREAMS_PER_KEY`` per user at once (429 ``ERR_TOO_MANY_WAITS``)."""
    context = service_context(request)
    give_back = context.wait_slots.take(
        WaitKind.STREAM, principal.key_id, context.settings.max_streams_per_key
    )
    hub = live.hub_for(request.app.state, context)
    return StreamingResponse(
        live.event_stream(hub, request.is_disconnected, give_back),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
