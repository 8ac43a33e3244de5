#!/usr/bin/env python3
"""A scriptable HTTP/1.1 file server that misbehaves on request.

The transferd tests use it for the faults that real servers (nginx) will not
produce on demand: connections dropped mid-body, short bodies, transient error
statuses, validators that change mid-download, ignored Range headers, stalls,
slow bodies and redirect chains.

Without fault parameters it is a well-behaved static file server for the
directory given with --root (GET and HEAD, single byte ranges, If-Range,
strong ETag, Last-Modified, keep-alive).  Faults are selected per request with
query parameters; the state a fault needs (how many failures were served, how
many bytes were sent, ...) is kept per ``key`` query parameter, which defaults
to the request path, so independent tests do not disturb each other.

See Tests/Servers/README.md for the list of parameters and control endpoints.

Usage:
    python3 fault_server.py --root DIR [--port 0] [--port-file FILE] [--verbose]

Only the Python 3.11 standard library is used.
"""

from __future__ import annotations

import argparse
import email.utils
import http
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import serving  # Tests/Servers/serving.py: port file and serve loop

# Body bytes handed to the kernel per sendfile call: large enough for speed,
# small enough that faults (drop, stall, rate) act at a fine granularity.
CHUNK_SIZE = 256 * 1024

# Pieces of at most this many steps per second when trickling with `rate`.
RATE_STEPS_PER_SECOND = 20

SERVER_NAME = "transferd-fault-server"


class BadRequest(Exception):
    """A query parameter could not be understood; answered with 400."""


# ---------------------------------------------------------------------------
# Fault parameters
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultPlan:
    """The faults requested by one request's query parameters."""

    key: str
    drop_every: Optional[int] = None
    fail_status: Optional[int] = None
    fail_count: int = 1
    retry_after: Optional[str] = None
    retry_after_date: Optional[int] = None
    change_after: Optional[int] = None
    alt: Optional[str] = None
    ignore_range: bool = False
    short_by: Optional[int] = None
    short_count: int = 1
    rate: Optional[int] = None
    stall_after: Optional[int] = None
    stall_seconds: float = 0.0
    stall_count: int = 1
    redirect: Optional[int] = None
    status: Optional[int] = None
    message: Optional[str] = None

    @classmethod
    def from_query(cls, path: str, query: dict[str, str]) -> "FaultPlan":
        def integer(name: str, minimum: int = 0) -> Optional[int]:
            if name not in query:
                return None
            try:
                value = int(query[name])
            except ValueError:
                raise BadRequest(f"{name} must be an integer") from None
            if value < minimum:
                raise BadRequest(f"{name} must be >= {minimum}")
            return value

        def number(name: str) -> Optional[float]:
            if name not in query:
                return None
            try:
                value = float(query[name])
            except ValueError:
                raise BadRequest(f"{name} must be a number") from None
            if value < 0:
                raise BadRequest(f"{name} must be >= 0")
            return value

        def status_code(name: str) -> Optional[int]:
            value = integer(name, minimum=100)
            if value is not None and value > 999:
                raise BadRequest(f"{name} must be an HTTP status code")
            return value

        change_after = integer("change_after")
        alt = query.get("alt")
        if (change_after is None) != (alt is None):
            raise BadRequest("change_after and alt must be given together")
        rate = integer("rate", minimum=1)

        return cls(
            key=query.get("key", path),
            drop_every=integer("drop_every"),
            fail_status=status_code("fail"),
            fail_count=integer("fail_count") if "fail_count" in query else 1,
            retry_after=query.get("retry_after"),
            retry_after_date=integer("retry_after_date"),
            change_after=change_after,
            alt=alt,
            ignore_range=query.get("ignore_range", "0") not in ("", "0", "false"),
            short_by=integer("short_by"),
            short_count=integer("short_count") if "short_count" in query else 1,
            rate=rate,
            stall_after=integer("stall_after"),
            stall_seconds=number("stall_seconds") or 0.0,
            stall_count=integer("stall_count") if "stall_count" in query else 1,
            redirect=integer("redirect"),
            status=status_code("status"),
            message=query.get("message"),
        )


