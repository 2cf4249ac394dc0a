"""The catch-up read: a producer's own events since a cursor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from signoff.api.deps import Caller, Context, json_response, problems
from signoff.api.schemas import EventPageOut
from signoff.services import catchup

router = APIRouter(tags=["events"])


@router.get(
    "/events",
    response_model=None,
    responses={200: {"model": EventPageOut}, **problems(403, 410, 422)},
    summary="The events of the caller's own tasks since a cursor (producer; catch-up)",
)
async def events_since(
    context: Context,
    caller: Caller,
    cursor: Annotated[
        str | None,
        Query(
            max_length=255,
            description="The `next_cursor` of the previous read; omit to start from the first.",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=catchup.MAX_PAGE_SIZE)] = 100,
) -> Response:
    """The documents the producer's webhook endpoints receive (`{"id", "type",
    "created_at", "data"}`), oldest first, each once. Keep `next_cursor` with what the events
    changed and start the next read there; `has_more` says to read again at once."""
    page = await catchup.events_since(context, caller, cursor=cursor, limit=limit)
    return json_response({"items": page.events, "next_cursor": page.cursor, "has_more": page.more})
