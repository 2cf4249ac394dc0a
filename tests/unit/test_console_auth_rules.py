"""Pure rules of console sign-in: where ``next`` may lead, and roles from IdP groups."""

from __future__ import annotations

import pytest

from signoff.console.auth.core import login_url, safe_next
from signoff.console.auth.oidc import groups_of, principal_id_of, role_for
from signoff.domain.states import Role


@pytest.mark.parametrize(
    "target",
    ["/console", "/console/tasks/abc?view=mine", "/r/token-123", "/console/account#x"],
)
def test_paths_on_this_site_are_kept(target: str) -> None:
    assert safe_next(target) == target


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "/\t/evil.example",
        "/\n/evil.example",
        "/ /evil.example",
        "javascript:alert(1)",
        "console",
    ],
)
def test_anything_else_goes_to_the_inbox(target: str | None) -> None:
    assert safe_next(target) == "/console"


def test_login_url_keeps_the_way_back() -> None:
    assert login_url("/console") == "/console/login"
    assert login_url("/console/tasks/1?a=b") == "/console/login?next=/console/tasks/1%3Fa%3Db"
    assert login_url("//evil.example") == "/console/login"


def test_the_highest_mapped_role_wins() -> None:
    role_map = {"readers": "reviewer", "leads": "supervisor", "ops": "admin"}
    assert role_for(["x", "readers"], role_map) is Role.REVIEWER
    assert role_for(["readers", "leads"], role_map) is Role.SUPERVISOR
    assert role_for(["ops", "leads", "readers"], role_map) is Role.ADMIN
    assert role_for(["marketing"], role_map) is None
    assert role_for([], {}) is None


def test_groups_and_principal_from_claims() -> None:
    assert groups_of({"groups": ["a", "b"]}, "groups") == ["a", "b"]
    assert groups_of({"roles": "a b,c"}, "roles") == ["a", "b", "c"]
    assert groups_of({}, "groups") == []
    claims = {"sub": "123", "email": "ann@example.com", "preferred_username": "ann"}
    assert principal_id_of(claims, "preferred_username") == "ann"
    assert principal_id_of({"sub": "123", "email": "ann@example.com"}, "preferred_username") == (
        "ann@example.com"
    )
    assert principal_id_of({"sub": "123"}, "preferred_username") == "123"


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("short", "at least 10 characters"),
        ("x" * 1025, "at most 1024 characters"),
        ("aaaaaaaaaa", "too easy to guess"),
        (" " * 10, "too easy to guess"),
        ("password1234", "very common password"),
        ("qwertyuiop12", "too easy to guess"),
        ("ann-signoff-2024", "your user name"),
        ("ann@example.com1", "too easy to guess"),
    ],
)
def test_a_password_easy_to_guess_is_refused_saying_why(password: str, why: str) -> None:
    from signoff.errors import Unprocessable
    from signoff.services.users import check_password_rules

    with pytest.raises(Unprocessable) as refused:
        check_password_rules(password, context=["ann", "ann@example.com"])
    [error] = refused.value.errors
    assert error.field == "password"
    assert why in error.message


@pytest.mark.parametrize(
    "password",
    [
        "correct horse battery",
        "Tr0ub4dor&3 lamp",
        "ann likes quiet rivers",
        "é".join(["quiet river lamp"] * 60),
    ],
)
def test_a_long_unusual_password_passes_whatever_its_characters(password: str) -> None:
    from signoff.services.users import check_password_rules

    check_password_rules(password, context=["ann", "ann@example.com"])
