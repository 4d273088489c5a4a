"""Kopf admission webhooks of cardquota, shipped as ``cardquota.webhooks`` (see ``pyproject.toml``)."""
