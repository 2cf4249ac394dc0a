"""Outbound network safety: the SSRF guard for webhook URLs.

A webhook URL is resolved and refused when any address it resolves to is not a public
unicast address: loopback, private (RFC 1918), link-local (169.254/16, cloud metadata),
CGNAT (100.64/10), unspecified, multicast, reserved, IPv6 unique-local and link-local,
and the IPv4-mapped IPv6 forms of all of these. Numeric tricks (``http://2130706433/``,
``0x7f.1``) resolve to the address they hide and are refused with it. The dispatcher
connects to the vetted address itself (the host name goes in ``Host`` and TLS SNI), so
DNS rebinding between the check and the connection cannot switch it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from signoff.errors import ErrorCode, FieldError, Unprocessable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class VettedUrl:
    """A URL whose host resolved to ``address``; ``pinned_url`` connects to it directly."""

    url: str
    host: str
    host_header: str
    """``Host`` as the URL names it (with a non-default port)."""
    address: str
    pinned_url: str


def forbidden(url: str, reason: str) -> Unprocessable:
    return Unprocessable(
        f"webhook URL refused: {reason}",
        error_code=ErrorCode.WEBHOOK_URL_FORBIDDEN,
        errors=[FieldError("url", reason)],
        extra={"url": url},
    )


#: IPv6 ranges that carry an IPv4 address in their low 32 bits (NAT64, RFC 6052 and
#: RFC 8215; SIIT, RFC 6145; IPv4-compatible, RFC 4291): judged by the IPv4 they carry.
EMBEDDING_V4 = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::ffff:0:0:0/96"),
    ipaddress.IPv6Network("::/96"),
)


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in EMBEDDING_V4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """A public unicast address, judging IPv6 forms that embed an IPv4 address (mapped,
    compatible, NAT64, SIIT, 6to4, Teredo) by the IPv4 address they carry."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_v4(address)
        if embedded is not None:
            return is_public(embedded)
    return address.is_global and not address.is_multicast


async def vet_url(url: str, *, allow_private: bool) -> VettedUrl:
    """Resolve ``url``'s host and check every address.

    Raises:
        Unprocessable: 422 ``ERR_WEBHOOK_URL_FORBIDDEN`` with the reason.
    """
    try:
        # Python refuses some malformed hosts (``http://[::1``, ``http://[1.2.3.4]/``)
        # only when parsing or when the host is read.
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:
        raise forbidden(url, f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise forbidden(url, "must be an absolute http or https URL")
    if parts.username or parts.password:
        raise forbidden(url, "must not carry credentials")
    try:
        given_port = parts.port
    except ValueError:
        raise forbidden(url, "has an invalid port") from None
    if given_port == 0:
        raise forbidden(url, "has an invalid port")
    port = given_port or (443 if parts.scheme == "https" else 80)
    host = hostname
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise forbidden(url, f"host {host!r} does not resolve") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise forbidden(url, f"host {host!r} does not resolve")
    if not allow_private:
        for address in addresses:
            if not is_public(address):
                raise forbidden(
                    url,
                    f"{host} resolves to {address}, which is not a public address "
                    "(for local development: SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true)",
                )
    chosen = addresses[0]
    literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
    netloc = f"{literal}:{port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    default_port = 443 if parts.scheme == "https" else 80
    shown_host = f"[{host}]" if ":" in host else host
    host_header = shown_host if port == default_port else f"{shown_host}:{port}"
    return VettedUrl(
        url=url, host=host, host_header=host_header, address=str(chosen), pinned_url=pinned
    )
