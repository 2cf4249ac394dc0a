"""Optional glue for agent frameworks, each behind its own extra (``signoff[langgraph]``,
``signoff[mcp]``). Like :mod:`signoff.client`, they import nothing of the server."""
