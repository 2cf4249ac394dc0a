"""The SDK keeps its own copy of the server's codes (it imports nothing of the server); these
tests hold that copy equal to ``signoff.errors.ErrorCode``."""

from __future__ import annotations

from signoff.client._errors import (
    BY_CODE,
    BY_STATUS,
    BY_STATUS_ONLY,
    ApiError,
    ServerError,
    error_from_response,
)
from signoff.errors import ErrorCode

SERVER_CODES = {code.value: code for code in ErrorCode}


def test_the_sdk_names_every_server_code_and_no_other() -> None:
    unknown = (set(BY_CODE) | BY_STATUS_ONLY) - set(SERVER_CODES)
    assert not unknown, f"the SDK names codes the server does not have: {sorted(unknown)}"
    missing = set(SERVER_CODES) - set(BY_CODE) - BY_STATUS_ONLY
    assert not missing, (
        "give these server codes an SDK exception in BY_CODE, or list them in BY_STATUS_ONLY "
        f"(src/signoff/client/_errors.py): {sorted(missing)}"
    )
    both = set(BY_CODE) & BY_STATUS_ONLY
    assert not both, f"in both BY_CODE and BY_STATUS_ONLY: {sorted(both)}"


def test_each_specific_exception_is_a_kind_of_its_status_class() -> None:
    """Catching ``Conflict`` catches ``LeaseLost``: the narrow class refines its status."""
    for value, kind in BY_CODE.items():
        status = SERVER_CODES[value].status
        assert status is not None, value
        assert issubclass(kind, BY_STATUS[status]), (value, kind, BY_STATUS[status])


def test_a_code_left_to_its_status_becomes_that_status_class() -> None:
    for value in sorted(BY_STATUS_ONLY):
        status = SERVER_CODES[value].status or 500
        error = error_from_response(status, {"error_code": value, "message": "refused"})
        expected = BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
        assert type(error) is expected, (value, type(error))
        assert error.error_code == value
