"""Which cluster the end-to-end tests may change, decided from the kubeconfig files alone (no API call).

The suite changes a cluster deeply (Volcano's CRDs, fail-closed webhooks, the scheduler's configuration, a node's
labels and status), so it runs only on

* a kind cluster this run created: the fixture picked a name no kind cluster had, created it into a kubeconfig file
  of its own, and records both (:class:`CreatedKind`); the target is then that file's ``kind-<name>`` context, which
  must be its current context and point at the server the fixture recorded; or
* the context ``CARDQUOTA_E2E_CONTEXT`` names, looked up in the kubeconfig kubectl would read (``$KUBECONFIG``'s
  files, else ``~/.kube/config``), and then that context only: every kubectl call passes ``--context``.

Anything else — a ``KUBECONFIG`` in the shell whose current context happens to be reachable, a context merely named
``kind-…`` — is refused (:class:`Refused`) with the context and server it would have changed, before any API call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTEXT_VARIABLE = "CARDQUOTA_E2E_CONTEXT"
"""Names the one kubeconfig context the suite may change, when it is not to create its own kind cluster."""


class Refused(Exception):
    """The suite will not change this cluster; the message says which one and what to do instead."""


@dataclass(frozen=True)
class Kubeconfig:
    """The merged view of one or more kubeconfig files: context name → (cluster name, server), and the current
    context. Files merge as kubectl merges ``$KUBECONFIG``: the first file to name a context or cluster, or to set
    ``current-context``, wins (k8s.io/client-go ``tools/clientcmd/loader.go``, ``ClientConfigLoadingRules.Load``)."""

    files: tuple[str, ...]
    contexts: Mapping[str, str]
    servers: Mapping[str, str]
    current: str | None

    @classmethod
    def read(cls, files: Sequence[str]) -> Kubeconfig:
        return cls.merge(tuple(files), [_document(file) for file in files])

    @classmethod
    def merge(cls, files: tuple[str, ...], documents: Sequence[Mapping[str, Any]]) -> Kubeconfig:
        contexts: dict[str, str] = {}
        servers: dict[str, str] = {}
        current: str | None = None
        for document in documents:
            for entry in document.get("contexts") or []:
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    cluster = (entry.get("context") or {}).get("cluster")
                    contexts.setdefault(entry["name"], cluster if isinstance(cluster, str) else "")
            for entry in document.get("clusters") or []:
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    server = (entry.get("cluster") or {}).get("server")
                    servers.setdefault(entry["name"], server if isinstance(server, str) else "")
            if current is None and document.get("current-context"):
                current = str(document["current-context"])
        return cls(files, contexts, servers, current)

    def server(self, context: str) -> str:
        """The API server ``context`` points at ("?" when its cluster has none)."""
        return self.servers.get(self.contexts.get(context, ""), "") or "?"

    def where(self) -> str:
        return os.pathsep.join(self.files)


def _document(file: str) -> dict[str, Any]:
    try:
        text = Path(file).read_text()
    except FileNotFoundError:
        return {}  # kubectl skips a missing file of $KUBECONFIG's list
    except OSError as error:
        raise Refused(f"cannot read the kubeconfig {file}: {error.strerror or error}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise Refused(f"the kubeconfig {file} is not YAML: {error}") from None
    return document if isinstance(document, dict) else {}


def kubeconfig_files(environ: Mapping[str, str]) -> list[str]:
    """The files kubectl reads: ``$KUBECONFIG``'s list, else ``~/.kube/config``."""
    listed = [path for path in environ.get("KUBECONFIG", "").split(os.pathsep) if path]
    return listed or [str(Path(environ.get("HOME") or Path.home()) / ".kube" / "config")]


@dataclass(frozen=True)
class CreatedKind:
    """What the fixture recorded when it created a kind cluster: the name it chose (no kind cluster had it), the
    kubeconfig file it created the cluster into (nobody else's), and the server kind wrote there."""

    name: str
    kubeconfig: str
    server: str

    @property
    def context(self) -> str:
        return f"kind-{self.name}"  # the context kind writes for a cluster (kind: pkg/cluster/internal/kubeconfig)


@dataclass(frozen=True)
class Target:
    """The one cluster the suite changes: kubectl runs with ``KUBECONFIG=kubeconfig`` and ``--context context``."""

    kubeconfig: str
    context: str
    server: str
    origin: str
    created: CreatedKind | None = None

    def describe(self) -> str:
        return f"context {self.context!r} (server {self.server}, kubeconfig {self.kubeconfig}; {self.origin})"


def named_target(environ: Mapping[str, str]) -> Target | None:
    """The context ``CARDQUOTA_E2E_CONTEXT`` names, or None when it is not set; refused when the kubeconfig has no
    such context."""
    context = environ.get(CONTEXT_VARIABLE, "").strip()
    if not context:
        return None
    config = Kubeconfig.read(kubeconfig_files(environ))
    if context not in config.contexts:
        known = ", ".join(sorted(config.contexts)) or "none"
        raise Refused(f"{CONTEXT_VARIABLE}={context}: no such context in the kubeconfig {config.where()} "
                      f"(its contexts: {known})")
    return Target(config.where(), context, config.server(context), f"named by {CONTEXT_VARIABLE}")


def refuse_ambient(environ: Mapping[str, str]) -> None:
    """Refuse when ``KUBECONFIG`` is set and no context is named: its current context is not a cluster this run
    created, whatever its name (a ``kind-…`` name proves nothing: anyone can name a context so)."""
    if not environ.get("KUBECONFIG") or environ.get(CONTEXT_VARIABLE, "").strip():
        return
    config = Kubeconfig.read(kubeconfig_files(environ))
    current = config.current
    which = (f"its current context {current!r} (server {config.server(current)})" if current
             else "it has no current context")
    hint = f"{CONTEXT_VARIABLE}={current}" if current else f"{CONTEXT_VARIABLE}=<context>"
    raise Refused(
        f"refusing to run the end-to-end tests on KUBECONFIG={config.where()}: {which} is not a kind cluster this "
        f"run created. The tests install Volcano, patch its CRDs, register fail-closed webhooks, replace the "
        f"scheduler's configuration and fake GPUs on a node. To run them there on purpose: {hint} make e2e; for a "
        f"throw-away kind cluster: unset KUBECONFIG")


def refusal(environ: Mapping[str, str]) -> str | None:
    """Why the suite refuses to run here, from the kubeconfig files alone (a named context missing from them, or a
    ``KUBECONFIG`` with no context named), or None. Decided once, before any test: a session-scoped fixture that
    fails fails every test that uses it, and the same refusal was printed for each of them."""
    try:
        if named_target(environ) is None:
            refuse_ambient(environ)
    except Refused as error:
        return str(error)
    return None


def created_target(created: CreatedKind) -> Target:
    """The kind cluster this run created, once its kubeconfig shows it as recorded: the file's current context is
    ``kind-<name>`` and points at the recorded server."""
    config = Kubeconfig.read([created.kubeconfig])
    if config.current != created.context or config.server(created.context) != created.server:
        raise Refused(f"the kubeconfig {created.kubeconfig} no longer shows the kind cluster this run created "
                      f"(current context {config.current!r}, server {config.server(config.current or '')}; "
                      f"expected {created.context!r} at {created.server})")
    return Target(created.kubeconfig, created.context, created.server,
                  f"the kind cluster {created.name} this run created", created)
