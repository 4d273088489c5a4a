"""What the controller publishes on a Queue always fits beside the Queue's other annotations (the API server refuses
more than 256 KiB of annotations in all: apimachinery ``pkg/api/validation/objectmeta.go``,
``TotalAnnotationSizeLimitB`` and ``ValidateAnnotationsSize``, which sums ``len(key) + len(value)`` in bytes)."""

from __future__ import annotations

import argparse
import json

from builders import gpu_node, pod, queue
from hypothesis import given, settings
from hypothesis import strategies as st

from cardquota.cli import doctor as doctor_cli
from cardquota.core import doctor, keys
from cardquota.core.ledger import Ledger, QueueUsage, published_amounts
from cardquota.core.publish import (
    ANNOTATIONS_LIMIT,
    OTHER_LABEL,
    QUEUE_ANNOTATIONS,
    annotations_size,
    annotations_too_long,
    bounded_queue_annotations,
    grouped_count,
    metric_series,
    queue_annotations,
    queue_budget,
)
from cardquota.operator.metrics import QueueCardCollector
from cardquota.runtime.cache import ClusterCache

A100, H100 = "NVIDIA-A100", "NVIDIA-H100"
JSON_ANNOTATIONS = (keys.CARD_ALLOCATED, keys.CARD_INQUEUE, keys.CARD_PENDING)


def written(annotations: dict[str, str | None]) -> dict[str, str]:
    """The annotations as the Queue carries them once written (None: removed)."""
    return {key: value for key, value in annotations.items() if value is not None}


def attack_usage() -> QueueUsage:
    """The ledger of two pods each naming ``NVIDIA-A100|`` plus 127 unknown alternatives of ~1.1 KB (as admitted
    before card names were limited, or created while the webhooks were not in the way)."""
    manifests = [gpu_node("a100-1", A100, 8), queue("default", {A100: 8})]
    for number in range(2):
        card_name = "|".join([A100, *(f"{number}-{index:03d}".ljust(1100, "x") for index in range(127))])
        manifests.append(pod(f"p{number}", card=card_name, gpus=1))
    manifests.append(pod("fits", card=A100, gpus=1))
    return Ledger.build(manifests).usage("default")


def test_the_attack_outgrew_the_limit_and_now_fits_with_the_known_figures_exact() -> None:
    usage = attack_usage()
    assert annotations_size(queue_annotations(usage)) > ANNOTATIONS_LIMIT  # 278 KiB: the API server refused it
    other = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 2000}
    budget = queue_budget({**other, **written(queue_annotations(usage))})
    assert budget == ANNOTATIONS_LIMIT - annotations_size(other)
    published = bounded_queue_annotations(usage, budget, known={A100})
    assert annotations_size(published.annotations) <= budget
    assert not published.exact
    assert published.grouped == 2
    assert json.loads(published.annotations[keys.CARD_PENDING] or "") == {A100: 1, "(2 more)": 2}
    assert published_amounts(written(published.annotations), keys.CARD_PENDING) == {"(2 more)": 2, A100: 1}
    assert published.annotations[keys.CARD_USAGE] == f"{A100} 0/8"


def test_a_queue_within_the_limit_is_published_exactly() -> None:
    usage = Ledger.build([gpu_node("a100-1", A100, 8), queue("default", {A100: 8}),
                          pod("p", card=A100, gpus=1)]).usage("default")
    published = bounded_queue_annotations(usage, ANNOTATIONS_LIMIT, known=())
    assert published.exact
    assert published.annotations == queue_annotations(usage)


def test_with_no_room_at_all_the_annotations_are_removed() -> None:
    published = bounded_queue_annotations(attack_usage(), 100, known={A100})
    assert published.removed
    assert published.annotations == dict.fromkeys(QUEUE_ANNOTATIONS)
    assert annotations_size(published.annotations) == 0


