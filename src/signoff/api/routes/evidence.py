"""Evidence: the public keys receipts are signed with, a task's receipts, and the bundle
an auditor verifies offline (docs/evidence.md)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response, StreamingResponse

from signoff.api.deps import Caller, Context, json_response, problems
from signoff.services import evidence, evidence_export

router = APIRouter(tags=["evidence"])

#: The response header carrying the receipt of the record a decision or vote wrote.
RECEIPT_HEADER = "Signoff-Receipt"
RECEIPT_HEADER_DOC = {
    RECEIPT_HEADER: {
        "description": "The signed receipt (compact JWS, EdDSA) of the trail record this "
        "wrote; keys at /.well-known/jwks.json",
        "schema": {"type": "string"},
    }
}


@router.get(
    "/.well-known/jwks.json",
    response_model=None,
    responses={200: {"description": "A JWK Set (RFC 7517) of OKP/Ed25519 keys"}},
    summary="The public keys receipts and checkpoints are signed with (no authentication)",
)
async def jwks(context: Context) -> Response:
    """Every key ever used, the active one first; a retired key carries ``exp``."""
    return json_response(await evidence.jwks(context))


@router.get(
    "/tasks/{task_id}/receipts",
    response_model=None,
    responses={
        200: {"description": "The task's records with chain links and receipts"},
        **problems(404),
    },
    summary="The task's trail as signed receipts (compact JWS, EdDSA)",
)
async def task_receipts(task_id: str, context: Context, caller: Caller) -> Response:
    return json_response({"items": await evidence.readable_receipts(context, caller, task_id)})


@router.get(
    "/evidence/export",
    response_model=None,
    responses={200: {"description": "An evidence bundle"}, **problems(422)},
    summary="An evidence bundle for `signoff verify` (admin)",
)
async def export(
    context: Context, caller: Caller, since: str | None = None, until: str | None = None
) -> Response:
    """Whole chains of the tasks with a record in ``[since, until)``, their receipts,
    every checkpoint and the public keys, streamed (chunked) as it is read. A refusal is
    a problem answer; a failure once the body has begun cuts the response off before its
    end, so the client is left with incomplete JSON, which `signoff verify` refuses."""
    fragments = await evidence_export.admin_export(context, caller, since, until)
    return StreamingResponse(fragments, media_type="application/json")
