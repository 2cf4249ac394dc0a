"""The other side of Signoff: ``listen`` (a webhook receiver that verifies signatures),
``mcp`` (review tools for agents) and ``slack-card`` (a task's Slack card, without Slack)."""

from __future__ import annotations

from typing import Annotated

import typer

from signoff.cli.common import (
    DatabaseOption,
    UserError,
    as_cli_admin,
    run_with_database,
    settings_from,
)


def listen(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    secret: Annotated[
        str | None,
        typer.Option(
            envvar="SIGNOFF_LISTEN_SECRET",
            help="The webhook endpoint's secret (whsec_...), to verify signatures.",
            show_default=False,
        ),
    ] = None,
    register: Annotated[
        str | None,
        typer.Option(
            "--register",
            metavar="SIGNOFF_URL",
            help="Create (or re-key) the webhook endpoint for this receiver on that Signoff "
            "and use its secret; needs --admin-key.",
            show_default=False,
        ),
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="SIGNOFF_ADMIN_KEY", help="For --register.", show_default=False),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each event's whole envelope as JSON.")
    ] = False,
    exit_after: Annotated[
        int | None,
        typer.Option(metavar="N", help="Exit after N distinct events (of --event's type).", min=1),
    ] = None,
    event: Annotated[
        str | None,
        typer.Option(metavar="TYPE", help="With --exit-after: count only this event type."),
    ] = None,
) -> None:
    """A webhook receiver for trying Signoff out: verifies each delivery's signature and
    prints one line per event."""
    import httpx

    from signoff import listen as receiver_module
    from signoff.logs import configure_logging

    configure_logging("warning")
    receiver_url = f"http://{host}:{port}/"
    if register:
        if not admin_key:
            raise UserError("--register needs --admin-key (or SIGNOFF_ADMIN_KEY)")
        if secret:
            raise UserError("give either --secret or --register, not both")
        try:
            endpoint_id, secret = receiver_module.register(register, admin_key, receiver_url)
        except receiver_module.RegistrationError as exc:
            raise UserError(str(exc)) from None
        except httpx.HTTPError as exc:
            raise UserError(f"cannot reach Signoff at {register}: {exc}") from None
        typer.echo(f"Webhook endpoint {endpoint_id} delivers to {receiver_url}", err=True)
    if not secret:
        raise UserError(
            "a secret is needed to verify signatures: --secret whsec_... (or "
            "SIGNOFF_LISTEN_SECRET), or --register http://127.0.0.1:8000 --admin-key KEY"
        )
    receiver = receiver_module.Receiver(
        secret, as_json=as_json, stop_after=exit_after, stop_on=event
    )
    try:
        server = receiver_module.serve(receiver, host, port)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    typer.echo(
        f"Listening on {receiver_url} for signed Signoff webhooks (Ctrl-C to stop)", err=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def mcp_server() -> None:
    """Serve Signoff's review tools to agents over MCP on stdio (needs signoff[mcp]):
    request_human_review, get_review, wait_for_decision, begin_execution and
    complete_execution, against SIGNOFF_URL with the producer key in SIGNOFF_API_KEY."""
    try:
        from signoff.integrations.mcp import main as serve_mcp
    except ImportError as missing:
        hint = f"signoff mcp needs the mcp extra: pip install 'signoff[mcp]' ({missing})"
        raise UserError(hint) from missing
    serve_mcp()


def slack_card(
    task_id: Annotated[str, typer.Argument(help="The task whose card to show.")],
    database_url: DatabaseOption = None,
) -> None:
    """Print a task's Slack card (Block Kit JSON: text and blocks) as the Slack door would
    post it, without Slack: paste the blocks into Slack's Block Kit Builder to see it.
    Its buttons are signed with SIGNOFF_SECRET_KEY (unset: a key of this command's own)."""
    import json
    import uuid

    from signoff.errors import SignoffError
    from signoff.services import chat

    settings = settings_from(database_url)
    try:
        wanted = uuid.UUID(task_id)
    except ValueError:
        raise UserError(f"{task_id!r} is not a task id") from None

    async def run() -> str:
        try:
            async with as_cli_admin(settings) as (context, _):
                drawn = await chat.draw(context, wanted, door="slack")
        except SignoffError as exc:
            raise UserError(exc.message) from None
        return json.dumps(drawn.message, indent=2, ensure_ascii=False)

    typer.echo(run_with_database(settings, run()))
