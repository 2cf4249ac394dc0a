"""Every value a door parses by hand (numbers in query values, form fields and headers;
cursors that are base64 of JSON), fed odd shapes on SQLite and PostgreSQL: digits of other
scripts and superscripts (``"²".isdigit()`` is true), huge integers (5,000 digits), signs
and spaces, and valid base64 of JSON of the wrong shape. Each is a 4xx naming the field
(a problem from the API, a page from the console), never a 5xx, and nothing is written.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from signoff.domain.clock import ManualClock
from signoff.domain.text_guard import MAX_PARAMETER_LENGTH
from tests.doors import GROUP, SUBJECT, Deployment, deployments
from tests.support import escalation

#: Numbers no door may read as a number.
ODD_NUMBERS = [
    "²",
    "¹²",
    "٣",  # ARABIC-INDIC DIGIT THREE
    "１",  # FULLWIDTH DIGIT ONE
    "𝟗",  # MATHEMATICAL BOLD DIGIT NINE
    "+1",
    "-1",
    " 1",
    "1 ",
    "1.0",
    "1e3",
    "0x1",
    "1_000",
    "9" * 5000,
    "9" * 20,
    str(2**31),
    str(2**63),
]

odd_numbers = st.one_of(
    st.sampled_from(ODD_NUMBERS),
    st.integers(min_value=2**31, max_value=10**80).map(str),
    st.text(
        alphabet=st.characters(categories=["Nd", "No", "Nl"], exclude_characters="0123456789"),
        min_size=1,
        max_size=6,
    ),
    st.tuples(st.integers(0, 9), st.sampled_from(["²", "٣", " ", "+", "-", "."])).map(
        lambda pair: f"{pair[0]}{pair[1]}"
    ),
)


#: Filters are trimmed of spaces, as every filter is. A query value longer than
#: MAX_PARAMETER_LENGTH never reaches a route: the request boundary's text guard refuses it
#: first, for every address alike (tests/integration/test_text_guard.py).
odd_levels = odd_numbers.filter(
    lambda raw: (
        re.fullmatch(r"[0-9]{1,5}", raw.strip()) is None and len(raw) <= MAX_PARAMETER_LENGTH
    )
)


def token(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
#: Valid base64 of JSON that is no cursor of any kind: objects, scalars, and arrays whose
#: first item is no position (every cursor is an array).
wrong_json = st.one_of(
    json_scalars,
    st.dictionaries(st.text(max_size=4), json_scalars, max_size=3),
    st.lists(json_scalars, max_size=3).filter(lambda items: not items or type(items[0]) is not int),
    st.lists(
        st.dictionaries(st.text(max_size=3), json_scalars, max_size=2), min_size=1, max_size=2
    ),
    st.sampled_from([[2**64], [-1], [1, "x", "y"], [1, 2], [1, 2, 3, 4], [[1]], {"0": 1}]),
)
wrong_tokens = st.one_of(
    wrong_json.map(token),
    st.sampled_from(["[" * 150, "e30", "!!!", "5Y-_", "a", "é"]),
)

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def deployment(engine: str, database_url: str, clock: ManualClock) -> Iterator[Deployment]:
    with deployments({engine: database_url}, clock) as built:
        yield built[0]


def field_named(response: Any, field: str) -> bool:
    body = response.json()
    return body["error_code"] == "ERR_VALIDATION" and field in {e["field"] for e in body["errors"]}


def refused_page(response: Any) -> bool:
    """A console page (not a traceback, not a problem document) with a 4xx status."""
    kind = response.headers.get("content-type", "")
    return 400 <= response.status_code < 500 and kind.startswith("text/html")


def voting_task(deployment: Deployment, handle: str) -> str:
    body = escalation(
        f"{handle}-{uuid.uuid4().hex[:6]}",
        subject=SUBJECT,
        approval_rule={"approvals": 2},
        assigned_group=GROUP,
    )
    assert deployment.escalate(handle, body).status == 201
    return deployment.task_id(handle)


# The API -------------------------------------------------------------------------------


def test_catch_up_and_task_list_cursors_of_the_wrong_shape_are_refused(
    deployment: Deployment,
) -> None:
    voting_task(deployment, "seen")

    @PROPERTY
    @given(cursor=wrong_tokens)
    @example(cursor=token({"order": 1}))
    @example(cursor=token({}))
    def check(cursor: str) -> None:
        for path in ("/events", "/tasks"):
            answer = deployment.producer.get(path, params={"cursor": cursor})
            assert answer.status_code == 422, (path, cursor, answer.text)
            assert field_named(answer, "cursor"), answer.text

    check()


def header_bytes(text: str) -> bytes:
    """A header as a client may send it: Latin-1 where it can be (``²`` is one byte)."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


