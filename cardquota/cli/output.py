"""Output formatting in one place: JSON (the machine contract) and aligned tables (for people)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from enum import StrEnum
from typing import Any, TextIO

from cardquota.cli.check import CheckResult
from cardquota.core.cards import NodeCards, cluster_totals
from cardquota.core.ledger import Ledger, QueueUsage
from cardquota.core.objects import CPU_MEMORY
from cardquota.core.scheduling.simulate import Simulation

NONE = "-"

NO_NODES_IN_USAGE = ("no card type is known, so bound pods' cards count under their volcano.sh/card.name as written "
                     "and pending pods' extended resources all count as cards")
NO_NODES_IN_CHECK = ("the rules that need the card types nodes offer are skipped (card types no node offers, quotas "
                     "above what the nodes offer)")


class OutputFormat(StrEnum):
    JSON = "json"
    TABLE = "table"


def write_json(document: Any, out: TextIO) -> None:
    json.dump(document, out, indent=2, sort_keys=False)
    out.write("\n")


Paint = Callable[[int, int, str], str]
"""(row index among the data rows, column index, padded cell text) -> the text to print (colour codes added)."""


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], paint: Paint | None = None) -> str:
    """Columns left-aligned, separated by three spaces, as kubectl prints them; ``paint`` colours data cells after
    the widths are measured, so colour never shifts a column."""
    cells = [list(headers), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        if paint is not None and index > 0:
            padded = [paint(index - 1, column, text) for column, text in enumerate(padded)]
        lines.append("   ".join(padded).rstrip())
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ discover


def discovery_json(nodes: Mapping[str, NodeCards]) -> dict[str, Any]:
    return {
        "nodes": {name: nodes[name].as_json() for name in sorted(nodes)},
        "totals": cluster_totals(nodes.values()),
    }


def discovery_table(nodes: Mapping[str, NodeCards]) -> str:
    rows: list[list[object]] = []
    for name in sorted(nodes):
        cards = nodes[name].types
        if not cards:
            rows.append([name, NONE, NONE, NONE, NONE])
        for card_name in sorted(cards):
            card = cards[card_name]
            rows.append([name, card.name, card.kind.value, card.resource, card.count])
    text = render_table(["NODE", "CARD TYPE", "KIND", "RESOURCE", "COUNT"], rows)
    totals = cluster_totals(nodes.values())
    if totals:
        text += "\n" + render_table(["CARD TYPE", "TOTAL"], [[name, count] for name, count in totals.items()])
    return text


# --------------------------------------------------------------------------------------------------- usage


def usage_json(usage: Mapping[str, QueueUsage]) -> dict[str, Any]:
    return {"queues": {queue: usage[queue].as_json() for queue in sorted(usage)}}


def usage_warnings(ledger: Ledger, queues: Collection[str] | None = None, *, source: str = "the input") -> list[str]:
    """What ``cardquota usage`` and ``kubectl cardquota usage`` both say on stderr about the queues they show (all,
    or ``queues``): a ``volcano.sh/card.quota`` that cannot be read (counted as no quota), and usage charged to a
    queue without a Queue object in ``source``."""
    shown = set(ledger.queue_names()) if queues is None else set(queues)
    warnings = [f"warning: Queue {name}: {violation} (ignored)"
                for name, record in sorted(ledger.snapshot.queues.items()) if name in shown
                for violation in record.quota.violations]
    warnings.extend(f"warning: queue {name} has card usage but no Queue object in {source}"
                    for name in ledger.queue_names() if name in shown and name not in ledger.snapshot.queues)
    return warnings


def no_nodes_warning(ledger: Ledger, files: Sequence[str], consequence: str) -> str | None:
    """The warning for a cluster input (``files``; none: the live cluster) without a Node offering a card type:
    what is skipped or counted otherwise because of it (``consequence``); None when some Node offers one."""
    if ledger.snapshot.catalog().entries:
        return None
    nodes = len(ledger.snapshot.nodes)
    where = ", ".join(files) if files else "the cluster"
    found = "no Node" if nodes == 0 else f"no Node offering a card type ({nodes} Node{'s' if nodes != 1 else ''})"
    return f"warning: {found} in {where}: {consequence}"


def usage_table(usage: Mapping[str, QueueUsage]) -> str:
    rows: list[list[object]] = []
    for queue in sorted(usage):
        entry = usage[queue]
        cards = list(dict.fromkeys([*entry.quota, *entry.allocated, *entry.inqueue, *entry.pending]))
        if not cards:
            rows.append([queue, NONE, NONE, 0, 0, 0])
        for card in sorted(cards):
            rows.append([
                queue,
                card,
                entry.quota.get(card, NONE),
                entry.allocated.get(card, 0),
                entry.inqueue.get(card, 0),
                entry.pending.get(card, 0),
            ])
        rows.extend([queue, *line, NONE] for line in cpu_memory_lines(entry))
    return render_table(["QUEUE", "CARD", "QUOTA", "ALLOCATED", "INQUEUE", "PENDING"], rows)


def cpu_memory_lines(entry: QueueUsage) -> list[list[str]]:
    """For a queue with a cpu/memory ``spec.capability``: a ``cpu`` and a ``memory`` line (resource, capability,
    allocated, inqueue) in the units Kubernetes writes, after its cards."""
    if entry.cpu_memory is None:
        return []
    written = entry.cpu_memory.as_json()
    return [[resource, written["capability"][resource], written["allocated"][resource],
             written["inqueue"][resource]] for resource in CPU_MEMORY]


# ------------------------------------------------------------------------------------------------ simulate


def simulation_table(result: Simulation) -> str:
    pods = [[name, outcome.node or NONE, outcome.card_type or NONE,
             ";".join(f"{c}={','.join(i)}" for c, i in outcome.gpu_indexes.items()) or NONE,
             outcome.reason or ""] for name, outcome in result.placements.items()]
    groups = [[name, outcome.phase, outcome.reason or ""] for name, outcome in result.podgroups.items()]
    usage = result.usage
    parts = [render_table(["POD", "NODE", "CARD-TYPE", "GPU-INDEXES", "REASON"], pods)]
    if groups:
        parts.append(render_table(["PODGROUP", "PHASE", "REASON"], groups))
    parts.append(usage_table(usage))
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------- check

_GREEN, _RED, _YELLOW, _RESET = "\033[32m", "\033[31m", "\033[33m", "\033[0m"


def check_table(results: Sequence[CheckResult], *, color: bool) -> str:
    """One line per document (ALLOWED/DENIED, the object, the message), warnings and patches indented below."""
    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    lines = []
    width = max((len(_object_name(result)) for result in results), default=0)
    for result in results:
        verdict = result.verdict
        status = paint("ALLOWED", _GREEN) if verdict.allowed else paint("DENIED ", _RED)
        message = verdict.message if not verdict.allowed else ("mutated" if verdict.patch else "ok")
        lines.append(f"{status}  {_object_name(result).ljust(width)}  {message}".rstrip())
        for warning in verdict.warnings:
            lines.append(f"         {paint('warning:', _YELLOW)} {warning}")
        for op in verdict.patch:
            lines.append(f"         patch: {op['op']} {op['path']}")
    allowed = sum(1 for result in results if result.verdict.allowed)
    lines.append(f"\n{allowed} allowed, {len(results) - allowed} denied")
    return "\n".join(lines) + "\n"


def _object_name(result: CheckResult) -> str:
    where = f"{result.namespace}/{result.name}" if result.namespace else result.name
    return f"{result.kind} {where}"
