"""The bounds every cardquota server holds its callers to (applied by :mod:`cardquota.runtime.serving`; here apart
so the command line reads them without importing the HTTP stack)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """What one caller can hold on a port. The defaults fit the API server (one connection per in-flight review,
    kept alive between them) and Prometheus: 2,000 idle TLS connections hold ~100 MiB
    (``tests/reliability/test_bounded_servers.py``)."""

    max_connections: int = 2048
    """Connections at once, TLS handshakes in progress included; at the cap the one that has made the least
    progress, of the peer holding the most, is closed to make room (:mod:`cardquota.runtime.serving`)."""
    handshake_timeout: float = 5.0
    """Seconds a TLS handshake may take, and the TLS close at the end (the API server's whole webhook call has
    5 s by default)."""
    idle_timeout: float = 30.0
    """Seconds a connection may wait for its next request (keep-alive), or for its first one."""
    trusted_networks: tuple[str, ...] = ()
    """Addresses or CIDRs of the callers the port is for (the API server's for the webhooks, the scheduler's for
    the extender): exempt from the per-peer shares, with a reserved part of the body budget and decoding slots, and
    their connections never closed to make room for another peer's."""


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """The networks ``cidrs`` name (``10.0.0.0/24``, ``fd00::/64``, a single address); ValueError on one that
    is not an address or network, naming it."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{cidr!r} is not an IP address or CIDR (such as 10.0.0.0/24)") from None
    return tuple(networks)
