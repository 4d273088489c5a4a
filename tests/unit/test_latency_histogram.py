"""The admission latency histogram (observed without a lock on the server's event loop) exposes exactly what
prometheus_client's own Histogram would for the same observations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from cardquota.runtime.latency import Latencies
from cardquota.runtime.metrics import WEBHOOK_SECONDS, LatencyHistogram

BUCKETS = WEBHOOK_SECONDS.bounds
observations = st.lists(st.tuples(st.sampled_from(["Pod", "Queue", "Job"]), st.sampled_from(["allowed", "denied"]),
                                  st.one_of(st.sampled_from(BUCKETS), st.floats(0, 2, allow_nan=False))),
                        max_size=40)


def exposed(registry: CollectorRegistry) -> list[str]:
    """The text exposition's lines but the ``_created`` timestamps (prometheus_client's own Histogram adds them)."""
    return sorted(line for line in generate_latest(registry).decode().splitlines() if "_created" not in line)


@given(observations)
def test_the_exposition_is_prometheus_clients(seen: list[tuple[str, str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    latencies = Latencies(BUCKETS)
    ours.register(LatencyHistogram("latency_seconds", "latency", latencies))
    reference = Histogram("latency_seconds", "latency", ["kind", "verdict"], registry=theirs, buckets=BUCKETS)
    for kind, verdict, seconds in seen:
        latencies.observe(kind, verdict, seconds)
        reference.labels(kind=kind, verdict=verdict).observe(seconds)
    assert exposed(ours) == exposed(theirs)


def test_an_observation_on_a_bound_counts_in_that_bucket() -> None:
    registry = CollectorRegistry()
    latencies = Latencies((0.001, 0.01))
    registry.register(LatencyHistogram("latency_seconds", "latency", latencies))
    latencies.observe("Pod", "allowed", 0.001)
    latencies.observe("Pod", "allowed", 0.5)
    lines = exposed(registry)
    assert 'latency_seconds_bucket{kind="Pod",le="0.001",verdict="allowed"} 1.0' in lines
    assert 'latency_seconds_bucket{kind="Pod",le="0.01",verdict="allowed"} 1.0' in lines
    assert 'latency_seconds_bucket{kind="Pod",le="+Inf",verdict="allowed"} 2.0' in lines
    assert 'latency_seconds_count{kind="Pod",verdict="allowed"} 2.0' in lines
    assert 'latency_seconds_sum{kind="Pod",verdict="allowed"} 0.501' in lines