def test_known_names_are_summarised_largest_first_once_unknown_ones_are_grouped() -> None:
    long_known = "K" * 120
    usage = QueueUsage(quota={A100: 4, long_known: 4}, allocated={A100: 1, long_known: 2}, inqueue={},
                       pending={"U" * 100: 3, A100: 1})
    exact = annotations_size(queue_annotations(usage))
    published = bounded_queue_annotations(usage, exact - 150, known={A100})
    assert json.loads(published.annotations[keys.CARD_PENDING] or "") == {A100: 1, "(1 more)": 3}
    assert json.loads(published.annotations[keys.CARD_ALLOCATED] or "") == {A100: 1, "(1 more)": 2}
    assert published.annotations[keys.CARD_USAGE] == f"{long_known} 2/4, {A100} 1/4"  # card.usage had room
    assert annotations_size(published.annotations) <= exact - 150


NAMES = st.text(alphabet="ABCxyz-/|", min_size=1, max_size=200).filter(lambda n: grouped_count(n) is None)
AMOUNTS = st.dictionaries(NAMES, st.integers(min_value=0, max_value=2**40), max_size=30)


@settings(max_examples=300, deadline=None)
@given(quota=AMOUNTS, allocated=AMOUNTS, inqueue=AMOUNTS, pending=AMOUNTS,
       known=st.frozensets(NAMES, max_size=10), budget=st.integers(min_value=0, max_value=20_000))
def test_what_is_published_never_exceeds_the_budget_and_is_exact_when_it_fits(
        quota: dict[str, int], allocated: dict[str, int], inqueue: dict[str, int], pending: dict[str, int],
        known: frozenset[str], budget: int) -> None:
    usage = QueueUsage(quota=quota, allocated=allocated, inqueue=inqueue, pending=pending)
    exact = queue_annotations(usage)
    published = bounded_queue_annotations(usage, budget, known)
    assert annotations_size(published.annotations) <= budget
    if annotations_size(exact) <= budget:
        assert published.exact
        assert published.annotations == exact
        return
    assert not published.exact
    if published.removed:
        return
    again = bounded_queue_annotations(usage, budget, known)
    assert again == published  # deterministic
    for name, amounts in zip(JSON_ANNOTATIONS, (allocated, inqueue, pending), strict=True):
        figures = json.loads(published.annotations[name] or "")
        assert published_amounts(written(published.annotations), name) == dict(sorted(figures.items()))
        assert sum(figures.values()) == sum(amounts.values())  # grouped cards are added up, never lost
        for key, amount in figures.items():
            assert grouped_count(key) is not None or amounts[key] == amount  # every name kept is exact


