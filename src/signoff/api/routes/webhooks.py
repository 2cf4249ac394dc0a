"""Webhook endpoints (admin) and delivery history."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from signoff.api.deps import Caller, Context, json_response, model_body_doc, problems, read_model
from signoff.api.webhook_schemas import (
    CreateWebhookEndpointRequest,
    DeliveryListOut,
    UpdateWebhookEndpointRequest,
    WebhookEndpointCreated,
    WebhookEndpointListOut,
    WebhookEndpointOut,
)
from signoff.services import webhooks

router = APIRouter(tags=["webhooks"])


@router.post(
    "/webhook-endpoints",
    status_code=201,
    response_model=None,
    openapi_extra=model_body_doc(CreateWebhookEndpointRequest),
    responses={201: {"model": WebhookEndpointCreated}, **problems(400, 422)},
    summary="Register a webhook endpoint (admin); the secret is shown once",
)
async def create_endpoint(request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, CreateWebhookEndpointRequest)
    created = await webhooks.create_endpoint(
        context,
        caller,
        url=body.url,
        event_types=body.event_types,
        entity_types=body.entity_types,
        description=body.description,
        asymmetric_signature=body.asymmetric_signature,
    )
    return json_response(created, 201, headers={"Location": f"/webhook-endpoints/{created['id']}"})


@router.get(
    "/webhook-endpoints",
    response_model=None,
    responses={200: {"model": WebhookEndpointListOut}, **problems()},
    summary="List webhook endpoints (admin); never shows secrets",
)
async def list_endpoints(context: Context, caller: Caller) -> Response:
    return json_response({"items": await webhooks.list_endpoints(context, caller)})


@router.get(
    "/webhook-endpoints/{endpoint_id}",
    response_model=None,
    responses={200: {"model": WebhookEndpointOut}, **problems(404)},
    summary="One webhook endpoint (admin)",
)
async def get_endpoint(endpoint_id: str, context: Context, caller: Caller) -> Response:
    return json_response(await webhooks.get_endpoint(context, caller, endpoint_id))


@router.patch(
    "/webhook-endpoints/{endpoint_id}",
    response_model=None,
    openapi_extra=model_body_doc(UpdateWebhookEndpointRequest),
    responses={200: {"model": WebhookEndpointOut}, **problems(400, 404, 422)},
    summary="Enable, disable or re-filter an endpoint (admin)",
)
async def update_endpoint(
    endpoint_id: str, request: Request, context: Context, caller: Caller
) -> Response:
    body = await read_model(request, UpdateWebhookEndpointRequest)
    changes = body.model_dump(exclude_unset=True)
    return json_response(await webhooks.update_endpoint(context, caller, endpoint_id, changes))


@router.delete(
    "/webhook-endpoints/{endpoint_id}",
    status_code=204,
    response_model=None,
    responses=problems(404),
    summary="Delete an endpoint and its delivery history (admin)",
)
async def delete_endpoint(endpoint_id: str, context: Context, caller: Caller) -> Response:
    await webhooks.delete_endpoint(context, caller, endpoint_id)
    return Response(status_code=204)


@router.post(
    "/webhook-endpoints/{endpoint_id}/rotate-secret",
    response_model=None,
    responses={200: {"model": WebhookEndpointCreated}, **problems(404)},
    summary="Rotate the signing secret; both sign for 24 hours (admin)",
)
async def rotate_secret(endpoint_id: str, context: Context, caller: Caller) -> Response:
    return json_response(await webhooks.rotate_secret(context, caller, endpoint_id))


@router.get(
    "/webhook-endpoints/{endpoint_id}/deliveries",
    response_model=None,
    responses={200: {"model": DeliveryListOut}, **problems(404)},
    summary="Every delivery to the endpoint, with its attempts (admin)",
)
async def endpoint_deliveries(endpoint_id: str, context: Context, caller: Caller) -> Response:
    return json_response(
        {"items": await webhooks.endpoint_deliveries(context, caller, endpoint_id)}
    )


@router.get(
    "/tasks/{task_id}/deliveries",
    response_model=None,
    responses={200: {"model": DeliveryListOut}, **problems(404)},
    summary="Every delivery of the task's events, with attempts",
)
async def task_deliveries(task_id: str, context: Context, caller: Caller) -> Response:
    return json_response({"items": await webhooks.task_deliveries(context, caller, task_id)})


@router.post(
    "/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=None,
    responses={202: {"description": "Queued again, same webhook-id"}, **problems(404)},
    summary="Send a delivery again, e.g. from the dead letter (admin)",
)
async def redeliver(delivery_id: str, context: Context, caller: Caller) -> Response:
    await webhooks.redeliver(context, caller, delivery_id)
    return json_response({"status": "queued"}, 202)
