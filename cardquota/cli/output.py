"""Output formatting in one place: JSON (the machine contract) and aligned tables (for people)."""

from __future__ import annotations

import itertools
import json
import shutil
import textwrap
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from enum import StrEnum
from fractions import Fraction
from typing import Any, TextIO

import yaml

from cardquota.cli.check import CheckResult
from cardquota.core import keys
from cardquota.core.cards import CardType, NodeCards, cluster_totals, sharing_warnings, unlabelled_accelerators
from cardquota.core.evictions import Eviction
from cardquota.core.ledger import CpuMemoryUsage, Ledger, QueueUsage, SubtreeUsage
from cardquota.core.objects import CPU_MEMORY, Node
from cardquota.core.policies.common import skipped_rule
from cardquota.core.preemption import PreemptionPolicy, preemption_policy
from cardquota.core.quantity import format_quantity
from cardquota.core.scheduling.simulate import Simulation
from cardquota.core.snapshot import CardPolicy, ClusterSnapshot
from cardquota.core.verdict import describe_operation

NONE = "-"

CARD_TYPES_SECTION = "docs/cards.md: Card types discovered from a node"
SHOWN_NODES = 10
"""Unlabelled nodes ``discover`` names one by one before "and N more"."""
NO_NODES_IN_USAGE = ("no card type is known, so bound pods' cards count under their volcano.sh/card.name as written "
                     "and pending pods' extended resources all count as cards")
NO_NODES_IN_CHECK = ("the rules that need the card types nodes offer are skipped (card types no node offers, quotas "
                     "above what the nodes offer)")


class OutputFormat(StrEnum):
    JSON = "json"
    YAML = "yaml"
    TABLE = "table"
    WIDE = "wide"
    """A table with every column, however wide (``table`` fits :data:`WIDTH` columns)."""


WIDTH = 80
"""What a table (``-o table``) and explain's text fit when the output is not a terminal."""
MIN_WIDTH = 40
"""The narrowest a table is made to fit (a narrower terminal gets this many columns)."""
SEPARATOR = "  "
MIN_ELIDED = 16
"""A name column is never cut below this many characters to make a table fit."""
ELLIPSIS = "…"
HEAD = 4
"""Characters a cut name keeps before the cut when its start is all it shares with the others (``NVID…``)."""
INDENT = "  "
"""Before a row's folded columns, and a check's message, on the lines under the row."""


def write_json(document: Any, out: TextIO) -> None:
    json.dump(document, out, indent=2, sort_keys=False)
    out.write("\n")


def write_yaml(document: Any, out: TextIO) -> None:
    out.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))


