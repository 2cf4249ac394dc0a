"""A decision is exact and recorded once whichever door it comes through.

The doors: the REST API, the console's form, the e-mail resume link (as a form and as
JSON), and the console's bulk actions. Both engines run side by side on one shared clock
and every step is compared between them; twin tasks decided through different doors
must leave identical rows, audit trails and outbox events.
"""

from __future__ import annotations

from typing import Any

from signoff.domain.clock import ManualClock
from tests.doors import SUBJECT, Answer, Deployment, deployments, twin_escalation

TTL = 600


def _execution_refusal(answer: Answer) -> tuple[int, str | None, Any]:
    reason = answer.body.get("reason") if isinstance(answer.body, dict) else None
    return answer.status, answer.error_code, reason


def _approve_through_link_and_api(deployment: Deployment, clock: ManualClock) -> None:
    for handle in ("by-link", "by-api"):
        made = deployment.escalate(
            handle, twin_escalation(subject=SUBJECT, approval_ttl_seconds=TTL)
        )
        assert made.status == 201, made
        clock.advance(1)
    deployment.send_mail()
    by_link = deployment.resolve_link("alice", "by-link", "APPROVED", None, form=True)
    assert by_link.status == 200, by_link
    assert deployment.claim("alice", "by-api").status == 200
    by_api = deployment.resolve_api("alice", "by-api", "APPROVED", None)
    assert by_api.status == 200, by_api


def test_an_approval_through_a_resume_link_expires_like_one_through_the_api(
    database_url: str, clock: ManualClock
) -> None:
    with deployments({"only": database_url}, clock) as (deployment,):
        _approve_through_link_and_api(deployment, clock)
        clock.advance(TTL + 1)
        by_api = _execution_refusal(deployment.execute("by-api"))
        by_link = _execution_refusal(deployment.execute("by-link"))
    assert by_api == (409, "ERR_APPROVAL_NOT_VALID", "APPROVAL_EXPIRED")
    assert by_link == by_api, (
        f"after the approval TTL, execute answers {by_api} for the API's approval "
        f"but {by_link} for the resume link's"
    )