# ---------------------------------------------------------------------------
# Per-key state
# ---------------------------------------------------------------------------


@dataclass
class KeyState:
    """What the server has done so far for one fault key."""

    requests: int = 0
    bytes_sent: int = 0
    ranges: list[Optional[str]] = field(default_factory=list)
    failures_served: int = 0
    short_responses_served: int = 0
    stalls_served: int = 0

    def stats(self) -> dict:
        return {
            "requests": self.requests,
            "bytes_sent": self.bytes_sent,
            "ranges": list(self.ranges),
        }


class StateRegistry:
    """Thread-safe map from fault key to KeyState.

    Every read-modify-write of a KeyState happens under the registry lock, so
    concurrent connections for the same key (segmented downloads) count
    correctly and each "first K" fault is handed out exactly K times.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, KeyState] = {}

    def _state(self, key: str) -> KeyState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = KeyState()
        return state

    def record_request(self, key: str, range_header: Optional[str]) -> None:
        with self._lock:
            state = self._state(key)
            state.requests += 1
            state.ranges.append(range_header)

    def add_bytes(self, key: str, count: int) -> None:
        with self._lock:
            self._state(key).bytes_sent += count

    def bytes_sent(self, key: str) -> int:
        with self._lock:
            return self._state(key).bytes_sent

    def claim_failure(self, key: str, limit: int) -> bool:
        """True if this request is one of the first `limit` failures."""
        with self._lock:
            state = self._state(key)
            if state.failures_served >= limit:
                return False
            state.failures_served += 1
            return True

    def claim_short_response(self, key: str, limit: int) -> bool:
        with self._lock:
            state = self._state(key)
            if state.short_responses_served >= limit:
                return False
            state.short_responses_served += 1
            return True

    def claim_stall(self, key: str, limit: int) -> bool:
        with self._lock:
            state = self._state(key)
            if state.stalls_served >= limit:
                return False
            state.stalls_served += 1
            return True

    def stats(self, key: Optional[str]) -> dict:
        with self._lock:
            if key is not None:
                return self._states.get(key, KeyState()).stats()
            return {"keys": {k: s.stats() for k, s in self._states.items()}}

    def reset(self, key: Optional[str]) -> None:
        with self._lock:
            if key is None:
                self._states.clear()
            else:
                self._states.pop(key, None)


# ---------------------------------------------------------------------------
# Files and validators
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedFile:
    """A regular file under the root, with the validators it is served with."""

    path: str
    size: int
    etag: str  # quoted strong entity tag
    last_modified: int  # whole seconds since the epoch

    @classmethod
    def from_path(cls, path: str, not_before: Optional[int] = None) -> "ServedFile":
        """Describe `path`; `not_before` forces Last-Modified to be later."""
        info = os.stat(path)
        etag = f'"{info.st_size:x}-{info.st_mtime_ns:x}-{info.st_ino:x}"'
        last_modified = int(info.st_mtime)
        if not_before is not None and last_modified < not_before:
            last_modified = not_before
        return cls(path, info.st_size, etag, last_modified)

    @property
    def last_modified_header(self) -> str:
        return email.utils.formatdate(self.last_modified, usegmt=True)

    def matches_if_range(self, if_range: str) -> bool:
        """Strong comparison of an If-Range value with this file's validator."""
        if_range = if_range.strip()
        if if_range.startswith('"') or if_range.startswith("W/"):
            return if_range == self.etag  # weak tags never match
        try:
            date = email.utils.parsedate_to_datetime(if_range)
        except (TypeError, ValueError):
            return False
        return int(date.timestamp()) == self.last_modified


def resolve_under(root: str, relative: str) -> Optional[str]:
    """The real path of `relative` inside `root`, or None if it escapes."""
    candidate = os.path.realpath(os.path.join(root, relative.lstrip("/")))
    if os.path.commonpath([root, candidate]) != root:
        return None
    return candidate


