"""Approvals bound to versions: a subject's revisions (:mod:`signoff.services.revisions`)
and the execution gate (:mod:`signoff.services.execution`), under one name."""

from signoff.services.execution import (
    ExecutionGrant,
    execute,
    execution_lease_view,
    finish_action,
    grant_view,
    renew_execution,
    report_stalled_executions,
)
from signoff.services.revisions import (
    diff,
    get_revision,
    list_revisions,
    note_view,
    parse_if_match,
    revise_subject,
    revoke_source,
)

__all__ = [
    "ExecutionGrant",
    "diff",
    "execute",
    "execution_lease_view",
    "finish_action",
    "get_revision",
    "grant_view",
    "list_revisions",
    "note_view",
    "parse_if_match",
    "renew_execution",
    "report_stalled_executions",
    "revise_subject",
    "revoke_source",
]
