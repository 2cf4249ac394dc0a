"""Live updates: one Server-Sent Events stream per open console page."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response, StreamingResponse

from signoff.console import live
from signoff.console.auth import SignedIn
from signoff.console.shared import page_router, service_context

router = page_router()


@router.get("/events")
async def events(request: Request, principal: SignedIn) -> Response:
    """Server-Sent Events: ``change`` whenever a task changed; the page then asks what."""
    hub = live.hub_for(request.app.state, service_context(request))
    return StreamingResponse(
        live.event_stream(hub, request.is_disconnected),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
