"""The keyboard shortcuts a reviewer relies on, pressed in a real browser: j/k and Enter in
the inbox, c and e on a task, ? and / anywhere. Plus what a person signed in twice sees."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.console.conftest import PASSWORD, Served

expect = pytest.importorskip("playwright.sync_api").expect


def _selected(page: Any) -> str:
    return str(page.evaluate("document.querySelector('#rows tr.selected').dataset.taskId"))


def test_j_and_k_move_through_the_inbox_and_enter_opens_the_selected_task(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    for _ in range(3):
        served.escalate(producer)
    ann = signed_in("ann")
    ann.goto("/console?view=available")
    order = ann.evaluate(
        "[...document.querySelectorAll('#rows tr[data-task-id]')].map(r => r.dataset.taskId)"
    )
    assert len(order) == 3
    ann.locator("body").focus()
    ann.keyboard.press("j")
    assert _selected(ann) == order[0]
    ann.keyboard.press("j")
    ann.keyboard.press("j")
    ann.keyboard.press("j")  # stops at the last row
    assert _selected(ann) == order[2]
    ann.keyboard.press("k")
    assert _selected(ann) == order[1]
    expect(ann.locator("#rows tr.selected .row-link")).to_be_focused()
    ann.keyboard.press("Enter")
    ann.wait_for_url(re.compile(f"/console/tasks/{order[1]}"))
    expect(ann.get_by_text("Nobody holds this task.")).to_be_visible()


def test_c_claims_the_open_task_and_e_extends_the_lease(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    expect(ann.get_by_text("Nobody holds this task.")).to_be_visible()
    ann.locator("body").focus()
    ann.keyboard.press("c")
    expect(ann.locator("#lease-timer")).to_be_visible()
    expect(ann.locator("#notices")).to_contain_text("You hold the lease now.")
    ann.keyboard.press("e")
    expect(ann.locator("#notices")).to_contain_text("Lease extended")
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["status"], task["claimed_by"]) == ("CLAIMED", "ann")


def test_question_mark_lists_the_shortcuts_and_slash_jumps_to_the_search(
    served: Served, signed_in: Any
) -> None:
    ann = signed_in("ann")
    ann.locator("body").focus()
    ann.keyboard.press("?")
    dialog = ann.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Start reviewing")
    ann.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    ann.keyboard.press("/")
    expect(ann.get_by_label("Search", exact=True)).to_be_focused()
    ann.keyboard.press("j")  # on a field: a shortcut does nothing
    expect(ann.locator("#rows tr.selected")).to_have_count(0)


def test_a_reviewer_signed_in_twice_is_told_they_hold_the_task_in_another_window(
    served: Served, signed_in: Any, chromium: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    first = signed_in("ann")
    first.goto(f"/console/tasks/{task_id}")
    first.get_by_role("button", name="Claim").click()
    expect(first.locator("#lease-timer")).to_be_visible()

    context = chromium.new_context(base_url=served.base_url)
    try:
        second = context.new_page()
        second.goto("/console/login")
        second.get_by_label("Username").fill("ann")
        second.get_by_label("Password").fill(PASSWORD)
        second.get_by_role("button", name="Sign in").click()
        second.wait_for_url("**/console")
        second.goto(f"/console/tasks/{task_id}")
        decision = second.locator(".decision")
        expect(decision).to_contain_text("You hold this task in another window")
        expect(decision).not_to_contain_text("Held by ann")
        # A time a person reads, not a machine timestamp.
        expect(decision).not_to_contain_text(re.compile(r"\d{4}-\d\d-\d\dT"))
        second.get_by_role("button", name="Claim it here").click()
        expect(second.locator("#lease-timer")).to_be_visible()
    finally:
        context.close()


def test_after_claiming_by_keyboard_tab_goes_on_in_the_decision_panel(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ann.locator("body").focus()
    ann.keyboard.press("c")
    expect(ann.locator("#lease-timer")).to_be_visible()
    expect(ann.get_by_role("heading", name="Decision")).to_be_focused()
    ann.keyboard.press("Tab")  # not back to "Skip to content" at the top of the page
    expect(ann.get_by_label("Notes")).to_be_focused()
    ann.keyboard.press("e")  # typed into Notes: no extension
    expect(ann.get_by_label("Notes")).to_have_value("e")


def test_at_375_pixels_the_inbox_rows_still_say_what_age_and_group_are(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    served.escalate(producer)
    ann = signed_in("ann", width=375)
    ann.goto("/console?view=available")
    row = ann.locator("#rows tr[data-task-id]").first
    expect(row).to_be_visible()
    expect(ann.locator("table.tasks thead")).to_be_hidden()  # headings hidden at this width
    labels = row.evaluate(
        "r => [...r.querySelectorAll('td')].map(td => getComputedStyle(td, '::before').content)"
    )
    assert '"Age: "' in labels, labels
    assert '"Group: "' in labels, labels


def test_at_375_pixels_claim_is_within_reach_without_scrolling_past_the_history(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann", width=375)
    ann.goto(f"/console/tasks/{task_id}")
    claim = ann.get_by_role("button", name="Claim")
    expect(claim).to_be_in_viewport()
    claim.click()
    expect(ann.get_by_role("button", name="Approve")).to_be_in_viewport()


def test_an_unknown_email_link_says_what_to_do(served: Served, chromium: Any) -> None:
    context = chromium.new_context(base_url=served.base_url)
    try:
        page = context.new_page()
        response = page.goto("/r/not-a-link-anyone-sent")
        assert response is not None
        assert response.status < 500
        expect(page.get_by_role("status")).to_contain_text("not known")
        expect(page.get_by_text("What to do")).to_be_visible()
        page.get_by_role("link", name="sign in to the console").click()
        page.wait_for_url("**/console/login**")
    finally:
        context.close()


def test_r_then_enter_rejects_once_the_notes_are_typed(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    ann.locator("body").focus()
    ann.keyboard.press("r")
    notes = ann.get_by_label("Notes")
    expect(notes).to_be_focused()  # the page says what is needed, where it is needed
    expect(ann.locator("#notes-pending")).to_contain_text(
        "Reject: type your notes here (say why, so the requester can act on it)"
    )
    ann.keyboard.press("Enter")  # nothing typed yet: nothing sent, and it says why
    expect(ann.locator("#decide-error")).to_contain_text("Notes are required to reject")
    expect(notes).to_have_value("")
    ann.keyboard.type("the amount is above the approved limit")
    ann.keyboard.press("Enter")
    ann.wait_for_url("**/console?notice=decided")
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["decision"], task["notes"]) == (
        "REJECTED",
        "the amount is above the approved limit",
    )


def test_esc_leaves_the_notes_and_the_shortcuts_work_again(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    notes = ann.get_by_label("Notes")
    notes.click()
    ann.keyboard.type("duplicate of an earlier payout")
    ann.keyboard.press("Control+Enter")  # no decision chosen yet: it says how
    expect(ann.locator("#decide-error")).to_contain_text("Choose a decision first")
    ann.keyboard.press("Escape")
    expect(notes).not_to_be_focused()
    ann.keyboard.press("r")  # a shortcut again, not an "r" in the notes
    expect(notes).to_have_value("duplicate of an earlier payout")
    expect(ann.locator("#confirm-text")).to_contain_text("Reject")
    ann.keyboard.press("Escape")  # cancels the confirmation
    expect(ann.locator("#confirm")).to_be_hidden()
    ann.keyboard.press("r")
    ann.keyboard.press("Meta+Enter")  # Cmd+Enter sends the chosen decision too
    ann.wait_for_url("**/console?notice=decided")
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["decision"], task["notes"]) == ("REJECTED", "duplicate of an earlier payout")
