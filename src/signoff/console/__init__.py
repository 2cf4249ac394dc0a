"""The operator console: server-rendered pages for the people who decide.

Pages call the same services as the JSON API (one transition table, one place that
commits) and hold no SQL and no rule of their own. Everything the pages load (styles,
scripts, fonts) is served from ``static/``; nothing comes from another host.

Modules:
- ``auth``: users signing in (local passwords, OpenID Connect), sessions and CSRF; ends in
  the same :class:`signoff.domain.tasks.Principal` an API key does.
- ``pages``: the inbox, the task screen and the supervisor views.
"""
