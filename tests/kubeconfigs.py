"""A kubeconfig file naming one cluster, for tests of commands that read the live API (kmock, or nothing at all)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(folder: Path, server: str, *, namespace: str | None = None, insecure: bool = False,
                     context_name: str = "c", token: str = "t") -> str:
    """``folder/kubeconfig`` with one context, ``context_name`` and current, on ``server`` (the bearer ``token``,
    the context's namespace if given); returns its path."""
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace is not None:
        context["namespace"] = namespace
    cluster: dict[str, object] = {"server": server.rstrip("/")}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context_name,
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [{"name": context_name, "context": context}],
        "users": [{"name": "u", "user": {"token": token}}]}))
    return str(path)
