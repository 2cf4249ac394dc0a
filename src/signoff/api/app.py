"""The FastAPI application factory."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from signoff import __version__
from signoff.api.docs import install_docs
from signoff.api.fastlane import FastLane, SignoffAPI
from signoff.api.guard import TextGuard
from signoff.api.latency import LatencyMiddleware
from signoff.api.openapi import build_openapi
from signoff.api.problems import http_problem, install_problem_handlers
from signoff.api.routes import admin, approvals, events, grants, tasks, votes, waiting, webhooks
from signoff.api.routes import evidence as evidence_routes
from signoff.api.routes import supervision as supervision_routes
from signoff.api.routes import users as user_routes
from signoff.console.auth import install_auth
from signoff.console.routes import install_console
from signoff.domain.clock import Clock, SystemClock
from signoff.draining import when_stopping
from signoff.metrics import process_stopped
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import open_database
from signoff.tracing import install as install_tracing
from signoff.workers.runner import run_workers

DESCRIPTION = """\
Signoff sits between machines and people: producers escalate work with context proof,
reviewers claim it under a lease and decide, and the decision flows back to the source.

Authenticate with `Authorization: Bearer <API key>` everywhere except `/healthz` and
the public keys at `/.well-known/jwks.json`.
Errors are RFC 9457 problem details (`application/problem+json`) with a stable
`error_code`.
"""


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> FastAPI:
    """Build the application. The database engine is created when the app starts (in the
    serving event loop) and disposed when it stops. The schema must already be migrated:
    see :func:`signoff.bootstrap.prepare_database`."""
    settings = settings or Settings()
    clock = clock or SystemClock()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        database = open_database(settings)
        shield = None
        if settings.redis_url:
            from signoff.services.shield import StormShield

            shield = StormShield(
                settings.redis_url,
                wait_seconds=settings.storm_shield_wait_seconds,
                connections=settings.storm_shield_connections,
            )
        context = ServiceContext(database=database, settings=settings, clock=clock, shield=shield)
        app.state.context = context
        slack = None
        if settings.slack_enabled:  # off: nothing of Slack is imported
            from signoff.chat.slack import SlackDoor

            slack = SlackDoor(context)
            await slack.start()
            app.state.slack = slack
        stop = asyncio.Event()
        worker = asyncio.create_task(run_workers(context, stop)) if settings.run_workers else None
        if database.dialect == "postgresql":
            database.escalations.start()  # says at start-up when escalations go alone
        if not settings.api_key_cache or (settings.pgbouncer and not settings.listen_database_url):
            database.key_cache.disable()  # LISTEN does not pass a transaction pooler
        else:
            database.key_cache.start()
        # Everything made at start-up (modules, routes, schemas) lives as long as the
        # process: keep it out of the cyclic collector's full passes, which otherwise walk
        # it all again and again under load (pauses in the tail latency). `signoff serve`
        # turned the collector off while it started (cli/server.py): on again from here.
        gc.freeze()
        gc.enable()
        # The server stopping wakes every long-poll and event stream at once.
        forget = when_stopping(database.changes.drain)
        try:
            yield
        finally:
            forget()
            stop.set()
            if slack is not None:
                await slack.stop()
            if worker is not None:
                await worker  # drains the attempts in flight
            if shield is not None:
                await shield.close()
            await database.dispose()
            context.cpu.close()
            process_stopped()

    app = SignoffAPI(
        title="Signoff",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by install_docs from vendored assets, never a CDN
        redoc_url=None,
        openapi_url=None,  # served by install_docs from bytes encoded once per process
    )
    install_problem_handlers(app)
    app.add_middleware(FastLane, fastapi_app=app)  # the hot task routes (api/fastlane.py)
    app.add_middleware(TextGuard)  # one guard for path and query text (signoff.api.guard)
    app.add_middleware(LatencyMiddleware)  # measures every answer
    install_tracing(app)  # outermost when OTEL_TRACES_EXPORTER turns it on (signoff.tracing)
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    install_docs(app)
    app.include_router(admin.router)
    app.include_router(tasks.router)
    app.include_router(evidence_routes.router)
    app.include_router(approvals.router)
    app.include_router(votes.router)
    app.include_router(grants.router)
    app.include_router(waiting.router)
    app.include_router(webhooks.router)
    app.include_router(events.router)
    app.include_router(user_routes.router)
    app.include_router(supervision_routes.router)
    install_auth(app, settings)
    install_console(app, http_problem)
    if settings.slack_enabled and settings.slack_signing_secret:  # HTTP only when verified
        from signoff.chat.slack import install_slack

        install_slack(app)
    return app
