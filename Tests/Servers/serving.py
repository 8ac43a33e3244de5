"""What the test servers share: the port file and the serve-until-signalled loop.

Each server is run as a script (``python3 Tests/Servers/NAME.py``), so this
folder is on ``sys.path`` and ``import serving`` finds this module.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Optional


def write_port_file(path: str, port: int) -> None:
    """Write the port atomically so a poller never reads a partial number."""
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w") as file:
        file.write(f"{port}\n")
    os.replace(temporary, path)


def serve(server: Any, port_file: Optional[str], banner: Optional[str]) -> int:
    """Serve until SIGTERM or SIGINT: the port goes to ``port_file`` first,
    ``banner`` (if any) to stderr; the server is closed on the way out."""

    def stop(signum, frame):  # noqa: ARG001
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if port_file:
        write_port_file(port_file, server.server_address[1])
    if banner:
        print(banner, file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