def test_if_match_of_odd_digits_names_no_revision(deployment: Deployment) -> None:
    task_id = voting_task(deployment, "revised")

    @PROPERTY
    @given(number=odd_numbers)
    @example(number="²")
    def check(number: str) -> None:
        answer = deployment.producer.put(
            f"/tasks/{task_id}/subject",
            json=SUBJECT | {"amount": "200 EUR"},
            headers={"If-Match": header_bytes(f'"{number}"')},
        )
        assert answer.status_code == 412, (number, answer.text)
        assert answer.json()["error_code"] == "ERR_REVISION_CONFLICT"

    check()
    assert deployment.producer.get(f"/tasks/{task_id}").json()["current_revision"] == 1


# The console ---------------------------------------------------------------------------


def test_inbox_levels_and_page_links_of_odd_shapes_are_refused_on_the_page(
    deployment: Deployment,
) -> None:
    voting_task(deployment, "listed")
    browser = deployment.console["alice"]

    @PROPERTY
    @given(level=odd_levels, after=wrong_tokens)
    @example(level="²", after=token({"order": 1}))
    def check(level: str, after: str) -> None:
        for params in ({"level": level}, {"after": after}):
            for path in ("/console", "/console/inbox/rows"):
                answer = browser.get(path, params=params)
                assert refused_page(answer), (path, params, answer.status_code, answer.text)
        counted = browser.get(
            "/console/inbox/new", params={"level": level, "since": "2026-01-01T00:00:00Z"}
        )
        assert counted.status_code == 422, counted.text
        assert counted.json()["errors"] == ["level"]

    check()
    # A level in digits still filters.
    assert browser.get("/console", params={"level": "0"}).status_code == 200


def test_vote_and_decide_forms_refuse_odd_revisions_and_write_nothing(
    deployment: Deployment,
) -> None:
    ballot = voting_task(deployment, "ballot")
    made = escalation(f"plain-{uuid.uuid4().hex[:6]}", subject=SUBJECT, assigned_group=GROUP)
    assert deployment.escalate("plain", made).status == 201
    assert deployment.console_claim("bot", "plain").status == 200
    digest = deployment.api["alice"].get(f"/tasks/{ballot}").json()["digest"]

    @PROPERTY
    @given(revision=odd_numbers)
    @example(revision="²")
    @example(revision="9" * 5000)
    def check(revision: str) -> None:
        form = {"decision": "APPROVED", "revision": revision, "digest": digest}
        voted = deployment._console_action("alice", "ballot", "vote", form)
        assert voted.status == 422, (revision, voted)
        assert voted.error_code == "ERR_VALIDATION"
        decided = deployment._console_action("bot", "plain", "decide", form)
        assert decided.status == 422, decided
        assert decided.error_code == "ERR_VALIDATION"
        viewed = deployment.console["alice"].post(
            f"/console/tasks/{ballot}/viewed",
            data={"csrf": deployment.console_csrf["alice"], "revision": revision},
        )
        assert viewed.status_code == 422

    check()
    assert deployment.producer.get(f"/tasks/{ballot}").json()["approval_progress"]["approvals"] == 0
    assert deployment.producer.get(f"/tasks/{deployment.task_id('plain')}").json()["status"] == (
        "CLAIMED"
    )


def test_resume_link_form_refuses_odd_revisions(deployment: Deployment) -> None:
    voting_task(deployment, "mailed")
    deployment.send_mail()
    link = deployment.links[("alice", "mailed")]
    browser = deployment.console["alice"]
    page = browser.get(link)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, page.text

    @PROPERTY
    @given(revision=odd_numbers)
    @example(revision="²")
    def check(revision: str) -> None:
        answer = browser.post(
            link, data={"decision": "APPROVED", "csrf": csrf.group(1), "revision": revision}
        )
        assert refused_page(answer), (revision, answer.status_code, answer.text[:500])

    check()
    state = deployment.producer.get(f"/tasks/{deployment.task_id('mailed')}").json()
    assert state["approval_progress"]["approvals"] == 0
