"""HTTPS callbacks: the dispatcher connects to the address it vetted, and TLS still
checks the receiver's certificate against the host the endpoint was registered with."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from signoff.domain.webhooks import error_category
from tests.integration.test_webhooks import dispatch, hooks, register  # noqa: F401 (a fixture)
from tests.receiver import Receiver
from tests.support import LiveServer, escalation


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (its own CA), and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_receiver(request, tmp_path, monkeypatch) -> Iterator[Receiver]:  # type: ignore[no-untyped-def]
    """An HTTPS receiver at https://localhost:PORT whose certificate names ``request.param``;
    the dispatcher trusts that certificate (and nothing else) as a CA."""
    cert, key = _certificate(tmp_path, request.param)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with Receiver(tls=context) as receiver:
        yield receiver


def _deliver_one(server: LiveServer, url: str) -> dict:  # type: ignore[type-arg]
    register(server, f"{url}/hooks", event_types=["task.created"])
    with server.new_client("producer") as producer:
        assert producer.escalate(escalation()).status_code == 201
    assert dispatch(server) == 1
    (delivery,) = server.rows("webhook_deliveries")
    return delivery


@pytest.mark.parametrize("tls_receiver", ["localhost"], indirect=True)
def test_an_https_receiver_gets_the_callback(hooks, tls_receiver) -> None:  # noqa: F811
    delivery = _deliver_one(hooks, tls_receiver.url)
    assert (delivery["status"], delivery["last_status_code"]) == ("SUCCEEDED", 200)
    (received,) = tls_receiver.received
    assert received.path == "/hooks"
    # The connection went to 127.0.0.1, but the request still names the registered host.
    assert received.headers["Host"] == tls_receiver.url.removeprefix("https://")


@pytest.mark.parametrize("tls_receiver", ["elsewhere.test"], indirect=True)
def test_a_certificate_for_another_host_is_refused(hooks, tls_receiver) -> None:  # noqa: F811
    delivery = _deliver_one(hooks, tls_receiver.url)
    assert delivery["status"] == "PENDING"  # retried later, never sent
    assert delivery["last_status_code"] is None
    assert "certificate" in delivery["last_error"].lower()
    assert error_category(None, delivery["last_error"]) == "tls"
    assert tls_receiver.received == []
