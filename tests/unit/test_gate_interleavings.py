"""The card-quota gate over random interleavings of what happens to pods (card pods and pods naming DRA claims) and
to the controller: creation (alone or as a gang), lifts written, answers lost or refused, binding, deletion,
controller restarts, and watch events delivered late. Two properties:

* **never over-admitted** — at every step, in the API server's state (the truth, not the controller's view), no
  queue or ancestor holds more cards in pods past the gate than its card quota, nor more DRA devices than its DRA
  capability;
* **eventually admitted** — once the watch has caught up and the rounds have settled, every pod still gated is one
  whose cards do not fit (a fresh controller, listing the API anew, would let none through).

The controller here is :func:`cardquota.core.gate.gate_round` with the in-flight bookkeeping of
``operator/gatekeeper.py`` (settle from the watch; a failed write read back from the API), over a ledger fed by a
watch that lags by any number of events.
"""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

from builders import gpu_node, pod, podgroup, queue
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cardquota.core import keys
from cardquota.core.gate import Lift, gate_round
from cardquota.core.ledger import Ledger

A100 = "NVIDIA-A100"
DEVICES = "gpu.example.com"
QUOTAS = {"org": (None, 4), "team-a": ("org", 3), "team-b": ("org", 3)}
"""Each queue's parent and its quota: as many A100 cards (``card.quota``) as DRA devices (``spec.dra``)."""
Manifest = dict[str, Any]


def bounded_queue(name: str, parent: str | None, amount: int) -> Manifest:
    made = queue(name, {A100: amount}, parent=parent)
    made["spec"]["dra"] = {"capability": {DEVICES: {"count": amount}}}
    return made


def device_template(name: str, count: int) -> Manifest:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [{"name": "d", "exactly": {"deviceClassName": DEVICES,
                                                                                 "count": count}}]}}}}


STATIC = [gpu_node("a100-1", A100, 16), device_template("one", 1), device_template("two", 2),
          *(bounded_queue(name, parent, amount) for name, (parent, amount) in QUOTAS.items())]


def through(manifest: Manifest) -> bool:
    return not manifest["spec"].get("schedulingGates")


def cards(manifest: Manifest) -> int:
    limits = manifest["spec"]["containers"][0]["resources"].get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


def devices(manifest: Manifest) -> int:
    return sum({"one": 1, "two": 2}[claim["resourceClaimTemplateName"]]
               for claim in manifest["spec"].get("resourceClaims") or [])


