"""Configuration from the environment (prefix ``SIGNOFF_``) and CLI flags."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import socket

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from signoff.domain.policies import Policy, policy_from_json
from signoff.domain.webhooks import DEFAULT_RETRY_SCHEDULE, parse_retry_schedule

DEFAULT_DATABASE_URL = "sqlite:///signoff.db"


class Settings(BaseSettings):
    """All settings. Durations are in seconds.

    ``database_url`` accepts the URLs people write (``postgresql://user@host/db``,
    ``sqlite:///path.db``); :func:`async_database_url` rewrites them to the async drivers.
    """

    model_config = SettingsConfigDict(env_prefix="SIGNOFF_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    bootstrap_admin_key: str | None = Field(default=None, repr=False)
    lease_seconds: int = Field(default=900, gt=0, le=86400)
    idempotency_ttl_seconds: int = Field(default=86400, gt=0)
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    # --- what the server bounds (docs/operations.md, "Connection limits and timeouts") ---
    header_timeout_seconds: float = Field(default=10, gt=0)
    """A connection must finish a request's headers within this long, or is closed."""
    body_timeout_seconds: float = Field(default=30, gt=0)
    """A request's whole body must arrive within this long after its headers, or the
    connection is closed."""
    body_min_rate_bytes: int = Field(default=1024, ge=0)
    """After the first ``body_rate_grace_seconds``, a body must keep arriving at this many
    bytes a second on average (since its headers), or the connection is closed (0: off)."""
    body_rate_grace_seconds: float = Field(default=5, ge=0)
    """How long a body may take before its rate is held to ``body_min_rate_bytes``."""
    write_timeout_seconds: float = Field(default=30, gt=0)
    """A client that reads nothing of an answer for this long (the server's send buffer
    full all along) has its connection closed."""
    max_connections: int = Field(default=1000, ge=1)
    """Open connections per ``signoff serve`` process; one more is closed at once."""
    shutdown_wait_seconds: float = Field(default=30, gt=0)
    """On SIGTERM: how long requests in flight may take before they are cancelled."""
    diff_threads: int = Field(default=2, ge=1, le=64)
    """Threads per process that work out diffs (line and word diffs of long strings)."""
    password_threads: int = Field(default=2, ge=1, le=64)
    """Threads per process that hash and check passwords (Argon2)."""
    diff_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """Diffs kept per process, by revision pair, up to this many bytes of their JSON
    (least recently used out first; 0: none)."""
    max_long_polls_per_key: int = Field(default=100, ge=1)
    """Long-polls one API key (or console user) may have parked at once, per process."""
    max_streams_per_key: int = Field(default=10, ge=1)
    """Console event streams one user may have open at once, per process."""
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int | None = Field(default=None, ge=1, le=64)
    """``signoff serve`` processes (uvicorn workers) sharing the port. Default on
    PostgreSQL: the CPU count, or half of it when the database (or its pooler) runs on
    this machine, which needs its share of the cores (on 2 cores one process served more
    escalations and claim → resolve cycles than two: docs/benchmarks.md, "The fifth
    round"); 1 on SQLite (one writer; more processes only queue on its lock)."""
    log_level: str = "info"
    sqlite_busy_timeout_ms: int = Field(default=10_000, ge=0)
    approval_ttl_seconds: int | None = Field(default=None, gt=0)
    """Default life of an approval of a subject; ``None``: no expiry."""
    default_escalation_policy: str = Field(
        default=json.dumps(
            {
                "name": "default",
                "levels": [
                    {"after_seconds": 86400, "action": "remind", "notify": ["group:reviewers"]},
                    {
                        "after_seconds": 86400,
                        "action": "reassign",
                        "assign_group": "supervisors",
                        "notify": ["group:supervisors"],
                    },
                    {"after_seconds": 86400, "action": "expire", "notify": []},
                ],
            }
        ),
        description="JSON {name, levels}: the policy of escalations that name none.",
    )
    sweep_interval_seconds: float = Field(default=15, gt=0)
    sweep_batch_size: int = Field(default=100, gt=0)
    checkpoint_interval_seconds: float = Field(default=300, gt=0)
    """How often the sweeper signs a checkpoint (a Merkle root) over the trail records
    written since the last one (docs/evidence.md)."""
    checkpoint_settle_seconds: float = Field(default=60, ge=0)
    """A checkpoint covers records at least this old, so a record whose transaction
    commits late (its id taken earlier) is not passed over."""
    export_page_size: int = Field(default=1000, gt=0)
    """How much one read of an evidence export takes: this many trail records, or
    checkpoints with this many leaves in all (docs/evidence.md)."""
    delivered_retention_days: float = Field(default=7, ge=0)
    """How long the sweeper keeps delivered webhooks: a delivery that succeeded (with its
    attempts) this long ago is removed, and an outbox event this old once it has no
    delivery left. 0 keeps them forever. The audit trail is never removed."""
    failed_retention_days: float = Field(default=30, ge=0)
    """How long the sweeper keeps dead-lettered deliveries (with their attempts) after
    their last attempt. 0 keeps them forever."""
    retention_batch_size: int = Field(default=1000, gt=0)
    """Rows removed per statement (each its own short transaction)."""
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_username: str | None = None
    smtp_password: str | None = Field(default=None, repr=False)
    smtp_tls: bool = False
    smtp_from: str = "signoff@localhost"
    public_base_url: str = "http://127.0.0.1:8000"
    """Where people reach this server: the start of every link it hands out (set-password
    links, resume links, single sign-on's return address). Unset, ``signoff serve`` uses
    the address it listens on (``--host``, ``--port``)."""
    secret_key: str | None = Field(default=None, repr=False)
    """Keys the CSRF tokens of resume-link forms. Unset: a random key per process (set it
    when several replicas serve links)."""
    run_workers: bool = True
    """Run the outbox dispatcher inside ``signoff serve`` (``signoff worker`` runs it alone)."""
    webhook_retry_schedule: str = ",".join(str(s) for s in DEFAULT_RETRY_SCHEDULE)
    webhook_retry_jitter: float = Field(default=0.1, ge=0, lt=1)
    webhook_timeout_seconds: float = Field(default=15, gt=0)
    webhook_attempt_lease_seconds: float = Field(default=60, gt=0)
    webhook_allow_private_networks: bool = False
    webhook_secret_overlap_seconds: int = Field(default=86400, ge=0)
    # Secrets at rest (signoff.crypto) ------------------------------------------------
    encryption_keys: str | None = Field(default=None, repr=False)
    """Fernet keys, comma-separated, newest first: the newest encrypts, all decrypt."""
    key_file: str | None = None
    """Where the key lives without ``encryption_keys`` (created on first start, mode 0600).
    Default: ``<database>.key`` next to a SQLite file, else ``./signoff.key``."""
    dispatcher_poll_seconds: float = Field(default=1.0, gt=0)
    dispatcher_batch_size: int = Field(default=50, gt=0)
    dispatcher_coalesce_seconds: float = Field(default=0.025, ge=0, le=1)
    """The shortest time between two dispatcher rounds: the commits of that window are
    fanned out and claimed together (one round, not one per commit)."""
    # --- speed: claim limit, connection pooling, caches ---
    max_leases_per_principal: int = Field(default=10, ge=1)
    """Live (unlapsed) leases one principal may hold at once; a claim beyond it is refused
    with 409 ``ERR_CLAIM_LIMIT``."""
    max_revisions_per_task: int = Field(default=100, ge=1)
    """Subject revisions one task may have (the first included); a revision beyond it is
    refused with 409 ``ERR_REVISION_LIMIT``."""
    grant_audit_share: float = Field(default=0.1, ge=0.0, le=1.0)
    """Remembered approvals: the share of matching escalations that still go to a person,
    for audit (drawn at random per escalation; 0: none, 1: all)."""
    max_grant_seconds: int = Field(default=7 * 24 * 3600, ge=1, le=30 * 24 * 3600)
    """The longest a remembered approval may last."""
    escalation_group_size: int = Field(default=32, ge=1, le=32)
    """PostgreSQL: the most escalations committed together. Escalations that arrive while
    others are being written are written in one transaction, each in its own
    subtransaction (one refused escalation never undoes another); 1 writes each alone."""
    pgbouncer: bool = False
    """The database URL points at PgBouncer in transaction pooling mode: no named prepared
    statements (PgBouncer 1.18 cannot route them), and ``LISTEN`` goes to
    ``listen_database_url``."""
    listen_database_url: str | None = None
    """A direct PostgreSQL URL for ``LISTEN`` (outbox wake-ups, API-key revocations) when
    ``database_url`` goes through a transaction pooler. Default: ``database_url``."""
    access_log: bool = False
    forwarded_allow_ips: str = ""
    """Comma-separated addresses (or networks, or ``*``) of the reverse proxies whose
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` headers are believed; default none:
    the client address is the connection's and the scheme is the connection's. The one
    place that decides a request's client address (sign-in throttling, logs) and
    whether it came over https (cookies)."""
    """uvicorn's per-request access log (state changes are logged regardless)."""
    redis_url: str | None = None
    """Redis for the storm shield (duplicate escalations in flight wait for the first and
    replay it); unset: off. The database stays the final word either way."""
    storm_shield_wait_seconds: float = Field(default=1.0, ge=0, le=10)
    storm_shield_connections: int = Field(default=100, ge=1)
    """Redis connections of the storm shield per process. A call that finds them all busy
    (a storm wider than this) waits for one, briefly, instead of failing."""
    api_key_cache: bool = True
    """Cache verified API keys in the process; revocations reach every replica at once
    (``NOTIFY`` on PostgreSQL; on SQLite only this process, so keep one process per file)."""
    # Producers' side (agents).
    execution_lease_seconds: int = Field(default=300, gt=0, le=86400)
    """How long an execution grant fences its executor before another may take over."""
    # Console sign-in: sessions, throttling, OpenID Connect.
    session_idle_seconds: int = Field(default=1800, gt=0)
    """A console session ends after this long without a request."""
    session_max_seconds: int = Field(default=43200, gt=0)
    """A console session ends this long after sign-in, however active."""
    login_max_failures: int = Field(default=5, gt=0)
    """Sign-in attempts for one account from one address before sign-in of that account
    from that address is refused (429) for the window; a right password clears them."""
    login_max_failures_per_address: int = Field(default=50, gt=0)
    """Failed sign-ins from one address (any accounts) before it is refused (429): higher,
    since an office behind one address shares it."""
    login_failure_window_seconds: int = Field(default=900, gt=0)
    oidc_issuer: str | None = None
    """OpenID Connect issuer URL (its ``/.well-known/openid-configuration`` is read)."""
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = Field(default=None, repr=False)
    oidc_scopes: str = "openid email profile"
    oidc_groups_claim: str = "groups"
    oidc_username_claim: str = "preferred_username"
    """The claim that becomes the principal id (falls back to ``email``, then ``sub``)."""
    oidc_role_map: str = "{}"
    """JSON object: IdP group → role (reviewer, supervisor, admin); the highest one wins."""

    # Chat approvals in Slack (docs/slack.md): off until a bot token is set --------------
    slack_bot_token: str | None = Field(default=None, repr=False)
    """The Slack app's bot token (``xoxb-…``). Set with a signing secret (HTTP at
    ``POST /slack/events``) or an app token (Socket Mode), it turns the Slack door on;
    unset, nothing of Slack is imported or started."""
    slack_signing_secret: str | None = Field(default=None, repr=False)
    """Verifies every request Slack sends to ``POST /slack/events`` (HMAC-SHA256, and a
    timestamp no more than five minutes old)."""
    slack_app_token: str | None = Field(default=None, repr=False)
    """An app-level token (``xapp-…``): Signoff opens Slack's Socket Mode WebSocket and
    needs no public address."""
    slack_default_channel: str | None = None
    """The channel a task's card is posted to when ``slack_channels`` names none."""
    slack_channels: str = "{}"
    """JSON object routing cards: ``group:<name>``, ``policy:<name>`` or
    ``producer:<principal>`` → channel id; the task's group is asked first, then its
    escalation policy, then its producer, then the default channel."""
    slack_api_url: str = "https://slack.com/api/"
    """Slack's Web API base (a proxy, or a local fake in tests)."""

    @field_validator("database_url")
    @classmethod
    def _database_url_is_supported(cls, value: str) -> str:
        check_database_url(value)
        return value

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _schedule_parses(cls, value: str) -> str:
        parse_retry_schedule(value)
        return value

    @field_validator("default_escalation_policy")
    @classmethod
    def _policy_parses(cls, value: str) -> str:
        document = json.loads(value)
        policy_from_json(document)
        return value

    @property
    def default_policy(self) -> Policy:
        return _policy(self.default_escalation_policy)

    @property
    def retry_schedule(self) -> tuple[int, ...]:
        return parse_retry_schedule(self.webhook_retry_schedule)

    @field_validator("bootstrap_admin_key")
    @classmethod
    def _key_is_long_enough(cls, value: str | None) -> str | None:
        if value is not None and len(value) < 16:
            raise ValueError("must be at least 16 characters")
        return value

    @field_validator("oidc_role_map")
    @classmethod
    def _role_map_parses(cls, value: str) -> str:
        document = json.loads(value)
        roles = {"reviewer", "supervisor", "admin"}
        if not isinstance(document, dict) or not all(
            isinstance(k, str) and v in roles for k, v in document.items()
        ):
            raise ValueError(
                "SIGNOFF_OIDC_ROLE_MAP must be a JSON object of group → reviewer, "
                "supervisor or admin"
            )
        return value

    @field_validator("slack_channels")
    @classmethod
    def _slack_channels_parse(cls, value: str) -> str:
        document = json.loads(value)
        if not isinstance(document, dict) or not all(
            isinstance(k, str)
            and k.startswith(("group:", "policy:", "producer:"))
            and isinstance(v, str)
            and v
            for k, v in document.items()
        ):
            raise ValueError(
                "SIGNOFF_SLACK_CHANNELS must be a JSON object of group:<name>, "
                "policy:<name> or producer:<principal> → channel id"
            )
        return value

    @property
    def slack_enabled(self) -> bool:
        """A bot token and a way for Slack to reach Signoff (signing secret or app token)."""
        return bool(self.slack_bot_token and (self.slack_signing_secret or self.slack_app_token))

    @property
    def slack_routes(self) -> dict[str, str]:
        result: dict[str, str] = json.loads(self.slack_channels)
        return result

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_issuer and self.oidc_client_id)

    @property
    def listening_url(self) -> str:
        """``http://`` and the address ``serve`` listens on (a wildcard host as loopback)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def with_public_url(self) -> Settings:
        """These settings, with ``public_base_url`` the listening address unless it was set."""
        if "public_base_url" in self.model_fields_set:
            return self
        return self.model_copy(update={"public_base_url": self.listening_url})

    @property
    def secure_cookies(self) -> bool:
        return self.public_base_url.lower().startswith("https://")

    @property
    def serve_processes(self) -> int:
        if self.workers is not None:
            return self.workers
        if self.is_sqlite:
            return 1
        cores = os.cpu_count() or 1
        return max(1, cores // 2) if self.database_is_local else cores

    @property
    def database_is_local(self) -> bool:
        """Whether the database (or the pooler in front of it) runs on this machine: a
        Unix socket, a loopback address or this machine's own name, for every host the
        driver may connect to (``?host=`` wins over the URL's host, ``PGHOST`` fills in
        for neither, as asyncpg does)."""
        url = make_url(async_database_url(self.database_url))
        query = url.query.get("host")
        named = ",".join(query) if isinstance(query, tuple) else query
        hosts = named or url.host or os.environ.get("PGHOST") or ""
        return all(_is_local_host(host) for host in hosts.split(","))

    @property
    def listen_url(self) -> str:
        return self.listen_database_url or self.database_url

    @property
    def is_sqlite(self) -> bool:
        return async_database_url(self.database_url).startswith("sqlite")


_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _is_local_host(host: str) -> bool:
    name = host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
    if not name or name.startswith("/"):  # no host at all, or a Unix socket's directory
        return True
    if name in _LOCAL_NAMES or name == socket.gethostname().lower():
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


#: The URL schemes Signoff runs on (the plain ones are rewritten to the async drivers).
SUPPORTED_DATABASE_SCHEMES = (
    "sqlite",
    "sqlite+aiosqlite",
    "postgresql",
    "postgres",
    "postgresql+asyncpg",
)
_URL_FORMS = "sqlite:///path/to/signoff.db or postgresql://user@host:5432/dbname"


def check_database_url(url: str) -> None:
    """Refuse a database URL Signoff cannot use, saying what it accepts (never echoing the
    URL: it may hold a password)."""
    scheme, separator, _ = url.partition("://")
    if not separator or not scheme:
        raise ValueError(f"not a database URL; write {_URL_FORMS}")
    if scheme.lower() not in SUPPORTED_DATABASE_SCHEMES:
        raise ValueError(f"unsupported database {scheme!r}; Signoff runs on {_URL_FORMS}")
    try:
        make_url(url)
    except ArgumentError:
        raise ValueError(f"not a valid database URL; write {_URL_FORMS}") from None


def async_database_url(url: str) -> str:
    """Rewrite a plain database URL to its asyncio driver.

    ``postgresql://`` and ``postgres://`` become ``postgresql+asyncpg://``; ``sqlite://``
    becomes ``sqlite+aiosqlite://``. URLs that already name a driver are kept.
    """
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    if url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + url[len("sqlite://") :]
    return url


@functools.lru_cache(maxsize=16)
def _policy(text: str) -> Policy:
    """The policy a setting's JSON names, parsed once per text (read on every escalation)."""
    return policy_from_json(json.loads(text))
