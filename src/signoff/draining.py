"""The process is stopping: whatever waits for a change answers now.

Parked long-polls and open event streams would otherwise hold the server's graceful
shutdown until their own time is up. The server calls :func:`stopping` as soon as it
stops accepting connections (before it waits for the requests in flight); each
application registers what to wake with :func:`when_stopping`.
"""

from __future__ import annotations

from collections.abc import Callable

_hooks: set[Callable[[], None]] = set()


def when_stopping(hook: Callable[[], None]) -> Callable[[], None]:
    """Call ``hook`` once when the server stops; returns the function that forgets it."""
    _hooks.add(hook)
    return lambda: _hooks.discard(hook)


def stopping() -> None:
    """Run every registered hook once (later calls find none left)."""
    hooks = list(_hooks)
    _hooks.clear()
    for hook in hooks:
        hook()