class GateInterleavings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.api: dict[str, Manifest] = {}
        """The API server's pods, by name (namespace ml)."""
        self.groups: dict[str, Manifest] = {}
        self.watch: deque[tuple[str, Manifest]] = deque()
        """Events not yet delivered to the controller's ledger, in order."""
        self.counter = 0
        self.restart()

    # ------------------------------------------------------------------------------------------ the API side

    def _emit(self, kind: str, manifest: Manifest) -> None:
        self.watch.append((kind, copy.deepcopy(manifest)))

    def _new_pod(self, queue_name: str, gpus: int, group: str | None = None, priority: int = 0,
                 dra: bool = False) -> None:
        """A card pod asking ``gpus`` cards, or (``dra``) a pod naming templates for as many DRA devices."""
        self.counter += 1
        name = f"p{self.counter}"
        manifest = pod(name, namespace="ml", card=None if dra else A100, gpus=None if dra else gpus,
                       queue=queue_name, gated=True, group=group, priority=priority,
                       created=f"2026-12-07T10:{self.counter // 60:02d}:{self.counter % 60:02d}Z",
                       uid=f"uid-{name}")
        if dra:
            manifest["spec"]["resourceClaims"] = [
                {"name": f"d{index}", "resourceClaimTemplateName": template}
                for index, template in enumerate(["two"] * (gpus // 2) + ["one"] * (gpus % 2))]
        self.api[name] = manifest
        self._emit("upsert", manifest)

    @rule(queue_name=st.sampled_from(["team-a", "team-b"]), gpus=st.integers(1, 3), priority=st.integers(0, 2),
          dra=st.booleans())
    def create_pod(self, queue_name: str, gpus: int, priority: int, dra: bool) -> None:
        self._new_pod(queue_name, gpus, priority=priority, dra=dra)

    @rule(queue_name=st.sampled_from(["team-a", "team-b"]), size=st.integers(2, 3), dra=st.booleans())
    def create_gang(self, queue_name: str, size: int, dra: bool) -> None:
        self.counter += 1
        name = f"g{self.counter}"
        group = podgroup(name, namespace="ml", queue=queue_name, min_member=size)
        self.groups[name] = group
        self._emit("upsert", group)
        for _ in range(size):
            self._new_pod(queue_name, 1, group=name, dra=dra)

    @precondition(lambda self: any(through(m) and not m["spec"].get("nodeName") for m in self.api.values()))
    @rule(data=st.data())
    def bind(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(n for n, m in self.api.items()
                                                if through(m) and not m["spec"].get("nodeName"))))
        self.api[name]["spec"]["nodeName"] = "a100-1"
        self.api[name]["status"]["phase"] = "Running"
        self._emit("upsert", self.api[name])

    @precondition(lambda self: bool(self.api))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.api)))
        self._emit("delete", self.api.pop(name))

    # ---------------------------------------------------------------------------------------- the controller

    @rule(count=st.integers(1, 8))
    def deliver(self, count: int) -> None:
        """The watch brings the next ``count`` events (it lags by whatever is left)."""
        for _ in range(min(count, len(self.watch))):
            kind, manifest = self.watch.popleft()
            if kind == "upsert":
                self.ledger.upsert(manifest)
            else:
                self.ledger.delete(manifest)

    @rule()
    def restart(self) -> None:
        """A new controller: a fresh list of the API server, then the watch from there; nothing in flight."""
        self.ledger = Ledger.build([*STATIC, *copy.deepcopy(list(self.groups.values())),
                                    *copy.deepcopy(list(self.api.values()))])
        self.watch.clear()
        self.in_flight: dict[tuple[str, str], Lift] = {}

    @rule(outcome=st.lists(st.sampled_from(["ok", "lost", "refused"]), max_size=12))
    def gate(self, outcome: list[str]) -> None:
        """One round of the keeper; each lift's write succeeds, applies with its answer lost, or is refused."""
        pods = self.ledger.snapshot.pods
        for key, lift in list(self.in_flight.items()):  # settled by the watch
            seen = pods.get(key)
            if seen is None or seen.gate is None or seen.uid != lift.uid:
                del self.in_flight[key]
        decided = gate_round(self.ledger, self.in_flight.values())
        for index, lift in enumerate(decided.lifts):
            self.in_flight[lift.pod] = lift
            result = outcome[index] if index < len(outcome) else "ok"
            current = self.api.get(lift.pod[1])
            applies = (result != "refused" and current is not None and current["metadata"]["uid"] == lift.uid
                       and [g["name"] for g in current["spec"].get("schedulingGates") or []] == list(lift.gates))
            if applies:
                assert current is not None
                current["spec"]["schedulingGates"] = [{"name": name} for name in lift.gates
                                                      if name != keys.CARD_GATE]
                self._emit("upsert", current)
            read_back = result != "ok" or not applies  # the API's state decides
            if read_back and (current is None or not through(current) or current["metadata"]["uid"] != lift.uid):
                del self.in_flight[lift.pod]

    # ---------------------------------------------------------------------------------------------- properties

    @invariant()
    def never_over_admitted(self) -> None:
        held: dict[str, int] = {}
        held_devices: dict[str, int] = {}
        for manifest in self.api.values():
            if through(manifest):
                for member in self.ledger.snapshot.ancestry(manifest["metadata"]["annotations"][keys.QUEUE_NAME]):
                    held[member] = held.get(member, 0) + cards(manifest)
                    held_devices[member] = held_devices.get(member, 0) + devices(manifest)
        for name, (_, quota) in QUOTAS.items():
            assert held.get(name, 0) <= quota, f"queue {name} holds {held.get(name)} of {quota} cards"
            assert held_devices.get(name, 0) <= quota, f"queue {name} holds {held_devices.get(name)} of {quota} devices"

    def teardown(self) -> None:
        """Eventually admitted: the watch caught up and the rounds settled, a fresh list lets nothing more through
        than the settled controller did."""
        self.deliver(len(self.watch) + 1)
        for _ in range(20):
            self.gate([])
            self.deliver(len(self.watch) + 1)
        self.never_over_admitted()
        fresh = Ledger.build([*STATIC, *self.groups.values(), *self.api.values()])
        assert gate_round(fresh).lifts == [], "a pod whose cards fit is still gated"


GateInterleavings.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_gate_interleavings = GateInterleavings.TestCase
