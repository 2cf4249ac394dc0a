"""Evidence: ``export`` (a bundle of trails, receipts, checkpoints and public keys),
``verify`` (checks a bundle offline: no database, no server) and
``rotate-signing-key``."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Annotated

import typer

from signoff.cli.common import (
    DatabaseOption,
    UserError,
    as_cli_admin,
    run_with_database,
    settings_from,
)


def export(
    out: Annotated[Path, typer.Option("--out", help="Where to write the bundle (JSON).")],
    since: Annotated[
        str | None, typer.Option(help="Tasks with a record at or after this RFC 3339 time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Tasks with a record before this RFC 3339 time.")
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Write an evidence bundle for `signoff verify`: the whole trail of every task with a
    record in the range, its receipts, every checkpoint and the public keys. It is read
    and written a page at a time (SIGNOFF_EXPORT_PAGE_SIZE) to a file beside --out,
    renamed to --out once complete; on any failure nothing is left."""
    from signoff.errors import SignoffError
    from signoff.services import evidence_export

    settings = settings_from(database_url)
    partial = _partial_beside(out)
    try:
        with partial.open("w", encoding="utf-8") as file:

            async def run() -> None:
                async with as_cli_admin(settings) as (context, operator):
                    stream = await evidence_export.admin_export(context, operator, since, until)
                    async for fragment in stream:
                        try:
                            file.write(fragment)
                        except OSError as error:  # not the database's: said as a write
                            raise _WriteFailed(error) from None

            run_with_database(settings, run())
        os.replace(partial, out)
    except SignoffError as error:
        raise UserError(str(error)) from None
    except _WriteFailed as failed:
        raise UserError(f"cannot write {out}: {failed.error.strerror or failed.error}") from None
    except OSError as error:
        raise UserError(f"cannot write {out}: {error.strerror or error}") from None
    finally:
        partial.unlink(missing_ok=True)
    typer.echo(f"wrote {out}")


class _WriteFailed(Exception):
    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _partial_beside(out: Path) -> Path:
    """A new, empty file beside ``out`` that the bundle is written to, renamed to ``out``
    once whole (so ``out`` is never half a bundle)."""
    partial = out.with_name(f".{out.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as error:
        raise UserError(f"cannot write {out}: {error.strerror or error}") from None
    return partial


def verify(
    bundle: Annotated[Path, typer.Argument(help="A bundle written by `signoff export`.")],
    keys: Annotated[
        Path | None,
        typer.Option(
            "--keys",
            help="The JWK Set you trust (fetched from /.well-known/jwks.json); default: the "
            "bundle's own keys.",
        ),
    ] = None,
) -> None:
    """Check a bundle with public keys only: every chain, receipt and checkpoint. Exits 0
    when all verifies, 1 naming every record that fails, 2 for a bundle it cannot read."""
    import json

    from signoff.domain.evidence_check import BundleError, parse_bundle, verify_bundle

    try:
        parsed = parse_bundle(_read(bundle))
        trusted = None
        if keys is not None:
            try:
                trusted = json.loads(_read(keys))
            except ValueError as error:
                raise BundleError(f"{keys} is not JSON: {error}") from None
        report = verify_bundle(parsed, trusted)
    except BundleError as error:
        typer.echo(f"signoff: error: {bundle}: {error}", err=True)
        raise SystemExit(2) from None
    for note in report.notes:
        typer.echo(f"note: {note}")
    for failure in report.failures:
        typer.echo(f"FAIL {failure}")
    summary = f"{report.records} records of {report.tasks} tasks, {report.checkpoints} checkpoints"
    if report.ok:
        typer.echo(f"OK {summary}: everything verifies")
        return
    typer.echo(f"FAILED {summary}: {len(report.failures)} failure(s)")
    raise SystemExit(1)


def _read(path: Path) -> str:
    from signoff.domain.evidence_check import BundleError

    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BundleError(f"cannot read {path}: {error}") from None


def rotate_signing_key(database_url: DatabaseOption = None) -> None:
    """Make a new signing key the active one and retire the others; what they signed still
    verifies (their public keys stay at /.well-known/jwks.json). Prints the new key id."""
    from signoff.services import evidence

    settings = settings_from(database_url)

    async def run() -> str:
        async with as_cli_admin(settings) as (context, _operator):
            return await evidence.rotate_signing_key(context)

    typer.echo(run_with_database(settings, run()))
