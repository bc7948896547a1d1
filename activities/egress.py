"""The SSRF guard of the platform proxy (DESIGN §5) and the client built on it.

``wds dev`` (``WDS_DEV_MODE``) lets pipelines reach loopback and private addresses;
otherwise a connection to a private, loopback, link-local, multicast, reserved, shared
or cloud-metadata address is refused unless the host is in ``WDS_HTTP_ALLOWED_HOSTS``
(comma-separated names; ``.example.com`` allows a domain and its subdomains). The check
runs in the connection layer after DNS resolution — every address the name resolves to
must pass — and the socket then connects to an address that was checked, so neither DNS
rebinding nor a redirect (each hop opens its own connection) gets around it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

DEFAULT_TIMEOUT_S = 30.0
# hosts the guard refuses by name whatever they resolve to (cloud metadata services)
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data", "metadata.azure.com"})


class AddressRefused(Exception):
    """The SSRF guard refused a destination (a permanent step error)."""


def address_allowed(ip: str) -> bool:
    """True for globally routable unicast addresses (what production may reach).

    >>> [address_allowed(a) for a in ("93.184.216.34", "127.0.0.1", "10.1.2.3", "169.254.169.254")]
    [True, False, False, False]
    >>> [address_allowed(a) for a in ("::1", "::ffff:10.0.0.1", "fd00:ec2::254", "224.0.0.1")]
    [False, False, False, False]
    """
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        elif addr.sixtofour is not None:
            addr = addr.sixtofour
    if addr.is_multicast or addr.is_unspecified or addr.is_reserved or addr.is_link_local:
        return False
    # is_global excludes private, loopback, shared (100.64/10, e.g. Alibaba metadata) ranges
    return bool(addr.is_global)


@dataclass(frozen=True)
class EgressPolicy:
    """Where pipeline HTTP may connect: ``allow_private`` in ``wds dev``; otherwise public
    addresses only, except hosts in ``allowed_hosts`` (exact names, or ``.suffix``)."""

    allow_private: bool = False
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Any) -> EgressPolicy:
        hosts = {h.strip().lower().rstrip(".") for h in (settings.http_allowed_hosts or "").split(",")}
        return cls(allow_private=bool(settings.dev_mode), allowed_hosts=frozenset(h for h in hosts if h))

    def host_listed(self, host: str) -> bool:
        h = host.lower().rstrip(".")
        return h in self.allowed_hosts or any(
            a.startswith(".") and (h.endswith(a) or h == a[1:]) for a in self.allowed_hosts
        )

    def check(self, host: str, addresses: Iterable[str]) -> None:
        """Raise AddressRefused unless every address ``host`` resolved to may be reached."""
        if self.allow_private or self.host_listed(host):
            return
        if host.lower().rstrip(".") in METADATA_HOSTS:
            raise AddressRefused(f"refused: {host} is a cloud metadata host")
        for ip in addresses:
            if not address_allowed(ip):
                what = host if host == ip else f"{host} resolves to {ip}, which"
                raise AddressRefused(
                    f"refused: {what} is a private, loopback, link-local or reserved address"
                    " (allow the host with WDS_HTTP_ALLOWED_HOSTS)"
                )


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks every address, then connects to a checked address.

    httpcore keeps the hostname as the connection's origin, so TLS still verifies and
    sends SNI for the name while the socket goes to the address we approved.
    """

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if self.policy.allow_private or self.policy.host_listed(host):
            return await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        self.policy.check(host, ())  # names refused whatever they resolve to
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout=timeout or DEFAULT_TIMEOUT_S
            )
        except (TimeoutError, OSError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        self.policy.check(host, addresses)
        last: Exception | None = None
        for ip in addresses:
            try:
                return await self.inner.connect_tcp(ip, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"no address for {host}")

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("refused: unix sockets are not reachable from pipelines")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose network backend is the guard."""

    def __init__(self, policy: EgressPolicy, *, max_connections: int = 512) -> None:
        super().__init__(trust_env=False)
        # replace the pool httpx built: same settings, but every connect goes through the guard
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=max_connections,
            max_keepalive_connections=max_connections // 2,
            keepalive_expiry=30.0,
            network_backend=GuardedBackend(policy),
        )


def build_proxy_client(settings: Any) -> httpx.AsyncClient:
    """The shared client of the proxy (built once per worker in ``worker.py``).

    ``trust_env=False``: an ``HTTP_PROXY`` variable must not route pipeline calls around
    the guard.
    """
    # httpx logs every URL at INFO: a query-parameter credential must never reach a log
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger("httpx").level))
    return httpx.AsyncClient(
        transport=GuardedTransport(EgressPolicy.from_settings(settings)),
        follow_redirects=False,
        trust_env=False,
        timeout=DEFAULT_TIMEOUT_S,
        headers={"User-Agent": "wds-pipeline/1"},
    )
