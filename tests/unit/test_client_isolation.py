"""The SDK stands alone: it imports nothing of the server, and its digests are the server's."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signoff.client import digest, precheck_hash
from signoff.domain.digests import json_digest, precheck_hash_candidates

SERVER_ONLY = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "asyncpg",
    "aiosqlite",
    "uvicorn",
    "jsonschema",
    "structlog",
    "typer",
    "jinja2",
    "signoff.services",
    "signoff.store",
    "signoff.api",
    "signoff.domain",
)


def test_importing_the_sdk_imports_nothing_of_the_server() -> None:
    probe = (
        "import json, sys; import signoff.client; print(json.dumps(sorted(m for m in sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout)
    leaked = [m for m in loaded if m.startswith(SERVER_ONLY)]
    assert leaked == []
    ours = {m for m in loaded if m == "signoff" or m.startswith("signoff.")}
    assert all(m == "signoff" or m.startswith("signoff.client") for m in ours), ours


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


# No deadline: the machine is shared, and a slow example is not a wrong one.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_the_sdk_digest_is_the_servers(value: Any) -> None:
    assert digest(value) == json_digest(value)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=3), max_size=3))
def test_the_sdk_precheck_hash_is_the_one_the_server_prefers(actions: list[Any]) -> None:
    assert precheck_hash(actions) == precheck_hash_candidates(actions)[0]
