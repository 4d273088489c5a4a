"""Serve admissions with ``--cert-dir FOLDER`` as ``cardquota operator`` does, without a cluster (the mounted-files
path makes no API call), print the port on stdout once listening, log to stderr, and serve until stopped.

    python tests/tools/serve_cert_dir.py FOLDER
"""

from __future__ import annotations

import asyncio
import sys

from cardquota.kube import Connection, api_client
from cardquota.operator.settings import LogFormat, Settings
from cardquota.processes import configure_logging, serve_admissions
from cardquota.runtime.cache import ClusterCache


async def main(folder: str) -> None:
    configure_logging(LogFormat.TEXT)
    settings = Settings(host="127.0.0.1", port=0, metrics_port=0, dev=False, cert_dir=folder)
    tasks: list[asyncio.Task[None]] = []
    api = api_client(Connection(host="https://127.0.0.1:9"))  # never called: the certificate is mounted
    runner = await serve_admissions(settings, ClusterCache(), api, tasks)
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
