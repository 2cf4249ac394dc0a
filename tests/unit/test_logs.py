"""Log lines off a terminal: one JSON object per line on stderr, written as bytes, with
resume-link tokens redacted; a value orjson refuses still makes a line."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator

import pytest
import structlog

from signoff.logs import configure_logging


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.BytesIO]:
    raw = io.BytesIO()
    # Held here: pytest's own capture may put its stderr back between phases, and a
    # wrapper nobody holds closes ``raw`` when it is collected.
    wrapper = io.TextIOWrapper(raw, encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", wrapper)
    configure_logging("info")
    yield raw
    structlog.reset_defaults()
    wrapper.detach()


def _lines(raw: io.BytesIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in raw.getvalue().decode().splitlines()]


def test_a_line_is_json_with_its_event_and_level(stderr: io.BytesIO) -> None:
    structlog.get_logger("signoff.test").info("task.created", task_id="t-1", version=1)
    [line] = _lines(stderr)
    assert line["event"] == "task.created"
    assert (line["level"], line["task_id"], line["version"]) == ("info", "t-1", 1)
    assert str(line["timestamp"]).endswith("Z")


def test_values_orjson_refuses_still_make_a_line(stderr: io.BytesIO) -> None:
    log = structlog.get_logger("signoff.test")
    log.info("odd.values", keys={1: 2}, big=2**70, text="a\ud800b")
    [line] = _lines(stderr)
    assert line["keys"] == {"1": 2}
    assert line["big"] == 2**70
    assert line["text"] == "a\ud800b"


def test_resume_tokens_are_redacted_in_fields_and_tracebacks(stderr: io.BytesIO) -> None:
    log = structlog.get_logger("signoff.test")
    log.info("link.opened", path="/r/secret-token-1")
    try:
        raise ValueError("while serving /r/secret-token-2")
    except ValueError:
        log.exception("request.failed")
    text = stderr.getvalue().decode()
    assert "secret-token" not in text
    first, second = _lines(stderr)
    assert first["path"] == "/r/[redacted]"
    assert "/r/[redacted]" in str(second["exception"])


def test_resume_tokens_are_redacted_inside_nested_values(stderr: io.BytesIO) -> None:
    details = {"links": ["https://signoff.example/r/secret-token-3"], "n": 1}
    log = structlog.get_logger("signoff.test")
    log.info("notice.sent", details=details, pair=("/r/secret-token-4", 2))
    text = stderr.getvalue().decode()
    assert "secret-token" not in text
    [line] = _lines(stderr)
    assert line["details"] == {"links": ["https://signoff.example/r/[redacted]"], "n": 1}
    assert line["pair"] == ["/r/[redacted]", 2]
    # The caller's own value is not changed by being logged.
    assert details["links"] == ["https://signoff.example/r/secret-token-3"]


def test_a_terminal_traceback_is_redacted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the console renderer formats the traceback itself, after the
    processors; its text is redacted as a whole."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    configure_logging("info")
    try:
        log = structlog.get_logger("signoff.test")
        log.info("link.opened", details={"path": "/r/secret-token-5"})
        try:
            raise ValueError("while serving /r/secret-token-6")
        except ValueError:
            log.exception("request.failed")
    finally:
        structlog.reset_defaults()
    text = terminal.getvalue()
    assert "ValueError" in text
    assert "link.opened" in text
    assert "secret-token" not in text
    assert text.count("/r/[redacted]") >= 2


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("/console/set-password/secret-token-3", "/console/set-password/[redacted]"),
        (
            "GET /console/login/sso/callback?code=secret-token-4&state=secret-token-5&iss=x",
            "GET /console/login/sso/callback?code=[redacted]&state=[redacted]&iss=x",
        ),
        ("/x?ACCESS_TOKEN=secret-token-6", "/x?ACCESS_TOKEN=[redacted]"),
        ("/console?view=mine&q=code", "/console?view=mine&q=code"),
    ],
)
def test_every_credential_a_url_carries_is_redacted(
    stderr: io.BytesIO, text: str, kept: str
) -> None:
    structlog.get_logger("signoff.test").info("http.request", path=text)
    [line] = _lines(stderr)
    assert "secret-token" not in stderr.getvalue().decode()
    assert line["path"] == kept
