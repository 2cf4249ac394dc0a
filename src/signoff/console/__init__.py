"""The operator console: server-rendered pages for the people who decide.

Pages call the same services as the JSON API (one transition table, one place that
commits) and hold no SQL and no rule of their own. Everything the pages load (styles,
scripts, fonts) is served from ``static/``; nothing comes from another host.

Modules:
- ``auth``: users signing in (local passwords, OpenID Connect), sessions and CSRF; ends in
  the same :class:`signoff.domain.tasks.Principal` an API key does.
- ``inbox``: the inbox's views and filters, "start reviewing", supervisors' bulk actions.
- ``task_page``: the task screen, its lease and supervisor actions, the decide form.
- ``people``: admins add people, change their role and groups, disable and enable them.
- ``site``: ``/`` in a browser, and the page for an unknown console address.
- ``events``: live updates (Server-Sent Events, fed by ``live``).
- ``shared``: what the page modules share (the lease-token cookie, navigation, notices).
- ``routes``: mounts each page module's router and the static assets.
"""
