#!/usr/bin/env python3
"""The two AWS credential endpoints the SDKs' default chain asks over HTTP, for
the credential tests (standard library only):

* **Container credentials** (what ECS's agent and EKS Pod Identity serve at
  ``AWS_CONTAINER_CREDENTIALS_FULL_URI``): ``GET /container/credentials``
  answers the credentials only when the ``Authorization`` header is the
  ``--token`` value (401 otherwise).
* **The EC2 instance metadata service, IMDSv2**: ``PUT /latest/api/token``
  with ``X-aws-ec2-metadata-token-ttl-seconds`` hands out a session token
  (400 without the header, 405 to a GET); every ``GET /latest/meta-data/...``
  needs ``X-aws-ec2-metadata-token`` with a token handed out (401 without or
  with another). ``/latest/meta-data/iam/security-credentials/`` names the
  role (``--role``), ``.../ROLE`` answers its credentials.

The credentials are ``--access-key`` / ``--secret-key`` / ``--session-token``
(``Token`` left out when empty), expiring ``--lifetime`` seconds after each
answer. ``GET /stats`` answers how many times each was asked, as JSON:
``{"container": N, "imds-token": N, "imds-credentials": N, "refused": N}``.

Usage:
    python3 credentials_server.py --token TOKEN --access-key K --secret-key S
        [--session-token T] [--lifetime 3600] [--role transferd-test-role]

The port is printed on stdout (one line) once the server listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import datetime
import json
import secrets
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.tokens: set[str] = set()
        self.counts = {"container": 0, "imds-token": 0, "imds-credentials": 0, "refused": 0}

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1

    def credentials(self, endpoint: bool) -> bytes:
        expiration = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=self.args.lifetime)
        document = {
            "AccessKeyId": self.args.access_key,
            "SecretAccessKey": self.args.secret_key,
            "Expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if self.args.session_token:
            document["Token"] = self.args.session_token
        if endpoint:
            document.update({"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": expiration.strftime("%Y-%m-%dT%H:%M:%SZ")})
        return json.dumps(document).encode()


def make_handler(state: State) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet
            pass

        def answer(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def refuse(self, status: int, why: str) -> None:
            state.count("refused")
            self.answer(status, why.encode())

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path != "/latest/api/token":
                return self.refuse(404, "not found")
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return self.refuse(400, "X-aws-ec2-metadata-token-ttl-seconds is missing or not 1..21600")
            token = secrets.token_urlsafe(24)
            with state.lock:
                state.tokens.add(token)
            state.count("imds-token")
            self.answer(200, token.encode())

        def do_GET(self) -> None:
            if self.path == "/stats":
                with state.lock:
                    body = json.dumps(state.counts).encode()
                return self.answer(200, body, "application/json")
            if self.path == "/container/credentials":
                if self.headers.get("Authorization") != state.args.token:
                    return self.refuse(401, "the Authorization header is not the container token")
                state.count("container")
                return self.answer(200, state.credentials(endpoint=False), "application/json")
            if self.path == "/latest/api/token":
                return self.refuse(405, "the token is PUT")
            if self.path.startswith("/latest/meta-data/"):
                token = self.headers.get("X-aws-ec2-metadata-token")
                with state.lock:
                    known = token in state.tokens
                if not known:
                    return self.refuse(401, "IMDSv2: X-aws-ec2-metadata-token is missing or unknown")
                base = "/latest/meta-data/iam/security-credentials/"
                if self.path == base:
                    return self.answer(200, state.args.role.encode())
                if self.path == base + state.args.role:
                    state.count("imds-credentials")
                    return self.answer(200, state.credentials(endpoint=True), "text/plain")
            return self.refuse(404, "not found")

    return Handler


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The secrets come from the environment, not argv: /proc/PID/cmdline is readable by every user.
    parser.add_argument("--token", default=os.environ.get("CREDENTIALS_SERVER_TOKEN"),
                        help="the container endpoint's Authorization value (default: $CREDENTIALS_SERVER_TOKEN)")
    parser.add_argument("--access-key", default=os.environ.get("CREDENTIALS_SERVER_ACCESS_KEY"))
    parser.add_argument("--secret-key", default=os.environ.get("CREDENTIALS_SERVER_SECRET_KEY"))
    parser.add_argument("--session-token", default=os.environ.get("CREDENTIALS_SERVER_SESSION_TOKEN", ""))
    parser.add_argument("--lifetime", type=int, default=3600, help="seconds until the credentials handed out expire")
    parser.add_argument("--role", default="transferd-test-role")
    args = parser.parse_args(argv)
    if not (args.token and args.access_key and args.secret_key):
        parser.error("the token, access key and secret key are needed (CREDENTIALS_SERVER_* variables)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(State(args)))
    server.daemon_threads = True

    def stop(signum, frame):  # noqa: ARG001
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
