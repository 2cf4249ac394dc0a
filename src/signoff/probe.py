"""``python3 -m signoff.probe [/healthz|/readyz]``: ask the local server; exit 0 on a 200.

The container image's health check and the Kubernetes readiness probe (``/readyz`` needs an
API key: any role's, read from the environment variable :data:`KEY_VARIABLE`). Only the
standard library: a probe runs every few seconds and must start fast.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

#: The environment variable holding the API key ``/readyz`` is asked with.
KEY_VARIABLE = "SIGNOFF_PROBE_API_KEY"
#: Where the server listens unless ``SIGNOFF_PORT`` says otherwise (Settings.port's default).
DEFAULT_PORT = 8000


def probe(path: str, *, timeout: float = 4) -> bool:
    port = os.environ.get("SIGNOFF_PORT", str(DEFAULT_PORT))
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    key = os.environ.get(KEY_VARIABLE)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            return int(answer.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else "/healthz"
    return 0 if probe(path) else 1


if __name__ == "__main__":
    raise SystemExit(main())
