"""The bounds every cardquota server holds its callers to (applied by :mod:`cardquota.runtime.serving`; here apart
so the command line reads them without importing the HTTP stack)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """What one caller can hold on a port. The defaults fit the API server (one connection per in-flight review,
    kept alive between them) and Prometheus: 2,000 idle TLS connections hold ~100 MiB
    (``tests/reliability/test_bounded_servers.py``)."""

    max_connections: int = 2048
    """Connections at once, TLS handshakes in progress included; at the cap the one that has waited longest
    without a request is closed to make room, or, when every one is in a request, the new one."""
    handshake_timeout: float = 5.0
    """Seconds a TLS handshake may take, and the TLS close at the end (the API server's whole webhook call has
    5 s by default)."""
    idle_timeout: float = 30.0
    """Seconds a connection may wait for its next request (keep-alive), or for its first one."""
