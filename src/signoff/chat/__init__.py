"""Chat doors: people decide from cards in their chat system (Slack,
:mod:`signoff.chat.slack`). A door parses what its chat system sends, asks
:mod:`signoff.services.chat` who the chat user is and what a button is bound to, and
decides through the same services as every other door.

Nothing here is imported unless a chat system is configured (``SIGNOFF_SLACK_*``)."""
