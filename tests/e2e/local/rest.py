"""A small JSON client of the local API server for the run's own machinery (the host kubelet, the installer, the
scale set-up): the administrator's client certificate, one kept-alive connection per thread, dicts in and out."""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        message = body
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message", body)
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status


@dataclass
class Api:
    host: str
    port: int
    ca: Path
    certificate: Path
    key: Path
    _local: threading.local = field(default_factory=threading.local)

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.certificate), str(self.key))
        return context

    def _connection(self) -> http.client.HTTPSConnection:
        connection: http.client.HTTPSConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(self.host, self.port, context=self._context(), timeout=60)
            self._local.connection = connection
        return connection

    def request(self, method: str, path: str, body: Any = None, *, query: Iterable[tuple[str, str]] = (),
                content_type: str = "application/json", headers: Mapping[str, str] | None = None) -> Any:
        """The answer's JSON (None when empty); :class:`ApiError` unless it is a 2xx. ``headers``: more to send
        (``Impersonate-User``)."""
        query_text = urllib.parse.urlencode(list(query))
        target = f"{path}?{query_text}" if query_text else path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, target, body=data, headers=headers)
                answer = connection.getresponse()
                text = answer.read().decode()
                break
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
        if not 200 <= answer.status < 300:
            raise ApiError(method, path, answer.status, text)
        return json.loads(text) if text else None

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query.items())

    def find(self, path: str) -> Any:
        """The object, or None when there is none (404)."""
        try:
            return self.get(path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any, content_type: str = MERGE) -> Any:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return self.request("DELETE", path, body)


def admin(pki: Path, host: str, port: int) -> Api:
    return Api(host, port, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
