"""Secrets at rest: what the service must read back in clear (webhook signing secrets,
the resume-link tokens of unsent e-mails) is stored encrypted with Fernet (AES-128-CBC
and HMAC-SHA256, from the ``cryptography`` package).

Keys come from ``SIGNOFF_ENCRYPTION_KEYS`` (comma-separated, newest first: the newest
encrypts, every one decrypts, so keys rotate without downtime). Without that setting the
key lives in ``SIGNOFF_KEY_FILE`` (default: next to the SQLite file as ``<name>.key``, or
``signoff.key`` in the working directory), created on first start with mode 0600. Every
replica needs the same keys. A process that cannot decrypt a secret refuses to use it
(:class:`SecretUnavailable`): it never sends an unsigned or wrongly signed webhook.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

import structlog
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from signoff.private_files import refuse_exposed, sqlite_path
from signoff.settings import Settings

log = structlog.get_logger("signoff.crypto")

#: Marks an encrypted value, so a clear one left by an old version is recognisable.
PREFIX = "fernet:"


class KeyringError(ValueError):
    """No usable encryption key: malformed, missing, or its file cannot be created."""


class SecretUnavailable(Exception):
    """A stored secret this process cannot decrypt (wrong or missing key, or not
    encrypted at all)."""


def generate_key() -> str:
    """A new key for ``SIGNOFF_ENCRYPTION_KEYS`` (url-safe base64 of 32 random bytes)."""
    return Fernet.generate_key().decode("ascii")


class Keyring:
    """The keys of one process, newest first."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise KeyringError("at least one encryption key is needed")
        try:
            self._fernet = MultiFernet([Fernet(key.strip().encode("ascii")) for key in keys])
        except (ValueError, UnicodeEncodeError) as exc:
            raise KeyringError(
                "an encryption key is not a Fernet key "
                "(32 url-safe base64-encoded bytes; `signoff generate-encryption-key`)"
            ) from exc

    def encrypt(self, clear: str) -> str:
        return PREFIX + self._fernet.encrypt(clear.encode("utf-8")).decode("ascii")

    def decrypt(self, stored: str) -> str:
        if not stored.startswith(PREFIX):
            raise SecretUnavailable("the stored secret is not encrypted (run `signoff migrate`)")
        try:
            return self._fernet.decrypt(stored[len(PREFIX) :].encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError) as exc:
            raise SecretUnavailable(
                "no key in SIGNOFF_ENCRYPTION_KEYS / SIGNOFF_KEY_FILE decrypts a stored "
                "secret; give this process the key the others use"
            ) from exc

    def rotate(self, stored: str) -> str:
        """``stored`` re-encrypted with the newest key (clear values get encrypted)."""
        if not stored.startswith(PREFIX):
            return self.encrypt(stored)
        try:
            token = self._fernet.rotate(stored[len(PREFIX) :].encode("ascii"))
        except InvalidToken as exc:
            raise SecretUnavailable("no key decrypts a stored secret") from exc
        return PREFIX + token.decode("ascii")


def key_file_path(settings: Settings) -> Path:
    """``SIGNOFF_KEY_FILE``, else ``<database file>.key`` next to a SQLite file, else
    ``signoff.key`` in the working directory."""
    if settings.key_file:
        return Path(settings.key_file)
    database = sqlite_path(settings.database_url)
    if database is not None:
        return database.with_suffix(".key")
    return Path.cwd() / "signoff.key"


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


def _create_key_file(path: Path) -> None:
    """Write a new key to ``path`` (mode 0600) atomically: the key is written to a
    private temporary file first and then linked into place, so a process starting at
    the same moment either creates it or reads the complete file the other created."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(generate_key() + "\n")
        os.link(temporary, path)
    except FileExistsError:
        return  # another process created it first: use theirs
    except OSError as exc:
        raise KeyringError(
            f"cannot create the encryption key file {path} ({exc.strerror}): set "
            "SIGNOFF_KEY_FILE or SIGNOFF_ENCRYPTION_KEYS"
        ) from None
    finally:
        if temporary.exists():
            temporary.unlink()
    log.warning(
        "encryption.key_generated",
        key_file=str(path),
        message=(
            f"generated the encryption key of stored secrets in {path}: back it up, and "
            "give the same key to every replica (SIGNOFF_ENCRYPTION_KEYS or "
            "SIGNOFF_KEY_FILE); without it webhook secrets cannot be read"
        ),
    )


def load_keyring(settings: Settings, *, create: bool = True) -> Keyring:
    """The process's keys: ``SIGNOFF_ENCRYPTION_KEYS``, else the key file (created with
    a new key when missing and ``create``).

    Raises:
        ValueError: a key is malformed, or there is no key and ``create`` is false.
    """
    if settings.encryption_keys:
        return Keyring(_split(settings.encryption_keys))
    path = key_file_path(settings)
    if not path.exists() and create:
        _create_key_file(path)
    if not path.exists():
        raise KeyringError(f"no encryption key: set SIGNOFF_ENCRYPTION_KEYS or create {path}")
    refuse_exposed(path, "the encryption key file")
    return Keyring(_split(path.read_text("ascii")))


# Form and cookie signatures ----------------------------------------------------------------

_PROCESS_SECRET = secrets.token_bytes(32)


def secret_key(settings: Settings) -> bytes:
    """The key of every form token and signed cookie: ``SIGNOFF_SECRET_KEY``, or a random
    key for this process (``signoff serve --workers N`` hands one to all its processes;
    replicas on several hosts must be given the same ``SIGNOFF_SECRET_KEY``)."""
    return settings.secret_key.encode() if settings.secret_key else _PROCESS_SECRET


def form_mac(settings: Settings, purpose: str, value: str) -> str:
    """An HMAC-SHA256 of ``value`` for one ``purpose`` (a session cookie, a form token),
    URL-safe base64 without padding."""
    digest = hmac.new(secret_key(settings), f"{purpose}:{value}".encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")
