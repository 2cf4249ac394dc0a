"""Off, the Slack door costs nothing: an application built without its settings imports
neither Slack's libraries nor the door, and has no ``/slack/events``."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from signoff.api.app import create_app
from signoff.settings import Settings
app = create_app(Settings(database_url="sqlite:///unused.db", slack_bot_token="xoxb-only"))
paths = {getattr(route, "path", None) for route in app.routes}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("slack_bolt", "slack_sdk"))
print("SLACK", "/slack/events" in paths, loaded, "signoff.chat.slack" in sys.modules)
"""


def test_without_its_settings_nothing_of_slack_is_imported() -> None:
    # A bot token alone is not enough: Slack could not reach this server.
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    )
    line = next(x for x in result.stdout.splitlines() if x.startswith("SLACK "))
    assert line == "SLACK False [] False"
