"""Choosing preemption victims in a full queue, at 1,000 and 10,000 admitted PodGroups: the 10k/1k ratio.

    python bench/preemption.py [--small 1000] [--large 10000] [--repeats 20]

One decision (:func:`cardquota.core.preemption.choose_victims`) for an urgent gang of 4 pods of 8 cards (priority
500) waiting in queue ``research`` (under a parent ``org`` with a card quota), whose card quota its admitted
PodGroups fill exactly: each holds 8 cards of one of three types (``NVIDIA-H100``, ``NVIDIA-A100``, or
``NVIDIA-A100|NVIDIA-H100`` unnarrowed), of priority 0 to 900, one in ten not preemptable and one in twenty
refused by a PodDisruptionBudget, admitted at distinct times in a shuffled order. Two cases: the gang fits by
evicting some of them (``evicts``), and it asks more than every candidate could free (``no set fits``: the answer
is nothing, after one check with all of them released). The room and the admitted list are built once; the
decision leaves the room as it found it. Targets: ≤ 10 ms per decision at 1,000, and the 10k/1k ratio ≤ 12 times
(growing no faster than linearly). Figures: min / median / max over ``--repeats`` runs.

A third case times the decision as the gate keeper makes it (``round``): a whole gate round
(:func:`cardquota.core.gate.gate_round`) over a ledger built from the same queue — the PodGroups as pods of 8 cards
each (bound on 100 nodes, or past the gate), the gang's 4 pods at the gate — which reads the admitted units from
the ledger (:meth:`~cardquota.core.ledger.Ledger.held_units`), chooses, and takes the plan in the room.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import timed

from cardquota.core.card_room import CardRoom
from cardquota.core.gate import gate_round
from cardquota.core.ledger import Ledger
from cardquota.core.preemption import (
    Admitted,
    CardAsk,
    NoPlan,
    PreemptionPlan,
    PreemptionPolicy,
    Preemptor,
    choose_victims,
)

H100 = "NVIDIA-H100"
A100 = "NVIDIA-A100"
NAMES = (H100, A100, f"{A100}|{H100}")


def scenario(units: int, seed: int = 42) -> tuple[CardRoom, list[Admitted]]:
    """A full queue ``research`` (parent ``org``) holding ``units`` PodGroups of 8 cards each."""
    shuffle = random.Random(seed)
    admitted: list[Admitted] = []
    held: dict[str, int] = {}
    minutes = list(range(units))
    shuffle.shuffle(minutes)
    for index in range(units):
        name = NAMES[index % len(NAMES)]
        minute = minutes[index]
        when = f"2026-12-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00Z"
        admitted.append(Admitted(("ml", f"sweep-{index}"), "PodGroup", "research", index % 10 * 100, when, when,
                                 {name: 8}, preemptable=index % 10 != 3, eviction_refused=index % 20 == 7))
        held[name] = held.get(name, 0) + 8
    both = held.get(NAMES[2], 0)  # (unnarrowed: counted against each type)
    quota = {H100: held.get(H100, 0) + both, A100: held.get(A100, 0) + both}
    queues = [
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "org", "annotations": {"volcano.sh/card.quota": _json(quota)}}, "spec": {"weight": 1}},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
         "metadata": {"name": "research", "annotations": {"volcano.sh/card.quota": _json(quota),
                                                          "cardquota.io/preemption": "LowerPriority"}},
         "spec": {"weight": 1, "parent": "org"}},
    ]
    return CardRoom(Ledger.build(queues).snapshot, {"research": held}), admitted


def _json(cards: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{name}": {amount}' for name, amount in sorted(cards.items())) + "}"


def preemptor(cards: int) -> Preemptor:
    return Preemptor("ml/llama-70b", "research", 500, "2026-12-31T00:00:00Z", tuple(CardAsk(H100, cards)
                                                                                  for _ in range(4)))


def measure(units: int, cards: int, repeats: int) -> tuple[list[float], PreemptionPlan | NoPlan]:
    room, admitted = scenario(units)
    waiting = preemptor(cards)
    result = choose_victims(waiting, admitted, room, PreemptionPolicy.LOWER_PRIORITY)
    return timed(lambda: choose_victims(waiting, admitted, room, PreemptionPolicy.LOWER_PRIORITY), repeats), result


def round_ledger(units: int, seed: int = 42) -> Ledger:
    """The queue of :func:`scenario` as a cluster: nodes, Queues, each admitted PodGroup as one bound pod, and the
    urgent gang (4 pods of 8 H100, priority 500) at the gate. The ``A|B`` PodGroups' pods are past the gate and not
