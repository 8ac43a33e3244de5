#!/usr/bin/env python3
"""A real tus 1.0 server for the tests: tuspyserver (PyPI; a FastAPI router)
served by uvicorn on 127.0.0.1.

The tus endpoint is ``/files`` (creation URL ``http://127.0.0.1:PORT/files``);
uploads are stored in ``--root``. tuspyserver offers the core protocol and the
creation, creation-with-upload, creation-defer-length, expiration, termination
and concatenation extensions; it has no checksum extension (the fault server's
``/_tus/`` endpoint covers that). ``GET /_ready`` answers 204 once serving.

Usage:
    python3 tus_server.py --root DIR [--port 0] [--port-file FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import socket
import sys

import serving  # Tests/Servers/serving.py: port file

import uvicorn
from fastapi import FastAPI, Response
from tuspyserver import create_tus_router


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder the uploads are stored in")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--verbose", action="store_true")
    arguments = parser.parse_args()

    app = FastAPI()
    app.include_router(create_tus_router(prefix="files", files_dir=arguments.root, days_to_keep=1))

    @app.get("/_ready")
    def ready() -> Response:
        return Response(status_code=204)

    # The socket is bound here, so the port is known (and written) before serving.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", arguments.port))
    if arguments.port_file:
        serving.write_port_file(arguments.port_file, sock.getsockname()[1])
    config = uvicorn.Config(app, log_level="info" if arguments.verbose else "warning", access_log=arguments.verbose)
    server = uvicorn.Server(config)
    print(f"tus server (tuspyserver) on http://127.0.0.1:{sock.getsockname()[1]}/files", file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
