"""Time to a served certificate, and what a handshake costs with the reloadable context.

    python bench/tls_start.py [--runs 5] [--handshakes 300]

1. **Start to a served certificate**: from starting the admission server in a new process with ``--cert-dir``
   (``tests/tools/serve_cert_dir.py``: ``serve_admissions`` as ``cardquota operator`` runs it, without a cluster)
   to the first handshake that gets the mounted certificate (a connection tried every 10 ms), with the folder
   writable (the baseline) and read-only as a Secret volume is (``tests/read_only.py``: ``unshare -m`` and a
   read-only bind mount when run as root). A start that fails prints how long it took to fail and why.
2. **Handshake cost**: sequential TLS 1.3 handshakes on 127.0.0.1 against the server's context (the listening
   context hands each handshake the current pair's context from its ``sni_callback``) vs a plain context holding
   the same pair (the baseline); client included in both.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from read_only import environment, read_only_view

from cardquota.runtime.tls import KeyPair, ReloadableContext, new_ca, new_serving_cert

SERVER = Path(__file__).resolve().parents[1] / "tests" / "tools" / "serve_cert_dir.py"


def sha256(cert: bytes, pem: bool) -> bytes:
    loaded = x509.load_pem_x509_certificate(cert) if pem else x509.load_der_x509_certificate(cert)
    return loaded.fingerprint(hashes.SHA256())


def served_fingerprint(port: int, client: ssl.SSLContext) -> bytes | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                client.wrap_socket(raw, server_hostname="localhost") as wrapped:
            der = wrapped.getpeercert(binary_form=True)
            return sha256(der, pem=False) if der else None
    except OSError:
        return None


def start_to_served(prefix: list[str], folder: Path, ca: KeyPair, expected: bytes) -> tuple[float, str]:
    """Seconds from starting the server process to a handshake getting ``expected``; and "" or why it failed."""
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    started = time.perf_counter()
    process = subprocess.Popen([*prefix, sys.executable, str(SERVER), str(folder)], env=environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            process.wait(timeout=60)
            elapsed = time.perf_counter() - started
            assert process.stderr is not None
            return elapsed, (process.stderr.read().strip().splitlines() or ["exited"])[-1]
        port = int(line)
        while served_fingerprint(port, client) != expected:
            time.sleep(0.01)
        return time.perf_counter() - started, ""
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=60)


def start_figures(runs: int) -> None:
    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    expected = sha256(pair.cert_pem, pem=True)
    with tempfile.TemporaryDirectory(prefix="cardquota-bench-tls-") as name:
        folder = Path(name)
        folder.chmod(0o755)
        for file, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
            (folder / file).write_bytes(data)
            (folder / file).chmod(0o644)
        writable = [start_to_served([], folder, ca, expected) for _ in range(runs)]
        for path in folder.iterdir():
            if path.name not in ("tls.crt", "tls.key"):  # what a start before wrote there
                subprocess.run(["rm", "-rf", str(path)], check=True)
        view, failures = read_only_view(folder)
        if view is None:
            print(f"read-only folder: not possible here ({'; '.join(failures)})")
            read_only: list[tuple[float, str]] = []
        else:
            try:
                read_only = [start_to_served(view.prefix, folder, ca, expected) for _ in range(runs)]
            finally:
                view.undo()
    print(f"start to a served certificate, {runs} runs (a new Python process each, imports included):")
    report("  --cert-dir writable (baseline)", writable)
    if view is not None:
        report(f"  --cert-dir read-only ({view.how})", read_only)
        if not any(error for _, error in writable + read_only):
            ratio = statistics.median(t for t, _ in read_only) / statistics.median(t for t, _ in writable)
            print(f"  read-only / writable, medians: {ratio:.2f}x")


def report(label: str, results: list[tuple[float, str]]) -> None:
    times = [seconds for seconds, _ in results]
    errors = sorted({error for _, error in results if error})
    outcome = f"FAILED to serve after {min(times):.2f}-{max(times):.2f} s: {errors[0]}" if errors else \
        f"{min(times):.2f}-{max(times):.2f} s (median {statistics.median(times):.2f} s)"
    print(f"{label}: {outcome}")


async def handshakes(context: ssl.SSLContext, client: ssl.SSLContext, count: int) -> float:
    """Seconds per handshake, ``count`` in a row, each on a new connection."""
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    started = time.perf_counter()
    for _ in range(count):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        writer.close()
    elapsed = time.perf_counter() - started
    server.close()
    await server.wait_closed()
    return elapsed / count


async def handshake_figures(count: int, rounds: int) -> None:
    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    with tempfile.TemporaryDirectory() as name:
        reloadable = ReloadableContext(Path(name) / "scratch")
        reloadable.install(pair)
        plain = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        plain.minimum_version = ssl.TLSVersion.TLSv1_2
        (Path(name) / "tls.crt").write_bytes(pair.cert_pem)
        (Path(name) / "tls.key").write_bytes(pair.key_pem)
        plain.load_cert_chain(Path(name) / "tls.crt", Path(name) / "tls.key")
        subject, baseline = [], []
        for _ in range(rounds):  # alternated, so both see the same machine load
            baseline.append(await handshakes(plain, client, count))
            subject.append(await handshakes(reloadable.context, client, count))
        started = time.perf_counter()
        for _ in range(20):
            reloadable.install(pair)
        install = (time.perf_counter() - started) / 20
    print(f"handshakes, {rounds} rounds of {count}: plain context (baseline) "
          f"{min(baseline) * 1e6:.0f}-{max(baseline) * 1e6:.0f} µs, reloadable context "
          f"{min(subject) * 1e6:.0f}-{max(subject) * 1e6:.0f} µs; ratio of medians "
          f"{statistics.median(subject) / statistics.median(baseline):.2f}x")
    print(f"loading a pair into a fresh context: {install * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    start_figures(args.runs)
    asyncio.run(handshake_figures(args.handshakes, args.rounds))


if __name__ == "__main__":
    main()
