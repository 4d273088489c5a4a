"""``kubectl cardquota scheduler-conf``: the scheduler's configuration with the extender's stanza merged in.

Reads the scheduler ConfigMap (live, or from ``--cluster`` files), the nodes and the queues, and prints the
ConfigMap again with every plugin, action and setting of the user's kept and the ``extender`` entry put where its
enqueue vote counts (:mod:`cardquota.core.schedconf.fragment`), ready for ``kubectl apply -f -``. Or only the
stanza, the conf text, or the ``managedResources`` list generated from the card resources the nodes offer.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from cardquota.core.errors import InputError
from cardquota.core.jsontypes import MAPPING_TYPES
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Manifest
from cardquota.core.policies.config import DEFAULT_SCHEDULER_CONFIGMAP
from cardquota.core.schedconf.extender import (
    conf_leaks,
    offered_resources,
    plugin_arguments,
    plugin_entries,
)
from cardquota.core.schedconf.fragment import EXTENDER_URL, GatedStanza, extender_stanza, gated_stanza, merged_conf
from cardquota.core.schedconf.reader import CONF_KEY, read_conf
from cardquota.core.schedconf.source import arguments_text

SCHEDULER_NAMESPACE = "volcano-system"
PRINTS = ("configmap", "conf", "fragment", "managed-resources")
MANAGED = ("auto", "offered", "all")
GATE = ("on", "off")
KEPT_METADATA = ("name", "namespace", "labels", "annotations")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the conf inside the ConfigMap) as YAML literal blocks, as people write them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def _dump(document: object) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def add_command(commands: Any, common: argparse.ArgumentParser) -> None:
    from cardquota.cli.kubectl import add_namespace_options, examples

    parser = commands.add_parser(
        "scheduler-conf", parents=[common], help="the scheduler ConfigMap with the extender's stanza merged in",
        description="Print the Volcano scheduler ConfigMap (volcano-system/volcano-scheduler-configmap, live or "
        "from --cluster files) with cardquota's extender plugin merged in: every plugin and setting of yours kept, "
        "the extender placed where its enqueue vote counts. Apply it with: kubectl cardquota scheduler-conf | "
        "kubectl apply -f -")
    parser.add_argument("--print", dest="prints", choices=PRINTS, default="configmap",
                        help="configmap (default: the whole ConfigMap, for kubectl apply), conf (its "
                        f"{CONF_KEY}), fragment (the extender's plugin entry only) or managed-resources (the card "
                        "resources the nodes offer, one a line)")
    parser.add_argument("--managed-resources", dest="managed", choices=MANAGED, default="auto",
                        help="offered: list the card and mGPU resources the nodes offer in extender.managedResources "
                        "(pods without them are then never sent to the extender); all: leave it out (every pod is "
                        "sent); auto (default): all when crossquota or a queue's cpu/memory capability needs the "
                        "non-card pods, else offered")
    parser.add_argument("--card-gate", choices=GATE, default="on",
                        help="on (default, as the shipped manifests run cardquota): the card-quota gate holds the "
                        "card quotas, so the stanza keeps the enqueue check and the task verbs only for what "
                        "placement still needs (mGPU, crossquota, DRA quotas), with extender.ignorable true when "
                        "it needs none; off: the extender enforces every card quota when pods are placed (every "
                        "verb, --managed-resources applies)")
    parser.add_argument("--extender-url", default=EXTENDER_URL, metavar="URL",
                        help="where the scheduler calls the extender (default: %(default)s, the Service of "
                        "manifests/components/extender)")
    add_namespace_options(parser)
    parser.epilog = examples(f"{parser.prog} > scheduler.yaml   # review it, then: kubectl apply -f scheduler.yaml",
                             f"{parser.prog} --print fragment --cluster cluster.yaml   # the extender's entry only")
    parser.set_defaults(command=scheduler_conf_command)


def scheduler_conf_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cardquota.cli.kubectl import EXIT_OK, _cluster

    cluster = _cluster(args)
    objects = [*cluster.objects(), *cluster.configmaps(err)]
    ledger = Ledger.build(objects)
    records = list(ledger.snapshot.nodes.values())
    offered = sorted(offered_resources((record.node.allocatable for record in records),
                                       (resource for record in records for resource in record.cards.by_resource)))
    if args.prints == "managed-resources":
        out.write("".join(f"{resource}\n" for resource in offered))
        return EXIT_OK
    capability = sorted(name for name, record in ledger.snapshot.queues.items() if record.queue.capability is not None)
    source = arguments_text(objects, DEFAULT_SCHEDULER_CONFIGMAP)
    try:
        crossquota = source.text is not None and "crossquota" in plugin_arguments(
            plugin_entries(read_conf(source.text)))
    except InputError as error:
        raise error.located(source.source) from None
    dra = sorted(name for name, record in ledger.snapshot.queues.items() if record.queue.dra)
    card_gate = args.card_gate == "on"
    if card_gate:
        if args.managed != "auto":
            raise InputError("--managed-resources applies with --card-gate off only: with the gate, the stanza "
                             "sends the extender only the tasks placement still needs")
        gated = gated_stanza(offered, crossquota=crossquota)
        _say_gated(gated, err)
        stanza = extender_stanza(url=args.extender_url, gated=gated)
    else:
        managed = _managed(args.managed, offered, crossquota=crossquota, capability=capability, err=err)
        stanza = extender_stanza(managed, url=args.extender_url)
    if args.prints == "fragment":
        out.write(_dump([stanza]))
        return EXIT_OK
    configmap = _scheduler_configmap(objects)
    conf = None
    if configmap is None:
        err.write(f"note: no ConfigMap {SCHEDULER_NAMESPACE}/{DEFAULT_SCHEDULER_CONFIGMAP} was found: Volcano's "
                  "default configuration (v1.15.1) is merged\n")
    else:
        conf = _conf_of(configmap)
    merged = merged_conf(conf, stanza)
    for leak in conf_leaks(plugin_entries(merged), offered=offered, capability_queues=capability,
                           card_gate=card_gate, dra_queues=dra):
        err.write(f"warning: {leak.path}: {leak.message}\n")
    text = _dump(merged)
    if args.prints == "conf":
        out.write(text)
    else:
        out.write(_dump(_applied(configmap, text)))
    return EXIT_OK


def _say_gated(gated: GatedStanza, err: TextIO) -> None:
    if not gated.placement:
        err.write("note: the card-quota gate holds the card quotas: the extender keeps the enqueue check only (no "
                  "per-node verb; extender.ignorable true, so an extender that is down or slow never stops "
                  "Volcano's other work)\n")
    elif gated.managed is not None:
        err.write(f"note: the extender's task verbs are kept for the tasks requesting {', '.join(gated.managed)} "
                  f"only ({'; '.join(gated.reasons)}); extender.ignorable false\n")
    else:
        err.write(f"note: every task is sent to the extender's task verbs ({'; '.join(gated.reasons)}); "
                  "extender.ignorable false\n")


def _managed(choice: str, offered: Sequence[str], *, crossquota: bool, capability: Sequence[str],
             err: TextIO) -> list[str] | None:
    """The managedResources list to write, None to leave it out (every task sent), with a note saying why."""
    if choice == "all":
        return None
    if choice == "offered":
        return list(offered)
    needs = (["crossquota is configured"] if crossquota else []) + (
        [f"queues {', '.join(capability)} have a cpu/memory capability"] if capability else [])
    if needs:
        err.write(f"note: extender.managedResources left out ({' and '.join(needs)}: those checks need the pods "
                  "without cards too); every task is sent to the extender (--managed-resources offered lists "
                  "only the card resources)\n")
        return None
    if not offered:
        err.write("note: no node offers a card resource: extender.managedResources left out (every task is sent)\n")
        return None
    return list(offered)


def _scheduler_configmap(objects: Sequence[Manifest]) -> Manifest | None:
    for manifest in objects:
        metadata = manifest.get("metadata")
        if manifest.get("kind") == "ConfigMap" and isinstance(metadata, MAPPING_TYPES) and \
                metadata.get("name") == DEFAULT_SCHEDULER_CONFIGMAP and \
                metadata.get("namespace") in (None, SCHEDULER_NAMESPACE):
            return manifest
    return None


def _conf_of(configmap: Manifest) -> object:
    data = configmap.get("data")
    text = data.get(CONF_KEY) if isinstance(data, MAPPING_TYPES) else None
    where = f"ConfigMap {SCHEDULER_NAMESPACE}/{DEFAULT_SCHEDULER_CONFIGMAP}"
    if not isinstance(text, str):
        raise InputError(f"has no {CONF_KEY} to merge into", where=where)
    try:
        return read_conf(text)
    except InputError as error:
        raise error.located(where) from None


def _applied(configmap: Manifest | None, text: str) -> dict[str, Any]:
    """The ConfigMap to apply: its identity, labels and annotations kept (not the server's bookkeeping), every
    other key of its data kept, the conf replaced."""
    metadata: dict[str, Any] = {"name": DEFAULT_SCHEDULER_CONFIGMAP, "namespace": SCHEDULER_NAMESPACE}
    data: dict[str, Any] = {}
    if configmap is not None:
        old = configmap.get("metadata")
        old = old if isinstance(old, MAPPING_TYPES) else {}
        metadata.update({key: old[key] for key in KEPT_METADATA if key in old and key != "namespace"})
        annotations = metadata.get("annotations")
        if isinstance(annotations, MAPPING_TYPES):
            metadata["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
            if not metadata["annotations"]:
                del metadata["annotations"]
        old_data = configmap.get("data")
        data.update(old_data if isinstance(old_data, MAPPING_TYPES) else {})
    data[CONF_KEY] = text
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
