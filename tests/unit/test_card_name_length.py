"""A card type name, and each alternative of a ``card.name`` or ``card.request`` key, is at most as long as the
longest name discovery can produce (``MAX_CARD_NAME_LENGTH``): one limit, read by every parser, refused in one line
naming the field and the reason."""

from __future__ import annotations

import json

from builders import gpu_labels, gpu_node, node, pod, podgroup, queue
from hypothesis import given
from hypothesis import strategies as st
from verdicts import denied_at

from cardquota.core.cards import (
    DISCOVERY_SUFFIX_MAX_LENGTH,
    LABEL_VALUE_MAX_LENGTH,
    MAX_CARD_NAME_LENGTH,
    discover_card_types,
)
from cardquota.core.ledger import Ledger
from cardquota.core.objects import Node
from cardquota.core.policies import admit
from cardquota.core.policies.config import PolicyConfig
from cardquota.core.quota import card_name_problem, card_quota, card_request
from cardquota.core.violations import Reason

A100 = "NVIDIA-A100"
CARD_NAME = 'metadata.annotations["volcano.sh/card.name"]'
QUOTA = 'metadata.annotations["volcano.sh/card.quota"]'
REQUEST = 'metadata.annotations["volcano.sh/card.request"]'
PRODUCT = "P" * LABEL_VALUE_MAX_LENGTH
"""The longest product label value the API server stores (apimachinery ``content.LabelValueMaxLength``)."""
PROFILE = "7g." + "9" * 54 + "gb"
"""The longest MIG profile a resource name carries: ``mig-<profile>`` is a qualified name's 63-character name part."""


def test_the_limit_is_what_discovery_can_produce() -> None:
    """A node whose product label and MIG resource are as long as the API server allows yields a card type exactly
    at the limit, which every parser accepts."""
    assert len(f"mig-{PROFILE}") == 63
    manifest = node("mig-1", labels=gpu_labels(PRODUCT), allocatable={f"nvidia.com/mig-{PROFILE}": "7"})
    names = list(discover_card_types(Node.from_manifest(manifest)).types)
    assert [len(name) for name in names] == [MAX_CARD_NAME_LENGTH]
    assert MAX_CARD_NAME_LENGTH == LABEL_VALUE_MAX_LENGTH + DISCOVERY_SUFFIX_MAX_LENGTH == 133
    longest = names[0]
    assert card_name_problem(f"{A100}|{longest}") is None
    assert card_quota({"volcano.sh/card.quota": json.dumps({longest: 4})}).ok
    assert card_request({"volcano.sh/card.request": json.dumps({f"{A100}|{longest}": 1})}).ok


def test_a_pod_with_a_kilobyte_alternative_is_refused_in_one_line() -> None:
    """The attack the limit closes: ``NVIDIA-A100|`` plus 127 unknown alternatives of 1,100 characters each was
    admitted with a warning (unknown types only warn), and two such pods outgrew the Queue's annotations."""
    card_name = "|".join([A100, *(f"{index:03d}".ljust(1100, "x") for index in range(127))])
    snapshot = Ledger.build([gpu_node("a100-1", A100, 8), queue("default", {A100: 8})]).snapshot
    snapshot.complete = True
    verdict = admit(pod("p", card=card_name, gpus=1), None, snapshot, PolicyConfig())
    denied_at(verdict, (CARD_NAME, Reason.TOO_LONG))
    assert "\n" not in verdict.message
    assert verdict.violations[0].message.endswith(
        "(128 alternatives): alternative 2 is 1,100 characters; at most 133 (a node label value is at most 63 "
        "characters, plus the suffix discovery adds (/mig-<profile>-mixed), at most 70)")


def test_quota_keys_and_request_keys_are_limited_alike() -> None:
    long_name = "N" * (MAX_CARD_NAME_LENGTH + 1)
    quota = card_quota({"volcano.sh/card.quota": json.dumps({long_name: 1, A100: 2})})
    assert [(v.path, v.reason) for v in quota.violations] == [(QUOTA, Reason.TOO_LONG)]
    assert "card type name is 134 characters; at most 133" in quota.violations[0].message
    assert dict(quota.values) == {A100: 2}
    request = card_request({"volcano.sh/card.request": json.dumps({f"{A100}|{long_name}": 1})})
    assert [(v.path, v.reason) for v in request.violations] == [(REQUEST, Reason.TOO_LONG)]
    snapshot = Ledger.build([gpu_node("a100-1", A100, 8), queue("team-a", {A100: 8})]).snapshot
    snapshot.complete = True
    group = podgroup("pg", queue="team-a", request={f"{A100}|{long_name}": 1})
    denied_at(admit(group, None, snapshot, PolicyConfig()), (REQUEST, Reason.TOO_LONG))


@given(lengths=st.lists(st.integers(min_value=1, max_value=MAX_CARD_NAME_LENGTH + 40), min_size=1, max_size=6))
def test_a_name_is_refused_exactly_when_an_alternative_is_too_long(lengths: list[int]) -> None:
    parts = [f"{index}-".ljust(length, "A") for index, length in enumerate(lengths)]  # distinct, >= 2 long
    card_name = "|".join(parts)
    problem = card_name_problem(card_name)
    too_long = [len(part) for part in parts if len(part) > MAX_CARD_NAME_LENGTH]
    assert (problem is not None) == bool(too_long)
    if problem is not None:
        assert f"is {max(too_long):,} characters; at most {MAX_CARD_NAME_LENGTH}" in problem
