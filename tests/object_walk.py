"""Walking rendered Kubernetes objects in tests: every value, every string, every webhook of the webhook
configurations."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def walk(value: Any) -> Iterator[Any]:
    """``value`` and everything inside it, depth first."""
    yield value
    if isinstance(value, Mapping):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def strings(value: Any) -> Iterator[str]:
    """Every string inside ``value`` (map keys left out)."""
    return (item for item in walk(value) if isinstance(item, str))


def webhooks(objects: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """The webhooks of the webhook configurations among ``objects``."""
    for obj in objects:
        if obj["kind"] in WEBHOOK_KINDS:
            yield from obj["webhooks"]
