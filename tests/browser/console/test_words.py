"""What the task page says to a reviewer: changes word by word under field names, times
and history in words (no ISO timestamps, no error codes, no event names), and the AI
recommendation labelled with the revision it read."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.browser.console.conftest import Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect

SUBJECT: dict[str, Any] = {
    "title": "Quarterly results",
    "body": "Revenue grew 12% year on year, driven by the new payments product.",
    "actions": [{"id": "publish_article"}],
}
SUMMARY = {
    "recommendation": "REJECT",
    "rationale": "The figure is not in the wire.",
    "generated_by": "summariser-v2",
}
#: What a reviewer never reads: timestamps with microseconds, error codes, event names,
#: JSON Pointers, unified-diff headers.
CODES = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+|ERR_[A-Z]|task\.[a-z_]+|/actions/0|^@@ |^--- from",
    re.MULTILINE,
)


def _revise(served: Served, producer: str, task_id: str, expected: int, **changes: Any) -> None:
    with served.api(producer) as api:
        response = api.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": f'"{expected}"'},
            json={"subject": SUBJECT | changes},
        )
    assert response.status_code == 200, response.text


def _reviewer_key(served: Served, principal_id: str) -> httpx.Client:
    return httpx.Client(
        base_url=served.base_url,
        headers={"Authorization": f"Bearer {served.key('reviewer', principal_id)}"},
        timeout=30,
    )


def test_a_revision_reads_word_by_word_and_the_ai_recommendation_says_what_it_read(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT, summary=SUMMARY)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ai = ann.get_by_role("region", name="AI recommendation — a person decides")
    expect(ai).to_contain_text("Written for revision 1, the current one.")
    expect(ai).to_contain_text("REJECT: The figure is not in the wire.")
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    _revise(
        served,
        producer,
        task_id,
        1,
        body="Revenue grew 14% year on year, driven by the new payments product.",
        actions=[{"id": "publish_summary"}],
    )
    expect(ann.locator("#notices")).to_contain_text(
        "Revision 2 arrived from bot; changed: Actions › 1 › Id, Body", timeout=40000
    )
    diff = ann.locator("table.diff")
    body_row = diff.get_by_role("row", name=re.compile("^Body"))
    expect(body_row.locator("del")).to_have_text("removed: 12")
    expect(body_row.locator("ins")).to_have_text("added: 14")
    expect(body_row).to_contain_text("year on year, driven by the new payments product.")
    expect(body_row.locator("del .sr-only")).to_have_text("removed:")
    expect(diff.get_by_role("rowheader", name="Actions › 1 › Id")).to_be_visible()
    expect(ann.get_by_text("Added words are underlined")).to_be_visible()
    # The recommendation still read revision 1: it says so, beside the decision.
    expect(ai).to_contain_text("Written for revision 1; the content has changed since")
    expect(ai.locator(".stale")).to_be_visible()
    history = ann.locator("table.history")
    expect(history).to_contain_text("bot sent this for review")
    expect(history).to_contain_text("You started reviewing it")
    expect(history).to_contain_text("Revision 2 arrived from bot")
    expect(history.locator("time").first).to_have_text(
        re.compile(r"^\d{1,2} \w{3} \d{4}, \d\d:\d\d UTC$")
    )
    assert CODES.findall(ann.locator("main").inner_text()) == []
    assert axe_violations(ann) == []
    ann.set_viewport_size({"width": 375, "height": 740})
    assert axe_violations(ann) == []
    # The confirmation names the decision and the revision once each.
    ann.get_by_label("Notes").fill("the figure is not in the wire")
    ann.get_by_role("button", name="I have read revision 2").click()
    ann.get_by_role("button", name="Request revision").click()
    expect(ann.locator("#confirm-text")).to_contain_text("Request revision “")
    expect(ann.locator("#confirm-text")).to_contain_text("” (revision 2)?")


def test_a_revision_after_a_revision_request_and_a_refusal_read_as_plain_words(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT)
    with _reviewer_key(served, "rita") as rita:
        token = rita.post(f"/tasks/{task_id}/claim").json()["lease_token"]
        asked = rita.post(
            f"/tasks/{task_id}/resolve",
            headers={"X-Lease-Token": token},
            json={
                "decision": "REVISION_REQUESTED",
                "operator_id": "rita",
                "notes": "name the quarter",
                "revision": 1,
                "digest": rita.get(f"/tasks/{task_id}").json()["digest"],
            },
        )
        assert asked.status_code == 200, asked.text
    _revise(served, producer, task_id, 1, title="Q3 results")
    ann = signed_in("ann")
    ann.route("**/console/events*", lambda route: route.abort())  # hears of nothing live
    ann.goto(f"/console/tasks/{task_id}")
    history = ann.locator("table.history")
    expect(history).to_contain_text("rita asked for a revision")
    expect(history).to_contain_text("Revision 2 arrived from bot; changed: Title. Back in review")
    expect(history).not_to_contain_text("approv")  # nothing was approved
    expect(history).not_to_contain_text("invalidated")
    with _reviewer_key(served, "bob") as bob:
        assert bob.post(f"/tasks/{task_id}/claim").status_code == 200
    ann.get_by_role("button", name="Claim").click()
    refusal = ann.locator("#notices .notice.error")
    expect(refusal).to_contain_text(
        re.compile(r"^bob has been reviewing this task since \d{1,2} \w{3} \d{4}, \d\d:\d\d UTC")
    )
    expect(refusal).to_contain_text("Try again later, or ask bob whether they will decide it.")
    expect(ann.get_by_text("Held by bob")).to_be_visible()
    assert CODES.findall(ann.locator("main").inner_text()) == []
