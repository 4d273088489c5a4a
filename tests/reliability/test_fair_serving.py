"""Issue 41's targets, held on the real admission server (in a process of its own): while one loopback client runs
each attack of tests/fair_attacks.py at full speed from its own address, every review from the address marked as the
API server's (``--trusted-cidrs``) is answered 200 — none refused, none timed out at the API server's 5 s — the
server's peak resident size stays under 512 MiB, and within 30 s of the attack's end it is back within 64 MiB of
where it was idle. How long those reviews took is measured by bench/fair_serving.py (no timing is asserted here).

Before (on the former server, same attacks): slow bodies on 2,053 connections got the next legitimate reviews a reset;
16 slow large bodies got a 98 KiB Pod UPDATE 503; 150 unread 1 MiB answers took the server to 1,157 MiB."""

from __future__ import annotations

import asyncio
import time

import pytest
from fair_attacks import API_SERVER, ATTACKS, attacking, send_reviews
from served_process import raise_open_files, served

from cardquota.runtime.limits import ServerLimits

ATTACK_SECONDS = 4.5
PEAK_MIB = 512
RETURN_MIB = 64
RETURN_SECONDS = 30.0


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_api_servers_reviews_are_answered_and_memory_stays_bounded_under_attack(attack: str) -> None:
    raise_open_files(4096)
    with served(ServerLimits(trusted_networks=(f"{API_SERVER}/32",))) as process:
        idle, _ = process.memory()
        with attacking(attack, process.port, process.ca_pem, ATTACK_SECONDS):
            time.sleep(1.5)  # the attack under way
            reviews = asyncio.run(send_reviews(process.port, process.ca_pem, ATTACK_SECONDS - 2.0))
        _, peak = process.memory()
        after = peak
        deadline = time.monotonic() + RETURN_SECONDS
        while time.monotonic() < deadline:
            after, _ = process.memory()
            if after <= idle + RETURN_MIB:
                break
            time.sleep(0.5)
    refused = [status for status in reviews.statuses if status != 200]
    assert reviews.statuses, "no review was sent"
    assert not refused, f"{len(refused)} of {len(reviews.statuses)} reviews refused or unanswered: {refused[:10]}"
    assert peak < PEAK_MIB, f"peak resident {peak:.0f} MiB under {attack}"
    assert after <= idle + RETURN_MIB, f"{after:.0f} MiB resident {RETURN_SECONDS:g} s after {attack} (idle {idle:.0f})"
