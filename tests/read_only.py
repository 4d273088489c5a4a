"""A folder the process under test can read but not write, as a Secret volume is (the kubelet mounts it read-only),
and a process serving admissions from it.

Tests run as root in some places (containers, CI runners), where permissions stop no write; so, in order, whichever
this machine allows, each checked by a probe in the same conditions before it is used:

1. not root: the folder made read-only (mode 0555);
2. root with ``unshare -m``: the process runs in a mount namespace of its own where the folder is bind-mounted onto
   itself read-only (``mount -o remount,bind,ro``; ``unshare`` makes the namespace's mounts private, so the host
   never sees it);
3. root with ``setpriv``: the process runs as ``nobody`` against the folder made 0555;
4. root with ``chattr +i``: the folder made immutable (ext4 and the like; not tmpfs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
SERVER = Path(__file__).resolve().parent / "tools" / "serve_cert_dir.py"
PROBE = ("import pathlib, sys\n"
         "import cardquota.processes\n"
         "folder = pathlib.Path(sys.argv[1])\n"
         "folder.joinpath('tls.crt').read_bytes()\n"
         "try:\n"
         "    folder.joinpath('probe').write_bytes(b'')\n"
         "except OSError:\n"
         "    print('read-only')\n")
REMOUNT = 'mount --bind "$1" "$1"; mount -o remount,bind,ro "$1"; shift; exec "$@"'


class ReadOnlyView(NamedTuple):
    how: str
    prefix: list[str]
    """Put before a command: it then sees the folder read-only."""
    undo: Callable[[], None]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def read_only_view(folder: Path) -> tuple[ReadOnlyView | None, list[str]]:
    """The first way this machine allows to show ``folder`` (holding ``tls.crt``) read-only to a command, or None
    and why each way failed."""
    failures: list[str] = []
    for candidate in _candidates(folder):
        result = subprocess.run([*candidate.prefix, sys.executable, "-c", PROBE, str(folder)], env=environment(),
                                capture_output=True, text=True, timeout=60)
        if result.returncode == 0 and result.stdout.strip() == "read-only":
            return candidate, failures
        candidate.undo()
        (folder / "probe").unlink(missing_ok=True)
        failures.append(f"{candidate.how}: {(result.stderr.strip().splitlines() or [result.stdout.strip()])[-1]}")
    return None, failures


def _candidates(folder: Path) -> Iterator[ReadOnlyView]:
    def restore_mode() -> None:
        folder.chmod(0o755)

    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield ReadOnlyView("mode 0555", [], restore_mode)
        return
    if shutil.which("unshare"):
        yield ReadOnlyView("unshare -m, a read-only bind mount", ["unshare", "-m", "sh", "-ec", REMOUNT, "sh",
                                                                  str(folder)], lambda: None)
    if shutil.which("setpriv"):
        folder.chmod(0o555)
        yield ReadOnlyView("setpriv as nobody, mode 0555",
                           ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], restore_mode)
    if shutil.which("chattr"):
        def mutable() -> None:
            subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)

        subprocess.run(["chattr", "+i", str(folder)], check=False, capture_output=True)
        yield ReadOnlyView("chattr +i", [], mutable)


@contextlib.contextmanager
def serving(prefix: list[str], folder: Path, timeout: float = 60.0) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """``serve_admissions`` with ``--cert-dir folder`` in a process started with ``prefix``: its port, once it
    listens (AssertionError with its output when it stops first)."""
    process = subprocess.Popen([*prefix, sys.executable, str(SERVER), str(folder)], env=environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the port, or nothing when the process ends
        if not line.strip().isdigit():
            process.kill()
            _, errors = process.communicate(timeout=timeout)
            raise AssertionError(f"the server did not start: {line}{errors}")
        yield int(line), process
    finally:
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=timeout)
