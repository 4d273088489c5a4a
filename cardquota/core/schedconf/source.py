"""The one place the plugins' arguments (capacity-card, crossquota, the mGPU ``predicates``) are read from.

Rules read their arguments from the configuration of whatever enforces them:

* the extender's conf — the ConfigMap ``cardquota-extender-conf`` in cardquota's namespace, key
  ``volcano-scheduler.conf``, which the extender mounts — whenever it exists (stock Volcano calls the extender, and
  the extender applies these arguments);
* else the scheduler's own ConfigMap (``volcano-scheduler-configmap``): a scheduler built with the capacity-card
  plugin reads them there.

The extender (its mounted file), ``kubectl cardquota usage``/``explain``/``simulate`` and the controller's events
all call :func:`arguments_text`, so they apply the same ``cardUnlimitedCpuMemory``. When the scheduler's ConfigMap
writes them too and differently, the ConfigMap policy and ``doctor`` say so
(:func:`cardquota.core.schedconf.extender.argument_disagreements`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.objects import Manifest
from cardquota.core.schedconf.reader import CONF_KEY

EXTENDER_CONFIGMAP = "cardquota-extender-conf"
"""The extender's conf (manifests/components/extender/kustomization.yaml's configMapGenerator)."""


@dataclass(frozen=True)
class ArgumentsText:
    """The text the plugins' arguments are read from, and where it came from (for messages)."""

    text: str | None
    """None: no conf was found (every plugin's defaults)."""
    source: str
    """``ConfigMap NAMESPACE/NAME`` (the namespace when the manifest names one), or what was looked for."""


def arguments_text(manifests: Iterable[Manifest], scheduler_configmap: str,
                   extender_configmap: str = EXTENDER_CONFIGMAP) -> ArgumentsText:
    """The extender's conf among ``manifests`` when there is one, else the scheduler's ConfigMap's."""
    found: dict[str, tuple[str, str]] = {}
    for manifest in manifests:
        metadata = manifest.get("metadata")
        data = manifest.get("data")
        if manifest.get("kind") != "ConfigMap" or not isinstance(metadata, MAPPING_TYPES):
            continue
        name = metadata.get("name")
        if name in (scheduler_configmap, extender_configmap) and isinstance(data, MAPPING_TYPES) and \
                isinstance(data.get(CONF_KEY), str):
            namespace = metadata.get("namespace")
            where = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else str(name)
            found.setdefault(str(name), (data[CONF_KEY], where))
    for name in (extender_configmap, scheduler_configmap):
        if name in found:
            text, where = found[name]
            return ArgumentsText(text, f"ConfigMap {where}")
    return ArgumentsText(None, f"no ConfigMap {extender_configmap} or {scheduler_configmap}")