bound yet (so counted against both types, as the room of :func:`scenario` counts them)."""
    room, admitted = scenario(units, seed)
    quota = room.snapshot.queues["research"].quota.values
    card = {H100: "nvidia.com/gpu", A100: "nvidia.com/gpu"}
    manifests: list[dict[str, object]] = []
    for index in range(100):
        product = (H100, A100)[index % 2]
        manifests.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{index}", "labels": {
            "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8"}},
            "status": {"capacity": {card[product]: "10000"}, "allocatable": {card[product]: "10000"}}})
    for queue_name, parent in (("org", None), ("research", "org")):
        annotations = {"volcano.sh/card.quota": _json(dict(quota))}
        if queue_name == "research":
            annotations["cardquota.io/preemption"] = "LowerPriority"
        manifests.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                          "metadata": {"name": queue_name, "annotations": annotations},
                          "spec": {"weight": 1, **({"parent": parent} if parent else {})}})
    for unit in admitted:
        name = unit.key[1]
        [card_name] = unit.cards
        node = None if "|" in card_name else f"n{0 if card_name == H100 else 1}"  # (A|B: past the gate, unbound)
        manifests.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                          "metadata": {"name": name, "namespace": "ml", "creationTimestamp": unit.created},
                          "spec": {"queue": "research", "minMember": 1}, "status": {"phase": "Running"}})
        annotations = {"volcano.sh/card.name": card_name, "scheduling.k8s.io/group-name": name}
        if not unit.preemptable:
            annotations["volcano.sh/preemptable"] = "false"
        manifests.append(_pod(name, annotations, unit.priority, node, unit.admitted))
    manifests.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                      "metadata": {"name": "llama-70b", "namespace": "ml",
                                   "creationTimestamp": "2026-12-31T00:00:00Z"},
                      "spec": {"queue": "research", "minMember": 4}, "status": {"phase": "Pending"}})
    for index in range(4):
        gang = _pod(f"llama-70b-{index}", {"volcano.sh/card.name": H100,
                                           "scheduling.k8s.io/group-name": "llama-70b"}, 500, None, None)
        gang["spec"]["schedulingGates"] = [{"name": "cardquota.io/card-quota"}]
        manifests.append(gang)
    return Ledger.build(manifests)


def _pod(name: str, annotations: dict[str, str], priority: int, node: str | None, bound: str | None
         ) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "volcano", "priority": priority, "containers": [
        {"name": "main", "image": "example/app:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    status: dict[str, Any] = {"phase": "Pending"}
    if node is not None:
        spec["nodeName"] = node
        status = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True",
                                                      "lastTransitionTime": bound}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ml", "uid": f"uid-{name}", "creationTimestamp": "2026-12-31T00:00:00Z",
        "annotations": annotations}, "spec": spec, "status": status}


def measure_round(units: int, repeats: int, kept: bool) -> tuple[list[float], str]:
    """Rounds with the ledger's memo of admitted units dropped before each (``kept`` False: the first round after a
    change in the queue), or kept (the rounds after, while nothing changed)."""
    ledger = round_ledger(units)
    decided = gate_round(ledger)
    outcome = (f"{len(decided.preemptions[0].victims)} victims" if decided.preemptions
               else decided.waits[0].reason if decided.waits else "lifted")

    def one_round() -> None:
        if not kept:
            ledger.memos.clear()
        gate_round(ledger)

    return timed(one_round, repeats), outcome


def _ms(times: list[float]) -> str:
    return (f"min {min(times) * 1e3:.2f} / median {statistics.median(times) * 1e3:.2f} / "
            f"max {max(times) * 1e3:.2f} ms")


def _outcome(result: PreemptionPlan | NoPlan) -> str:
    return f"{len(result.victims)} victims" if isinstance(result, PreemptionPlan) else result.why.value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(f"choosing preemption victims for a gang of 4 x 8 cards (priority 500), LowerPriority, "
          f"{args.small} vs {args.large} admitted PodGroups")
    for case, cards in (("evicts", 8), ("no set fits", 10 * args.large)):
        medians = []
        for units in (args.small, args.large):
            times, result = measure(units, cards, args.repeats)
            medians.append(statistics.median(times))
            print(f"  {case}, {units} admitted: {_ms(times)} ({_outcome(result)})")
        print(f"  {case}: ratio {medians[1] / medians[0]:.1f}x (targets: <= 10 ms at 1,000, ratio <= 12x)")
    for case, kept in (("round", False), ("round, nothing changed since", True)):
        medians = []
        for units in (args.small, args.large):
            times, outcome = measure_round(units, args.repeats, kept)
            medians.append(statistics.median(times))
            print(f"  {case}, {units} admitted: {_ms(times)} ({outcome})")
        print(f"  {case}: ratio {medians[1] / medians[0]:.1f}x (targets: <= 10 ms at 1,000, ratio <= 12x)")


if __name__ == "__main__":
    main()