def width_of(out: TextIO) -> int:
    """The columns a table or text may take: on a terminal, its width (``COLUMNS`` first, as
    :func:`shutil.get_terminal_size` reads it; at least :data:`MIN_WIDTH`); else :data:`WIDTH`."""
    if out.isatty():
        return max(MIN_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    return WIDTH


Paint = Callable[[int, int, str], str]
"""(row index among the data rows, column index, padded cell text) -> the text to print (colour codes added)."""


NAMES_CUT = "names cut: -o wide shows them whole"
"""The line a table ends with when it cut a name to fit."""


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], paint: Paint | None = None, *,
                 width: int | None = None, elide: Collection[int] = (), notes: Sequence[str] = (),
                 keep: int = 0) -> str:
    """Columns left-aligned, separated by two spaces; ``paint`` colours data cells after the widths are measured,
    so colour never shifts a column. ``-o wide`` passes no ``width`` and shows every cell whole. With ``width``,
    a table wider than that has its ``elide`` columns (names) cut, widest first and never below
    :data:`MIN_ELIDED`, keeping what tells the names apart (:func:`fit_names`); if it is still too wide, the
    columns that do not fit are folded under each row (``INQUEUE=0  PENDING=2``, indented, wrapped), so no line
    is wider than ``width`` (from :data:`MIN_WIDTH` up) — but the first ``keep`` columns, shown whole on their
    row whatever the width (names users copy). ``notes`` (one per row, empty for none: why a pod was not placed)
    go under their row, indented and wrapped to ``width``. A table that cut a name ends with :data:`NAMES_CUT`."""
    cells = [list(headers), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    shown = len(headers)
    cut = False
    if width is not None:
        before = list(widths)
        _fit(cells, widths, width, elide)
        shown = max(_shown_columns(widths, width), keep)
        if shown == 1 and widths[0] > width and not keep:  # (a first column that is no name: cut all the same)
            _cut(cells, widths, 0, width)
        cut = widths != before
    lines = []
    for index, row in enumerate(cells):
        padded = [cell.ljust(size) for cell, size in zip(row[:shown], widths, strict=False)]
        if paint is not None and index > 0:
            padded = [paint(index - 1, column, text) for column, text in enumerate(padded)]
        lines.append(SEPARATOR.join(padded).rstrip())
        if shown < len(headers) and index > 0 and width is not None:
            folded = SEPARATOR.join(f"{cells[0][column]}={row[column]}" for column in range(shown, len(headers)))
            lines.extend(wrapped(INDENT + folded, width, break_long_words=True))
        note = notes[index - 1] if 0 < index <= len(notes) else ""
        if note:
            lines.extend(wrapped(INDENT + note, width or len(INDENT) + len(note), break_long_words=width is not None))
    if cut:
        lines.append(NAMES_CUT)
    return "\n".join(lines) + "\n"


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + len(SEPARATOR) * (len(widths) - 1)


def _fit(cells: list[list[str]], widths: list[int], width: int, elide: Collection[int]) -> None:
    target = list(widths)
    while (over := _total(target) - width) > 0:
        candidates = [column for column in elide if target[column] > max(MIN_ELIDED, len(cells[0][column]))]
        if not candidates:
            break
        column = max(candidates, key=lambda index: target[index])  # the widest, down to the next widest: shared
        floor = max(MIN_ELIDED, len(cells[0][column]))
        next_widest = max((target[index] for index in candidates if index != column), default=floor)
        target[column] -= min(over, target[column] - floor, max(1, target[column] - next_widest))
    for column in elide:
        if target[column] < widths[column]:
            _cut(cells, widths, column, target[column])


def _cut(cells: list[list[str]], widths: list[int], column: int, size: int) -> None:
    fitted = fit_names([row[column] for row in cells[1:]], size)
    for row in cells[1:]:
        row[column] = fitted[row[column]]
    widths[column] = max(len(row[column]) for row in cells)


def _shown_columns(widths: Sequence[int], width: int) -> int:
    """How many leading columns fit in ``width`` (at least one); the rest are folded under each row."""
    shown = len(widths)
    while shown > 1 and _total(widths[:shown]) > width:
        shown -= 1
    return shown


def fit_names(names: Sequence[str], size: int) -> dict[str, str]:
    """Each of ``names`` (one table column) as shown in ``size`` characters: whole when it fits, else with one run
    of characters replaced by :data:`ELLIPSIS`. The run cut is where the column's names are alike: in the start
    they all share (a vendor prefix, after :data:`HEAD` characters) or the end they all share, never in between
    when it can be helped, so what tells two names apart stays (``NVIDIA-A100-SXM4-40GB/mig-3g.20gb`` and
    ``…-80GB/mig-3g.40gb`` keep their memory size and MIG profile); with no other name, the start goes. Two
    distinct names never show the same (the next best cut is taken)."""
    distinct = list(dict.fromkeys(names))
    if all(len(name) <= size for name in distinct):
        return {name: name for name in distinct}
    prefix = _shared_start(distinct) if len(distinct) > 1 else len(distinct[0])  # alone: all of it is alike
    suffix = _shared_start([name[::-1] for name in distinct]) if len(distinct) > 1 else 0
    taken = {name for name in distinct if len(name) <= size}
    fitted = {name: name for name in taken}
    for name in distinct:
        if name in fitted:
            continue
        fitted[name] = _cut_name(name, size, prefix, min(suffix, len(name) - prefix), taken)
        taken.add(fitted[name])
    return fitted


def _shared_start(names: Sequence[str]) -> int:
    """How many leading characters all of ``names`` have in common."""
    first, last = min(names), max(names)  # (what the first and last in order share, all share)
    shared = min(len(first), len(last))
    return next((index for index, (a, b) in enumerate(zip(first[:shared], last[:shared], strict=True)) if a != b),
                shared)


def _cut_name(name: str, size: int, prefix: int, suffix: int, taken: Collection[str]) -> str:
    removed = len(name) - max(size, 1) + 1
    differing = (prefix, len(name) - suffix) if len(name) - suffix > prefix else (len(name), len(name))

    preferred = min(HEAD, (size - 1) // 2, max(0, differing[0] - removed))  # (a cut start keeps its first letters)

    def cost(start: int) -> tuple[int, int]:
        lost = max(0, min(start + removed, differing[1]) - max(start, differing[0]))
        return lost, abs(start - preferred)

    # The cut losing nothing that differs, nearest the preferred start, when there is one (most names: no sort).
    first = (preferred if differing[0] >= removed else differing[1] if len(name) - differing[1] >= removed
             else None)
    def others() -> Iterator[int]:  # (sorted only when needed)
        yield from sorted(range(len(name) - removed + 1), key=cost)

    for start in itertools.chain([first] if first is not None else [], others()):
        cut = name[:start] + ELLIPSIS + name[start + removed:]
        if cut not in taken:
            return cut
    return name  # (only when more names than cuts: never for a column of MIN_ELIDED characters or more)


def elided(text: str, size: int) -> str:
    """``text`` alone cut to ``size`` characters (see :func:`fit_names`)."""
    return fit_names([text], size)[text]


def wrapped(line: str, width: int, *, break_long_words: bool = False) -> list[str]:
    """A line of text wrapped at word boundaries to ``width`` columns; continuation lines are indented under its
    text (after its leading spaces and a ``- `` bullet). Words longer than a line are left whole, unless
    ``break_long_words`` (tables, which must fit)."""
    body = line.lstrip(" ")
    indent = len(line) - len(body)
    hanging = indent + (2 if body.startswith("- ") else 0)
    return textwrap.wrap(body, width=max(width, hanging + 20), initial_indent=" " * indent,
                         subsequent_indent=" " * hanging, break_long_words=break_long_words,
                         break_on_hyphens=False) or [line]


# ------------------------------------------------------------------------------------------------ discover


def discovery_json(nodes: Mapping[str, NodeCards]) -> dict[str, Any]:
    return {
        "nodes": {name: nodes[name].as_json() for name in sorted(nodes)},
        "totals": cluster_totals(nodes.values()),
    }


def discovery_warnings(nodes: Sequence[Node], cards: Mapping[str, NodeCards]) -> list[str]:
    """What ``cardquota discover`` says on stderr after the notes, as ``doctor`` says it: nodes whose accelerators
    have no product label (each with the label to write), then card types that count slices of shared cards."""
    offered = {card.resource for found in cards.values() for card in found.types.values()}
    unlabelled = [found for node in sorted(nodes, key=lambda node: node.name)
                  if (found := unlabelled_accelerators(node, offered)) is not None]
    warnings = [f"Node {found.describe()}: the node offers no card type; label it: {found.command} "
                f"({CARD_TYPES_SECTION})"
                for found in unlabelled[:SHOWN_NODES]]
    if len(unlabelled) > SHOWN_NODES:
        warnings.append(f"and {len(unlabelled) - SHOWN_NODES} more Nodes with accelerators but no product label")
    return warnings + sharing_warnings(cards[name] for name in sorted(cards))


def discovery_table(nodes: Mapping[str, NodeCards], *, wide: bool = False, width: int | None = WIDTH) -> str:
    """NODE, CARD TYPE, KIND, CARDS and COUNT (``wide``: RESOURCE too), then the totals per card type. A shared
    kind shows its replicas (:func:`_kind`); CARDS are the physical cards behind COUNT when the node says."""
    rows: list[list[object]] = []
    for name in sorted(nodes):
        cards = nodes[name].types
        if not cards:
            rows.append([name, NONE, NONE, *([NONE] if wide else []), NONE, NONE])
        for card_name in sorted(cards):
            card = cards[card_name]
            rows.append([name, card.name, _kind(card), *([card.resource] if wide else []),
                         NONE if card.cards is None else card.cards, card.count])
    headers = ["NODE", "CARD TYPE", "KIND", *(["RESOURCE"] if wide else []), "CARDS", "COUNT"]
    # Card type names are what users copy into quotas: never cut (a node name may be, the other columns fold).
    text = render_table(headers, rows, width=None if wide else width, elide=(0,), keep=2)
    totals = cluster_totals(nodes.values())
    if totals:
        text += "\n" + render_table(["CARD TYPE", "TOTAL"], [[name, count] for name, count in totals.items()],
                                    width=None if wide else width, keep=1)
    return text


def _kind(card: CardType) -> str:
    """``whole``, ``mig``; a shared kind with its replicas after a multiplication sign (MPS, 4 replicas: ``mps``,
    the sign, ``4``), or alone when they are not known."""
    return f"{card.kind.value}×{card.replicas}" if card.shared and card.replicas is not None else card.kind.value


# --------------------------------------------------------------------------------------------------- usage


def usage_json(usage: Mapping[str, QueueUsage],
               policies: Mapping[str, PreemptionPolicy] | None = None) -> dict[str, Any]:
    """The queues' usage; with ``policies`` (:func:`preemption_policies`), ``preemption`` in each queue that has a
    Queue object."""
    document: dict[str, Any] = {}
    for queue in sorted(usage):
        document[queue] = usage[queue].as_json()
        if policies is not None and queue in policies:
            document[queue]["preemption"] = policies[queue].value
    return {"queues": document}


def preemption_policies(snapshot: ClusterSnapshot) -> dict[str, PreemptionPolicy]:
    """Each Queue's preemption policy by name (``Never`` when unset or when the annotation names no policy, as
    :func:`~cardquota.core.preemption.preemption_policy` reads it)."""
    return {name: preemption_policy(record.queue.meta.annotations)[0] for name, record in snapshot.queues.items()}


def usage_warnings(ledger: Ledger, queues: Collection[str] | None = None, *, source: str = "the input") -> list[str]:
    """What ``cardquota usage`` and ``kubectl cardquota usage`` both say on stderr about the queues they show (all,
    or ``queues``): a ``volcano.sh/card.quota`` that cannot be read (counted as no quota), and usage charged to a
    queue without a Queue object in ``source``."""
    shown = set(ledger.queue_names()) if queues is None else set(queues)
    warnings = [f"warning: Queue {name}: {violation} (ignored)"
                for name, record in sorted(ledger.snapshot.queues.items()) if name in shown
                for violation in record.quota.violations]
    warnings.extend(f"warning: Queue {name}: {error} (read as {PreemptionPolicy.NEVER.value})"
                    for name, record in sorted(ledger.snapshot.queues.items()) if name in shown
                    for error in [preemption_policy(record.queue.meta.annotations)[1]] if error)
    warnings.extend(f"warning: queue {name} has card usage but no Queue object in {source}"
                    for name in ledger.queue_names() if name in shown and name not in ledger.snapshot.queues)
    warnings.extend(unquoted_warning(name, cards, ledger.snapshot.card_policy)
                    for name, cards in ledger.unquoted_holdings().items() if name in shown)
    return warnings


def unquoted_warning(queue: str, cards: int, policy: CardPolicy) -> str:
    """The line for a queue without a card quota whose pods hold cards (:meth:`Ledger.unquoted_holdings`)."""
    held = f"warning: queue {queue} has no {keys.CARD_QUOTA} and its pods hold {cards} card{'s' if cards != 1 else ''}"
    if policy.unquoted_hold_zero:
        return (f"{held}: a queue without a card quota holds 0 cards (--unquoted-queues=zero), so new card work there "
                "is refused; give it a quota")
    return f"{held}: pods naming no card type are not limited there (--unquoted-queues=unlimited)"


def no_nodes_warning(ledger: Ledger, files: Sequence[str], consequence: str) -> str | None:
    """The warning for a cluster input (``files``; none: the live cluster) without a Node offering a card type:
    what is skipped or counted otherwise because of it (``consequence``); None when some Node offers one."""
    if ledger.snapshot.catalog().entries:
        return None
    nodes = len(ledger.snapshot.nodes)
    where = ", ".join(files) if files else "the cluster"
    found = "no Node" if nodes == 0 else f"no Node offering a card type ({nodes} Node{'s' if nodes != 1 else ''})"
    return f"warning: {found} in {where}: {consequence}"


NO_RESOURCES = "No resources found"
"""Said on stderr, instead of a table of bare headers, when a table would have no row (nothing matches ``nodes -l``,
no Queue): ``kubectl get``'s words for cluster-scoped kinds, on the same stream (``GetOptions.Run`` in
kubernetes/kubectl ``pkg/cmd/get/get.go``: written when the human-readable printer wrote nothing). ``-o json``/``-o
yaml`` print their document with nothing in it and say nothing, as ``kubectl get -o json`` prints an empty List
(``printGeneric``, same file)."""


_RED, _YELLOW, _GREEN, _RESET = "\033[31m", "\033[33m", "\033[32m", "\033[0m"
BAR_WIDTH = 20
USAGE_HEADERS = ["QUEUE", "CARD", "QUOTA", "ALLOCATED", "INQUEUE", "PENDING"]
WIDE_USAGE_HEADERS = [*USAGE_HEADERS, "FREE", "USED", "BAR"]


def usage_table(usage: Mapping[str, QueueUsage], *, wide: bool = False, color: bool = False,
                limit: int | None = None, err: TextIO | None = None, width: int | None = WIDTH,
                parents: Mapping[str, str] | None = None,
                policies: Mapping[str, PreemptionPolicy] | None = None) -> str:
    """``cardquota usage``'s and ``kubectl cardquota usage``'s table: QUEUE, CARD, QUOTA, ALLOCATED, INQUEUE and
    PENDING; ``wide`` adds FREE (quota - allocated - inqueue), USED ((allocated + inqueue) / quota) and a bar. When
    pods wait at the card-quota gate, WAITING follows PENDING: the part of it not let through yet (the rest is
    admitted and held against the quota). A queue with a cpu/memory capability gets ``cpu`` and ``memory`` rows; a
    queue with queues below it (``spec.parent``) gets ``<queue> (subtree)`` rows: its quota against its whole
    subtree's cards, as the card-quota gate holds them. ``wide`` with ``parents`` (each queue's ``spec.parent``, empty
    or absent when it names none) adds PARENT after QUEUE; ``wide`` with ``policies`` (:func:`preemption_policies`)
    adds PREEMPTION after them (``-`` for a queue without a Queue object). With ``color``, the share used tints
    ALLOCATED and INQUEUE (``wide``: FREE, USED and the bar): green, yellow from 80 %, red from 100 %."""
    rows: list[list[object]] = []
    shares: list[float | None] = []
    owners: list[str] = []
    """The queue of each row (its PARENT and PREEMPTION)."""
    gated = any(entry.waiting or (entry.subtree is not None and entry.subtree.waiting) for entry in usage.values())
    waiting_cell: list[object] = [0] if gated else []
    def card_rows(owner: str, label: str, quotas: Mapping[str, int], counted: QueueUsage | SubtreeUsage,
                  cards: list[str]) -> None:
        for card in cards:
            quota = quotas.get(card)
            allocated, inqueue = counted.allocated.get(card, 0), counted.inqueue.get(card, 0)
            share = (allocated + inqueue) / quota if quota else None
            row: list[object] = [label, card, quota if quota is not None else NONE, allocated, inqueue,
                                 counted.pending.get(card, 0), *([counted.waiting.get(card, 0)] if gated else [])]
            if wide:
                free = max(quota - allocated - inqueue, 0) if quota is not None else NONE
                row += [free, f"{share:.0%}" if share is not None else NONE, _bar(share)]
            rows.append(row)
            shares.append(share)
            owners.append(owner)

    for queue in sorted(usage):
        entry = usage[queue]
        cards = sorted({*entry.quota, *entry.allocated, *entry.inqueue, *entry.pending})
        if not cards:
            rows.append([queue, NONE, NONE, 0, 0, 0, *waiting_cell, *([NONE, NONE, ""] if wide else [])])
            shares.append(None)
            owners.append(queue)
        card_rows(queue, queue, entry.quota, entry, cards)
        if entry.cpu_memory is not None:
            for cpu_row, cpu_share in _cpu_memory_rows(queue, entry.cpu_memory, wide=wide):
                rows.append([*cpu_row[:6], *([NONE] if gated else []), *cpu_row[6:]])
                shares.append(cpu_share)
                owners.append(queue)
        if entry.subtree is not None:  # a parent: its quota against its whole subtree, on rows of their own
            subtree = entry.subtree
            card_rows(queue, f"{queue} (subtree)", entry.quota, subtree,
                      sorted({*entry.quota, *subtree.allocated, *subtree.inqueue, *subtree.pending}))
    if limit is not None and len(rows) > limit:
        if err is not None:
            more = len(rows) - limit
            err.write(f"{more} more row{'s' if more != 1 else ''} not shown (raise --limit)\n")
        rows, shares, owners = rows[:max(limit, 0)], shares[:max(limit, 0)], owners[:max(limit, 0)]
    tinted = range(6 + len(waiting_cell), 9 + len(waiting_cell)) if wide else range(3, 5)
    headers = WIDE_USAGE_HEADERS if wide else USAGE_HEADERS
    if gated:
        headers = [*headers[:6], "WAITING", *headers[6:]]
    if wide and policies is not None:  # QUEUE, PARENT, PREEMPTION (a subtree row: its queue's; PARENT goes in next)
        rows = [[row[0], policy.value if (policy := policies.get(owner)) is not None else NONE, *row[1:]]
                for row, owner in zip(rows, owners, strict=True)]
        headers = [headers[0], "PREEMPTION", *headers[1:]]
        tinted = range(tinted.start + 1, tinted.stop + 1)
    if wide and parents is not None:
        rows = [[row[0], parents.get(str(owner)) or NONE, *row[1:]] for row, owner in zip(rows, owners, strict=True)]
        headers = [headers[0], "PARENT", *headers[1:]]
        tinted = range(tinted.start + 1, tinted.stop + 1)

    def paint(row: int, column: int, text: str) -> str:
        share = shares[row] if row < len(shares) else None
        if column not in tinted or share is None:
            return text
        tint = _RED if share >= 1 else _YELLOW if share >= 0.8 else _GREEN
        return f"{tint}{text}{_RESET}"

    return render_table(headers, rows, paint if color else None, width=None if wide else width, elide=(0, 1))


def _cpu_memory_rows(queue: str, usage: CpuMemoryUsage, *, wide: bool) -> list[tuple[list[object], float | None]]:
    """The ``cpu`` and ``memory`` rows of a queue with a capability, read as the card rows are: QUOTA is the
    capability, FREE is capability - allocated - inqueue, USED is (allocated + inqueue) / capability (the JSON also
    has the elastic part, which the enqueue check takes off); PENDING is not counted for them (``-``)."""
    written = usage.as_json()
    rows: list[tuple[list[object], float | None]] = []
    for resource in CPU_MEMORY:
        capability = usage.capability.get(resource, Fraction(0))
        used = usage.use.allocated.get(resource, Fraction(0)) + usage.use.inqueue.get(resource, Fraction(0))
        share = float(used / capability) if capability else None
        row: list[object] = [queue, resource, written["capability"][resource], written["allocated"][resource],
                             written["inqueue"][resource], NONE]
        if wide:
            free = format_quantity(max(capability - used, Fraction(0)), binary=resource == "memory")
            row += [free, f"{share:.0%}" if share is not None else NONE, _bar(share)]
        rows.append((row, share))
    return rows


def _bar(share: float | None) -> str:
    if share is None:
        return ""
    filled = min(BAR_WIDTH, round(share * BAR_WIDTH))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


# ------------------------------------------------------------------------------------------------ simulate


def simulation_table(result: Simulation, *, wide: bool = False, width: int = WIDTH) -> str:
    """Each pod's node and card type (GPU indexes when any pod has some), each PodGroup's phase, then the queues'
    usage after the run. A reason (why not placed, why not enqueued) is its own line under the row, wrapped to
    ``width``; ``wide`` keeps it in a REASON column, one row per pod, however long."""
    indexes = {name: ";".join(f"{c}={','.join(i)}" for c, i in outcome.gpu_indexes.items()) or NONE
               for name, outcome in result.placements.items()}
    show_indexes = wide or any(text != NONE for text in indexes.values())
    pod_headers = ["POD", "NODE", "CARD-TYPE", *(["GPU-INDEXES"] if show_indexes else [])]
    pods = [[name, outcome.node or NONE, outcome.card_type or NONE, *([indexes[name]] if show_indexes else [])]
            for name, outcome in result.placements.items()]
    pod_reasons = [outcome.reason or "" for outcome in result.placements.values()]
    groups = [[name, outcome.phase] for name, outcome in result.podgroups.items()]
    group_reasons = [outcome.reason or "" for outcome in result.podgroups.values()]
    parts = [_with_reasons(pod_headers, pods, pod_reasons, wide=wide, width=width)]
    if groups:
        parts.append(_with_reasons(["PODGROUP", "PHASE"], groups, group_reasons, wide=wide, width=width))
    if result.evictions:
        parts.append(evictions_table(result.evictions, wide=wide, width=width))
    parts.append(usage_table(result.usage, wide=wide, width=width))
    return "\n".join(parts)


def evictions_table(evictions: Sequence[Eviction], *, wide: bool = False, width: int = WIDTH) -> str:
    """The evictions the card-quota gate's preemptions make: each victim (a PodGroup, or a pod without one), its
    priority, the cards its release frees and whom it is evicted for; its pods under the row (``-o wide``: a PODS
    column)."""
    headers = ["EVICTED", "PRIORITY", "CARDS", "FOR"]
    rows = [[eviction.name, eviction.priority, eviction.cards_text(),
             f"{eviction.preemptor} (priority {eviction.preemptor_priority})"] for eviction in evictions]
    pods = [", ".join(f"{namespace}/{name}" for namespace, name in eviction.pods) for eviction in evictions]
    if wide:
        return render_table([*headers, "PODS"], [[*row, names] for row, names in zip(rows, pods, strict=True)])
    return render_table(headers, rows, width=width, elide=(0, 3), notes=[f"pods: {names}" for names in pods])


def _with_reasons(headers: list[str], rows: Sequence[Sequence[object]], reasons: list[str], *, wide: bool,
                  width: int) -> str:
    if wide:
        return render_table([*headers, "REASON"], [[*row, reason] for row, reason in zip(rows, reasons, strict=True)])
    return render_table(headers, rows, width=width, elide=range(len(headers)), notes=reasons)


# --------------------------------------------------------------------------------------------------- check

STATUS_WIDTH = len("ALLOWED") + len(SEPARATOR)
"""Where a check's object starts, and how far its message, warnings and patches are indented under it."""


def check_table(results: Sequence[CheckResult], *, color: bool, width: int = WIDTH) -> str:
    """One line per document (ALLOWED/DENIED, the object, the message), fitting ``width``: objects' names cut
    as a table's are (:func:`fit_names`), a message too long for the line wrapped under it, indented; then each
    warning and patch, indented and wrapped."""
    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    indent = " " * STATUS_WIDTH
    names = fit_names([_object_name(result) for result in results], max(MIN_ELIDED, width - STATUS_WIDTH))
    column = max((len(name) for name in names.values()), default=0)
    lines = []
    for result in results:
        verdict = result.verdict
        status = paint("ALLOWED", _GREEN) if verdict.allowed else paint("DENIED ", _RED)
        message = verdict.message if not verdict.allowed else ("mutated" if verdict.patch else "ok")
        name = names[_object_name(result)]
        if STATUS_WIDTH + column + len(SEPARATOR) + len(message) <= width:
            lines.append(f"{status}{SEPARATOR}{name.ljust(column)}{SEPARATOR}{message}".rstrip())
        else:
            lines.append(f"{status}{SEPARATOR}{name}")
            lines.extend(_wrap(message, width, indent, indent))
        for warning in verdict.warnings:
            if skipped_rule(warning) is not None:
                continue  # said once for the run, on stderr (check.skipped_notes)
            said = _wrap(f"warning: {warning}", width, indent, indent + "  ")
            lines.extend([said[0].replace("warning:", paint("warning:", _YELLOW), 1), *said[1:]])
        for op in verdict.patch:
            lines.extend(_wrap(f"patch: {describe_operation(op)}", width, indent, indent + "  "))
    allowed = sum(1 for result in results if result.verdict.allowed)
    lines.append(f"\n{allowed} allowed, {len(results) - allowed} denied")
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped to ``width`` after ``first`` (then ``rest``) indentation, long words broken to fit."""
    return textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=rest, break_long_words=True,
                         break_on_hyphens=False) or [first.rstrip()]


def _object_name(result: CheckResult) -> str:
    where = f"{result.namespace}/{result.name}" if result.namespace else result.name
    return f"{result.kind} {where}"