def collected(cache: ClusterCache) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The queue card metrics as a scrape would show them: family → (labels, value) of each sample."""
    return {family.name: [(sample.labels, sample.value) for sample in family.samples]
            for family in QueueCardCollector(cache, None).collect() if family.name.endswith(("card_pending",
                                                                                              "card_request",
                                                                                              "card_deserved"))}


def test_metrics_fold_unknown_card_names_into_one_label_value() -> None:
    """Before, each distinct card.name a pod wrote became its own series (a label value of 140 KB here)."""
    cache = ClusterCache()
    cache.load([gpu_node("a100-1", A100, 8), queue("default", {A100: 8}), pod("fits", card=A100, gpus=1),
                *(pod(f"p{n}", card="|".join([A100, *(f"{n}-{i}".ljust(1100, "x") for i in range(127))]), gpus=1)
                  for n in range(3)), pod("typo", card="NVIDIA-A10O", gpus=1)])
    metrics = collected(cache)
    assert metrics["cardquota_queue_card_pending"] == [
        ({"queue_name": "default", "card_name": A100}, 1.0),
        ({"queue_name": "default", "card_name": OTHER_LABEL}, 4.0)]
    assert metrics["volcano_queue_card_deserved"] == [({"queue_name": "default", "card_name": A100}, 8.0)]


@given(rows=st.lists(st.tuples(st.sampled_from("abcdef"), NAMES, st.integers(0, 100)), max_size=60),
       known=st.frozensets(NAMES, max_size=10), cap=st.integers(min_value=1, max_value=12))
def test_metric_series_are_capped_and_add_up_to_the_same_total(
        rows: list[tuple[str, str, int]], known: frozenset[str], cap: int) -> None:
    series = metric_series(rows, lambda _queue, card: card in known, cap)
    assert len(series) <= cap
    assert sum(series.values()) == sum(value for _, _, value in rows)
    assert all(card in known or card == OTHER_LABEL for _, card in series)
    if len({(queue, card if card in known else OTHER_LABEL) for queue, card, _ in rows}) <= cap:
        for queue, card, _ in rows:  # nothing capped when every series fits
            assert (queue, card if card in known else OTHER_LABEL) in series


def test_doctor_reads_summarised_usage_as_current() -> None:
    """``kubectl cardquota doctor`` compares a Queue's usage with what the controller would publish: the summarised
    form when the figures do not fit (before, it compared with the exact figures and called it stale)."""
    nodes = [gpu_node("a100-1", A100, 8)]
    team = queue("default", {A100: 8})
    team["metadata"].setdefault("annotations", {})["example.com/notes"] = "x" * (200 * 1024)
    pods = [pod(f"p{n}", card="|".join([A100, *(f"{n}-{i}".ljust(1100, "x") for i in range(50))]), gpus=1)
            for n in range(2)]
    ledger = Ledger.build([*nodes, team, *pods])
    publication = bounded_queue_annotations(ledger.usage("default"), queue_budget(team["metadata"]["annotations"]),
                                            ledger.snapshot.catalog().entries)
    assert not publication.exact
    team["metadata"]["annotations"].update(written(publication.annotations))
    target = doctor_cli.target_of(argparse.Namespace(namespace=None, service="cardquota",
                                                     tls_secret="cardquota-webhook-tls", deployment="cardquota"))
    [result] = doctor.check_queues(nodes, [team], [], pods, target)
    assert (result.status.value, result.message) == (
        "ok", "1 queue with a card quota: usage published and current (default)")


def test_only_a_refusal_of_annotations_as_too_long_is_read_as_one() -> None:
    """The API server's message for it (apimachinery ``errors.NewInvalid`` around ``field.TooLong``), as the kube
    module raises it; other 422s are not."""
    refused = ('PATCH /apis/scheduling.volcano.sh/v1beta1/queues/q: HTTP 422: Queue.scheduling.volcano.sh "q" is '
               "invalid: metadata.annotations: Too long: may not be more than 262144 bytes")
    assert annotations_too_long(refused)
    assert not annotations_too_long('HTTP 422: Queue.scheduling.volcano.sh "q" is invalid: '
                                    'metadata.annotations: Invalid value: "a b": name part must consist of …')
    assert not annotations_too_long("HTTP 422: the JSON patch's test failed")


@settings(max_examples=300, deadline=None)
@given(quota=AMOUNTS, allocated=AMOUNTS, pending=AMOUNTS, known=st.frozensets(NAMES, max_size=10),
       shortfall=st.integers(min_value=0, max_value=400))
def test_just_over_the_budget_the_least_is_grouped(quota: dict[str, int], allocated: dict[str, int],
                                                  pending: dict[str, int], known: frozenset[str],
                                                  shortfall: int) -> None:
    """A few bytes short: still within the budget, never removed when a summary fits, and an exact result only
    when nothing was short."""
    usage = QueueUsage(quota=quota, allocated=allocated, inqueue={}, pending=pending)
    size = annotations_size(queue_annotations(usage))
    budget = max(0, size - shortfall)
    published = bounded_queue_annotations(usage, budget, known)
    assert annotations_size(published.annotations) <= budget
    assert published.exact == (budget == size)
    smallest = bounded_queue_annotations(usage, 0, known)
    assert smallest.removed
    if budget >= 300:  # the four annotations at their smallest are ~200 bytes
        assert not published.removed