def parse_single_range(header: str, size: int) -> Optional[tuple[int, int]] | str:
    """Parse a Range header against a representation of `size` bytes.

    Returns (first, last) inclusive for a satisfiable single range, the string
    "unsatisfiable" for a syntactically valid but unsatisfiable one, and None
    when the header should be ignored (other units, several ranges, bad syntax).
    """
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = spec.strip().partition("-")
    if not dash:
        return None
    first_text, last_text = first_text.strip(), last_text.strip()
    if not (first_text.isdigit() or first_text == "") or not (
        last_text.isdigit() or last_text == ""
    ):
        return None
    if first_text == "":
        if last_text == "":
            return None
        suffix = int(last_text)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return (max(0, size - suffix), size - 1)
    first = int(first_text)
    last = int(last_text) if last_text else None
    if last is not None and last < first:
        return None
    if first >= size:
        return "unsatisfiable"
    return (first, size - 1 if last is None else min(last, size - 1))


# ---------------------------------------------------------------------------
# Request handling
# ---------------------------------------------------------------------------


class ConnectionAborted(Exception):
    """The response was cut on purpose; the connection must be closed."""


class FaultRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "FaultServer"

    def version_string(self) -> str:
        return SERVER_NAME

    # -- plumbing ----------------------------------------------------------

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self.handle_request(send_body=True)

    def do_HEAD(self) -> None:
        self.handle_request(send_body=False)

    def do_POST(self) -> None:
        self.handle_other_method()

    do_PUT = do_POST
    do_DELETE = do_POST
    do_PATCH = do_POST
    do_OPTIONS = do_POST

    def read_request_body(self) -> bytes:
        """Read the request body (Content-Length or chunked) off the connection."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked_body()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            return b""
        return self.rfile.read(length) if length > 0 else b""

    def read_chunked_body(self) -> bytes:
        chunks = []
        while True:
            size_line = self.rfile.readline(1024)
            try:
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                self.close_connection = True
                break
            if size == 0:
                # Skip trailer fields up to the blank line that ends the body.
                while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                    pass
                break
            chunks.append(self.rfile.read(size))
            self.rfile.readline(16)  # CRLF after the chunk data
        return b"".join(chunks)

    def handle_other_method(self) -> None:
        body = self.read_request_body()
        target = urlsplit(self.path)
        if target.path == "/_echo":
            # Uploads can be faulted too: with `key`, requests are counted, and
            # `fail`/`fail_count`/`retry_after` or `status` answer before the echo.
            query = dict(parse_qsl(target.query, keep_blank_values=True))
            if "key" in query:
                try:
                    plan = FaultPlan.from_query(target.path, query)
                except BadRequest as error:
                    self.send_simple(http.HTTPStatus.BAD_REQUEST, f"{error}\n")
                    return
                registry = self.server.registry
                registry.record_request(plan.key, None)
                if plan.status is not None:
                    self.send_simple(plan.status, plan.message or default_status_message(plan.status), key=plan.key)
                    return
                if plan.fail_status is not None and registry.claim_failure(plan.key, plan.fail_count):
                    headers = {}
                    if plan.retry_after is not None:
                        headers["Retry-After"] = plan.retry_after
                    self.send_simple(plan.fail_status, plan.message or default_status_message(plan.fail_status),
                                     key=plan.key, extra_headers=headers)
                    return
            self.send_echo(body)
            return
        self.send_simple(
            http.HTTPStatus.METHOD_NOT_ALLOWED,
            "method not allowed\n",
            extra_headers={"Allow": "GET, HEAD"},
        )

    # -- simple responses ----------------------------------------------------

    def send_simple(
        self,
        status: int,
        text: str,
        *,
        key: Optional[str] = None,
        extra_headers: Optional[dict[str, str]] = None,
        content_type: str = "text/plain; charset=utf-8",
        send_body: bool = True,
    ) -> None:
        """Send a small complete response; its body bytes count for `key`."""
        body = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)
            if key is not None:
                self.server.registry.add_bytes(key, len(body))

    def send_json(self, value: object) -> None:
        self.send_simple(
            http.HTTPStatus.OK,
            json.dumps(value) + "\n",
            content_type="application/json",
        )

    def send_echo(self, body: bytes = b"") -> None:
        raw_headers = [[name, value] for name, value in self.headers.items()]
        headers: dict[str, str] = {}
        for name, value in raw_headers:
            lower = name.lower()
            headers[lower] = f"{headers[lower]}, {value}" if lower in headers else value
        self.send_json(
            {
                "method": self.command,
                "path": self.path,
                "headers": headers,
                "raw_headers": raw_headers,
                "body_length": len(body),
            }
        )

    # -- GET / HEAD ------------------------------------------------------------

    def handle_request(self, send_body: bool) -> None:
        target = urlsplit(self.path)
        path = unquote(target.path)
        query = dict(parse_qsl(target.query, keep_blank_values=True))

        if path == "/_stats":
            self.send_json(self.server.registry.stats(query.get("key")))
            return
        if path == "/_reset":
            self.server.registry.reset(query.get("key"))
            self.send_json({"reset": query.get("key", "*")})
            return
        if path == "/_echo":
            self.send_echo()
            return

        try:
            plan = FaultPlan.from_query(path, query)
        except BadRequest as error:
            self.send_simple(http.HTTPStatus.BAD_REQUEST, f"{error}\n")
            return

        registry = self.server.registry
        registry.record_request(plan.key, self.headers.get("Range"))
        try:
            self.serve_with_faults(plan, path, target.query, send_body)
        except ConnectionAborted:
            self.abort_connection()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def serve_with_faults(
        self, plan: FaultPlan, path: str, raw_query: str, send_body: bool
    ) -> None:
        registry = self.server.registry
        key = plan.key

        if plan.redirect:
            self.send_redirect(plan, raw_query, send_body)
            return

        if plan.status is not None:
            self.send_simple(
                plan.status,
                plan.message or default_status_message(plan.status),
                key=key,
                send_body=send_body,
            )
            return

        if plan.fail_status is not None and registry.claim_failure(key, plan.fail_count):
            headers = {}
            if plan.retry_after is not None:
                headers["Retry-After"] = plan.retry_after
            elif plan.retry_after_date is not None:
                headers["Retry-After"] = email.utils.formatdate(
                    time.time() + plan.retry_after_date, usegmt=True
                )
            self.send_simple(
                plan.fail_status,
                plan.message or default_status_message(plan.fail_status),
                key=key,
                extra_headers=headers,
                send_body=send_body,
            )
            return

        served = self.select_file(plan, path)
        if served is None:
            self.send_simple(
                http.HTTPStatus.NOT_FOUND, "not found\n", key=key, send_body=send_body
            )
            return
        self.send_file(plan, served, send_body)

    def send_redirect(self, plan: FaultPlan, raw_query: str, send_body: bool) -> None:
        assert plan.redirect
        pairs = [
            (name, str(plan.redirect - 1) if name == "redirect" else value)
            for name, value in parse_qsl(raw_query, keep_blank_values=True)
        ]
        host = self.headers.get("Host") or "127.0.0.1:%d" % self.server.server_port
        location = f"http://{host}{urlsplit(self.path).path}?{urlencode(pairs)}"
        self.send_simple(
            http.HTTPStatus.FOUND,
            f"redirecting to {location}\n",
            key=plan.key,
            extra_headers={"Location": location},
            send_body=send_body,
        )

    def select_file(self, plan: FaultPlan, path: str) -> Optional[ServedFile]:
        """The file this request is answered with, after any change_after switch."""
        root = self.server.root
        original_path = resolve_under(root, path)
        if original_path is None or not os.path.isfile(original_path):
            return None
        original = ServedFile.from_path(original_path)

        if plan.change_after is None or plan.alt is None:
            return original
        if self.server.registry.bytes_sent(plan.key) < plan.change_after:
            return original
        alt_path = resolve_under(root, plan.alt)
        if alt_path is None or not os.path.isfile(alt_path):
            return None
        # The replacement is "newer": its Last-Modified is at least a second
        # after the original's so date validators differ too.
        return ServedFile.from_path(alt_path, not_before=original.last_modified + 1)

    def send_file(self, plan: FaultPlan, served: ServedFile, send_body: bool) -> None:
        status = http.HTTPStatus.OK
        first, length = 0, served.size
        range_header = self.headers.get("Range")
        if_range = self.headers.get("If-Range")

        if range_header and not plan.ignore_range:
            if if_range is None or served.matches_if_range(if_range):
                parsed = parse_single_range(range_header, served.size)
                if parsed == "unsatisfiable":
                    self.send_simple(
                        http.HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                        "range not satisfiable\n",
                        key=plan.key,
                        extra_headers={
                            "Content-Range": f"bytes */{served.size}",
                            "ETag": served.etag,
                            "Last-Modified": served.last_modified_header,
                            "Accept-Ranges": "bytes",
                        },
                        send_body=send_body,
                    )
                    return
                if isinstance(parsed, tuple):
                    status = http.HTTPStatus.PARTIAL_CONTENT
                    first, last = parsed
                    length = last - first + 1

        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", served.etag)
        self.send_header("Last-Modified", served.last_modified_header)
        if not plan.ignore_range:
            self.send_header("Accept-Ranges", "bytes")
        if status == http.HTTPStatus.PARTIAL_CONTENT:
            self.send_header(
                "Content-Range", f"bytes {first}-{first + length - 1}/{served.size}"
            )
        self.end_headers()

        if send_body:
            self.send_body(plan, served, first, length)

    def send_body(self, plan: FaultPlan, served: ServedFile, first: int, length: int) -> None:
        """Write `length` bytes of the file from `first`, applying body faults."""
        registry = self.server.registry
        key = plan.key

        # How much of the promised body is actually sent before cutting.
        to_send = length
        if plan.drop_every is not None:
            to_send = min(to_send, plan.drop_every)
        if plan.short_by and length > 0 and registry.claim_short_response(
            key, plan.short_count
        ):
            to_send = min(to_send, max(0, length - plan.short_by))

        stall_pending = plan.stall_after is not None and plan.stall_seconds > 0
        rate_piece = (
            max(1, plan.rate // RATE_STEPS_PER_SECOND) if plan.rate is not None else None
        )
        started = time.monotonic()
        socket_fd = self.connection.fileno()
        position = 0  # body bytes of this response written so far

        with open(served.path, "rb") as file:
            file_fd = file.fileno()
            while position < to_send:
                if stall_pending and position >= plan.stall_after:
                    stall_pending = False
                    if registry.claim_stall(key, plan.stall_count):
                        time.sleep(plan.stall_seconds)
                        started += plan.stall_seconds  # pace `rate` from here on

                piece = min(CHUNK_SIZE, to_send - position)
                if rate_piece is not None:
                    piece = min(piece, rate_piece)
                if stall_pending:
                    piece = min(piece, plan.stall_after - position)

                sent = os.sendfile(socket_fd, file_fd, first + position, piece)
                if sent == 0:  # file shrank underneath us
                    raise ConnectionAborted()
                position += sent
                registry.add_bytes(key, sent)

                if plan.rate is not None:
                    due = started + position / plan.rate
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)

        if to_send < length:
            raise ConnectionAborted()

    def abort_connection(self) -> None:
        """Close the connection without sending anything more."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def default_status_message(status: int) -> str:
    if status == http.HTTPStatus.FORBIDDEN:
        return "access denied by policy\n"
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "status"
    return f"{status} {phrase}\n"


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, root: str, verbose: bool) -> None:
        self.root = os.path.realpath(root)
        self.verbose = verbose
        self.registry = StateRegistry()
        super().__init__(("127.0.0.1", port), FaultRequestHandler)

    def handle_error(self, request, client_address) -> None:
        # Clients hanging up mid-response are routine here, not errors.
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)) and not self.verbose:
            return
        super().handle_error(request, client_address)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="directory to serve")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--port-file", help="write the listening port to this file")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    if not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is not a directory")

    server = FaultServer(args.port, args.root, args.verbose)
    banner = f"fault server on 127.0.0.1:{server.server_address[1]}, root {server.root}" if args.verbose else None
    return serving.serve(server, args.port_file, banner)


if __name__ == "__main__":
    sys.exit(main())
