"""Which ``error_code`` each API operation can return: the one table of it.

Key: ``"METHOD /path"`` exactly as in ``/openapi.json``; value: the codes that operation
answers with of its own. The OpenAPI document groups them by the status each code goes
with (:class:`signoff.errors.ErrorCode`). A new operation must get a row here
(``tests/unit/test_openapi_document.py`` names the missing row); an operation that can
return none of its own gets ``()``.

Added to every row by rule (do not repeat them):

* ``ERR_UNAUTHENTICATED``: operations that take an API key;
* ``ERR_NOT_READY``: every operation that reads the database;
* ``ERR_MALFORMED_JSON``, ``ERR_PAYLOAD_TOO_LARGE``, ``ERR_VALIDATION``: operations with a
  request body;
* ``ERR_VALIDATION``: operations with query parameters or typed path parameters.
"""

from __future__ import annotations

from signoff.errors import ErrorCode

ERROR_CODES: dict[str, tuple[ErrorCode, ...]] = {
    # health and keys
    "GET /healthz": (),
    "GET /readyz": (),
    "GET /metrics": (ErrorCode.FORBIDDEN,),
    "GET /me": (),
    "POST /api-keys": (ErrorCode.FORBIDDEN,),
    "GET /api-keys": (ErrorCode.FORBIDDEN,),
    "DELETE /api-keys/{key_id}": (ErrorCode.FORBIDDEN, ErrorCode.API_KEY_NOT_FOUND),
    # evidence
    "GET /.well-known/jwks.json": (),
    "GET /tasks/{task_id}/receipts": (ErrorCode.TASK_NOT_FOUND,),
    "GET /evidence/export": (ErrorCode.FORBIDDEN,),
    # tasks
    "POST /tasks/escalate": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_CONFLICT,
        ErrorCode.IDEMPOTENCY_KEY_IN_USE,
        ErrorCode.INSUFFICIENT_CONTEXT_PROOF,
        ErrorCode.PRECHECK_HASH_MISMATCH,
        ErrorCode.READ_ONLY_FIELD,
        ErrorCode.HEADLINE_FIELD,
        ErrorCode.IDEMPOTENCY_KEY_REUSED,
        ErrorCode.UNKNOWN_POLICY,
        ErrorCode.UNKNOWN_APPROVAL_RULE,
        ErrorCode.UNMEETABLE_APPROVAL_RULE,
        ErrorCode.TIMEOUT_APPROVAL_NOT_ALLOWED,
    ),
    "POST /tasks/claim-next": (
        ErrorCode.FORBIDDEN,
        ErrorCode.OPERATOR_MISMATCH,
        ErrorCode.CLAIM_LIMIT,
    ),
    "POST /tasks/{task_id}/claim": (
        ErrorCode.FORBIDDEN,
        ErrorCode.OPERATOR_MISMATCH,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.TASK_EXPIRED,
        ErrorCode.TASK_CANCELLED,
        ErrorCode.CLAIM_LIMIT,
        ErrorCode.DECIDED_BY_VOTES,
    ),
    "POST /tasks/{task_id}/lease/renew": (
        ErrorCode.LEASE_TOKEN_REQUIRED,
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.LEASE_LOST,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.TASK_EXPIRED,
        ErrorCode.TASK_CANCELLED,
        ErrorCode.CLAIM_LIMIT,
    ),
    "POST /tasks/{task_id}/release": (
        ErrorCode.LEASE_TOKEN_REQUIRED,
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.LEASE_LOST,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.TASK_EXPIRED,
        ErrorCode.TASK_CANCELLED,
    ),
    "POST /tasks/{task_id}/resolve": (
        ErrorCode.LEASE_TOKEN_REQUIRED,
        ErrorCode.FORBIDDEN,
        ErrorCode.OPERATOR_MISMATCH,
        ErrorCode.SELF_APPROVAL,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.LEASE_LOST,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.TASK_EXPIRED,
        ErrorCode.TASK_CANCELLED,
        ErrorCode.LEASE_EXPIRED,
        ErrorCode.STALE_REVISION,
        ErrorCode.DECIDED_BY_VOTES,
        ErrorCode.NOT_EDITABLE,
        ErrorCode.HEADLINE_FIELD,
        ErrorCode.REVISION_LIMIT,
    ),
    "POST /tasks/{task_id}/votes": (
        ErrorCode.FORBIDDEN,
        ErrorCode.OPERATOR_MISMATCH,
        ErrorCode.SELF_APPROVAL,
        ErrorCode.NOT_ELIGIBLE_TO_VOTE,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.STALE_REVISION,
        ErrorCode.ALREADY_VOTED,
        ErrorCode.STAGE_NOT_OPEN,
        ErrorCode.NOT_DECIDED_BY_VOTES,
        ErrorCode.NOT_EDITABLE,
        ErrorCode.HEADLINE_FIELD,
        ErrorCode.REVISION_LIMIT,
    ),
    "GET /tasks": (ErrorCode.VALIDATION,),
    "GET /tasks/{task_id}": (ErrorCode.TASK_NOT_FOUND, ErrorCode.TOO_MANY_WAITS),
    "GET /tasks/{task_id}/events": (ErrorCode.TASK_NOT_FOUND,),
    "GET /events": (ErrorCode.FORBIDDEN, ErrorCode.CURSOR_EXPIRED, ErrorCode.VALIDATION),
    # approvals bound to versions
    "PUT /tasks/{task_id}/subject": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.STALE_REVISION,
        ErrorCode.TASK_CONFLICT,
        ErrorCode.REVISION_CONFLICT,
        ErrorCode.PRECONDITION_REQUIRED,
        ErrorCode.REVISION_LIMIT,
        ErrorCode.HEADLINE_FIELD,
    ),
    "GET /tasks/{task_id}/revisions": (ErrorCode.TASK_NOT_FOUND,),
    "GET /tasks/{task_id}/revisions/{revision}": (
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.REVISION_NOT_FOUND,
        ErrorCode.VALIDATION,
    ),
    "GET /tasks/{task_id}/diff": (
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.REVISION_NOT_FOUND,
        ErrorCode.VALIDATION,
    ),
    "POST /tasks/{task_id}/execute": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.ALREADY_EXECUTING,
        ErrorCode.APPROVAL_NOT_VALID,
        ErrorCode.STATE_CONFLICT,
    ),
    "POST /tasks/{task_id}/execution/renew": (
        ErrorCode.EXECUTION_TOKEN_REQUIRED,
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.EXECUTION_LEASE_LOST,
        ErrorCode.STATE_CONFLICT,
    ),
    "POST /tasks/{task_id}/actions/{action_id}/complete": (
        ErrorCode.EXECUTION_TOKEN_REQUIRED,
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.ACTION_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.EXECUTION_LEASE_LOST,
    ),
    "POST /tasks/{task_id}/actions/{action_id}/fail": (
        ErrorCode.EXECUTION_TOKEN_REQUIRED,
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.ACTION_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.EXECUTION_LEASE_LOST,
    ),
    "POST /tasks/{task_id}/sources/{source_id}/revoke": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.SOURCE_NOT_FOUND,
    ),
    # durable waiting
    "POST /escalation-policies": (ErrorCode.FORBIDDEN, ErrorCode.POLICY_EXISTS),
    "GET /escalation-policies": (ErrorCode.FORBIDDEN,),
    "GET /escalation-policies/{name}": (ErrorCode.FORBIDDEN, ErrorCode.POLICY_NOT_FOUND),
    "PUT /escalation-policies/{name}": (ErrorCode.FORBIDDEN, ErrorCode.POLICY_NOT_FOUND),
    "DELETE /escalation-policies/{name}": (ErrorCode.FORBIDDEN, ErrorCode.POLICY_NOT_FOUND),
    "PUT /approval-rules/{name}": (ErrorCode.FORBIDDEN, ErrorCode.UNMEETABLE_APPROVAL_RULE),
    "GET /approval-rules": (ErrorCode.FORBIDDEN,),
    "GET /approval-rules/{name}": (ErrorCode.FORBIDDEN, ErrorCode.APPROVAL_RULE_NOT_FOUND),
    "DELETE /approval-rules/{name}": (ErrorCode.FORBIDDEN, ErrorCode.APPROVAL_RULE_NOT_FOUND),
    "POST /approval-grants": (ErrorCode.FORBIDDEN, ErrorCode.VALIDATION),
    "GET /approval-grants": (ErrorCode.FORBIDDEN,),
    "DELETE /approval-grants/{grant_id}": (ErrorCode.GRANT_NOT_FOUND,),
    "POST /tasks/{task_id}/cancel": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.TASK_EXPIRED,
        ErrorCode.TASK_CANCELLED,
    ),
    "GET /tasks/{task_id}/notifications": (ErrorCode.FORBIDDEN, ErrorCode.TASK_NOT_FOUND),
    # supervision
    "POST /tasks/{task_id}/force-release": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
    ),
    "POST /tasks/{task_id}/reassign": (
        ErrorCode.FORBIDDEN,
        ErrorCode.TASK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.UNKNOWN_GROUP,
    ),
    "GET /r/{token}": (ErrorCode.LINK_NOT_FOUND,),
    "POST /r/{token}": (
        ErrorCode.CSRF,
        ErrorCode.FORBIDDEN,
        ErrorCode.NOT_IN_GROUP,
        ErrorCode.SELF_APPROVAL,
        ErrorCode.LINK_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
        ErrorCode.STALE_REVISION,
    ),
    # webhooks
    "POST /webhook-endpoints": (ErrorCode.FORBIDDEN, ErrorCode.WEBHOOK_URL_FORBIDDEN),
    "GET /webhook-endpoints": (ErrorCode.FORBIDDEN,),
    "GET /webhook-endpoints/{endpoint_id}": (
        ErrorCode.FORBIDDEN,
        ErrorCode.WEBHOOK_ENDPOINT_NOT_FOUND,
    ),
    "PATCH /webhook-endpoints/{endpoint_id}": (
        ErrorCode.FORBIDDEN,
        ErrorCode.WEBHOOK_ENDPOINT_NOT_FOUND,
        ErrorCode.WEBHOOK_URL_FORBIDDEN,
    ),
    "DELETE /webhook-endpoints/{endpoint_id}": (
        ErrorCode.FORBIDDEN,
        ErrorCode.WEBHOOK_ENDPOINT_NOT_FOUND,
    ),
    "POST /webhook-endpoints/{endpoint_id}/rotate-secret": (
        ErrorCode.FORBIDDEN,
        ErrorCode.WEBHOOK_ENDPOINT_NOT_FOUND,
    ),
    "GET /webhook-endpoints/{endpoint_id}/deliveries": (
        ErrorCode.FORBIDDEN,
        ErrorCode.WEBHOOK_ENDPOINT_NOT_FOUND,
    ),
    "GET /tasks/{task_id}/deliveries": (ErrorCode.FORBIDDEN, ErrorCode.TASK_NOT_FOUND),
    "POST /deliveries/{delivery_id}/redeliver": (ErrorCode.FORBIDDEN, ErrorCode.DELIVERY_NOT_FOUND),
    # console users
    "POST /users": (ErrorCode.FORBIDDEN, ErrorCode.USER_EXISTS, ErrorCode.EMAIL_IN_USE),
    "GET /users": (ErrorCode.FORBIDDEN,),
    "PATCH /users/{principal_id}": (
        ErrorCode.FORBIDDEN,
        ErrorCode.USER_NOT_FOUND,
        ErrorCode.EMAIL_IN_USE,
    ),
    "POST /users/{principal_id}/disable": (ErrorCode.FORBIDDEN, ErrorCode.USER_NOT_FOUND),
    "POST /users/{principal_id}/password-link": (
        ErrorCode.FORBIDDEN,
        ErrorCode.USER_NOT_FOUND,
        ErrorCode.STATE_CONFLICT,
    ),
}

#: Codes no operation lists, and why: answered by the HTTP layer for any path, by the
#: console's own pages (not part of the API), or never on their own.
NOT_PER_OPERATION: dict[ErrorCode, str] = {
    ErrorCode.BAD_REQUEST: "the kind's default; every refusal of the kind names its own code",
    ErrorCode.NOT_FOUND: "a path the API does not have",
    ErrorCode.METHOD_NOT_ALLOWED: "a method the path does not take",
    ErrorCode.HTTP: "any other HTTP-level refusal",
    ErrorCode.INTERNAL: "a bug, on any operation",
    ErrorCode.BAD_CREDENTIALS: "console sign-in",
    ErrorCode.USER_DISABLED: "console sign-in",
    ErrorCode.ACCOUNT_IS_LOCAL: "console single sign-on",
    ErrorCode.TOO_MANY_ATTEMPTS: "console sign-in",
    ErrorCode.LINK_INVALID: "the console's set-password page",
}
