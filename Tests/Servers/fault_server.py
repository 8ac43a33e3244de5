#!/usr/bin/env python3
"""A scriptable HTTP/1.1 file server that misbehaves on request.

The transferd tests use it for the faults that real servers (nginx) will not
produce on demand: connections dropped mid-body, short bodies, transient error
statuses, validators that change mid-download, ignored Range headers, stalls,
slow bodies and redirect chains; and hostile answers: no validators, forced
gzip, redirects to any URL (another host, ftp://), header values with a bare
CR or a NUL, bodies without end (also one line without end, for an event
stream), 200 answers to a Range request carrying only
the range, and Content-Length values larger than the body.

It also runs a tiny anonymous FTP responder on a second loopback port (see
FtpResponder), as a target for redirects to ftp://: it serves the bytes
FTP_CONTENT for any path and counts its control connections under the stats
key "ftp".

Without fault parameters it is a well-behaved static file server for the
directory given with --root (GET and HEAD, single byte ranges, If-Range,
strong ETag, Last-Modified, keep-alive).  Faults are selected per request with
query parameters; the state a fault needs (how many failures were served, how
many bytes were sent, ...) is kept per ``key`` query parameter, which defaults
to the request path, so independent tests do not disturb each other.

See Tests/Servers/README.md for the list of parameters and control endpoints.

Usage:
    python3 fault_server.py --root DIR [--port 0] [--port-file FILE]
        [--ftp-port 0] [--ftp-port-file FILE] [--verbose]

Only the Python 3.11 standard library is used.
"""

from __future__ import annotations

import argparse
import base64
import email.utils
import gzip
import hashlib
import http
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import serving  # Tests/Servers/serving.py: port file and serve loop

# Body bytes handed to the kernel per sendfile call: large enough for speed,
# small enough that faults (drop, stall, rate) act at a fine granularity.
CHUNK_SIZE = 256 * 1024

# Pieces of at most this many steps per second when trickling with `rate`.
RATE_STEPS_PER_SECOND = 20

SERVER_NAME = "transferd-fault-server"

# The body of every `endless` / `endless_chunked` response, repeated forever.
ENDLESS_PATTERN = b"transferd-endless-body-0123456789\n"
# An `endless_line` body: ENDLESS_LINE_START, then ENDLESS_LINE_PATTERN repeated
# forever, never a CR or LF (one Server-Sent Events data line without end).
ENDLESS_LINE_START = b"data: "
ENDLESS_LINE_PATTERN = b"transferd-endless-line-0123456789-"

# What the FTP responder answers any RETR with, and the stats key its control
# connections are counted under (GET /_stats?key=ftp).
FTP_CONTENT = b"FTP-SECRET-CONTENT"
FTP_STATS_KEY = "ftp"

# Raw header lines of `header_crlf=1` and `header_nul=1`: a bare CR (no LF)
# and a NUL byte inside a header value.
HEADER_CRLF_LINE = b"X-Evil: a\rInjected: yes\r\n"
HEADER_NUL_LINE = b"X-Evil-Nul: a\x00Injected: yes\r\n"


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
    # Hostile answers.
    no_validators: bool = False  # no ETag, Last-Modified, Accept-Ranges
    gzip: bool = False  # body gzip-compressed whatever Accept-Encoding says; Range ignored
    redirect_to: Optional[str] = None  # 302 to exactly this URL
    header_crlf: bool = False  # a header value with a bare CR (HEADER_CRLF_LINE)
    header_nul: bool = False  # a header value with a NUL byte (HEADER_NUL_LINE)
    endless: bool = False  # 200, no Content-Length, Connection: close, body never ends
    endless_chunked: bool = False  # 200, chunked, the last chunk never comes
    endless_line: bool = False  # 200 text/event-stream, no Content-Length, close, one line that never ends
    range_lie: bool = False  # a range request gets 200 with Content-Range and the range only
    range_bare: bool = False  # a range request gets 200 with the range only and no Content-Range
    weak_etag: bool = False  # the ETag is sent weak (W/"...")
    big_header: Optional[int] = None  # one header line with a value of this many bytes
    length_lie: Optional[int] = None  # 200 declaring this Content-Length, whole file, close
    max_active: Optional[int] = None  # 429 (Retry-After: 1) while this many file responses of the key are under way
    new_version_each: bool = False  # every answer is another version: its ETag and Last-Modified name the request
    # Published checksums, a comma-separated list of: repr (Repr-Digest sha-256 of the whole file),
    # repr512 (Repr-Digest sha-512 and sha-256), content (Content-Digest sha-256 of the body sent),
    # legacy (RFC 3230 Digest: SHA-256=), amz-sha256, amz-crc32c (full-object x-amz-checksum-*),
    # amz-composite (x-amz-checksum-crc32c "...-3", as a multipart object's).
    digest: tuple[str, ...] = ()
    digest_wrong: bool = False  # every published checksum is of other bytes (the file and one more)

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

        def flag(name: str) -> bool:
            return query.get(name, "0") not in ("", "0", "false")

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
        redirect_to = query.get("redirect_to")
        if redirect_to is not None:
            if redirect_to == "" or any(c in redirect_to for c in "\r\n\0"):
                raise BadRequest("redirect_to must be a non-empty URL without CR, LF or NUL")
            try:
                redirect_to.encode("latin-1")
            except UnicodeEncodeError:
                raise BadRequest("redirect_to must be Latin-1 (percent-encode the rest)") from None
        if sum(flag(name) for name in ("endless", "endless_chunked", "endless_line")) > 1:
            raise BadRequest("endless, endless_chunked and endless_line exclude each other")

        return cls(
            key=query.get("key", path),
            drop_every=integer("drop_every"),
            fail_status=status_code("fail"),
            fail_count=integer("fail_count") if "fail_count" in query else 1,
            retry_after=query.get("retry_after"),
            retry_after_date=integer("retry_after_date"),
            change_after=change_after,
            alt=alt,
            ignore_range=flag("ignore_range"),
            short_by=integer("short_by"),
            short_count=integer("short_count") if "short_count" in query else 1,
            rate=rate,
            stall_after=integer("stall_after"),
            stall_seconds=number("stall_seconds") or 0.0,
            stall_count=integer("stall_count") if "stall_count" in query else 1,
            redirect=integer("redirect"),
            status=status_code("status"),
            message=query.get("message"),
            no_validators=flag("no_validators"),
            gzip=flag("gzip"),
            redirect_to=redirect_to,
            header_crlf=flag("header_crlf"),
            header_nul=flag("header_nul"),
            endless=flag("endless"),
            endless_chunked=flag("endless_chunked"),
            endless_line=flag("endless_line"),
            range_lie=flag("range_lie"),
            range_bare=flag("range_bare"),
            weak_etag=flag("weak_etag"),
            big_header=integer("big_header"),
            length_lie=integer("length_lie"),
            max_active=integer("max_active", minimum=1),
            new_version_each=flag("new_version_each"),
            digest=tuple(part for part in query.get("digest", "").split(",") if part),
            digest_wrong=flag("digest_wrong"),
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
    active: int = 0
    max_active_seen: int = 0
    refused: int = 0
    # (seconds since the first request, responses under way) at each start and end.
    active_history: list[tuple[float, int]] = field(default_factory=list)
    first_request: Optional[float] = None
    # Bodies sent to /_echo with this key (the last 50), with the request's
    # method and headers: what a webhook receiver saw.
    bodies: list[dict] = field(default_factory=list)

    def stats(self) -> dict:
        return {
            "requests": self.requests,
            "bytes_sent": self.bytes_sent,
            "ranges": list(self.ranges),
            "max_active": self.max_active_seen,
            "refused": self.refused,
            "active_history": [list(point) for point in self.active_history],
            "bodies": list(self.bodies),
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
        # Fault parameters given with /_preset, by request path: for clients
        # that choose their paths and queries themselves.
        self._presets: dict[str, dict[str, str]] = {}

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

    def record_body(self, key: str, method: str, headers: dict[str, str], body: bytes) -> None:
        with self._lock:
            bodies = self._state(key).bodies
            bodies.append({"method": method, "headers": headers, "body": body.decode("utf-8", "replace")})
            del bodies[:-50]

    def add_bytes(self, key: str, count: int) -> None:
        with self._lock:
            self._state(key).bytes_sent += count

    def bytes_sent(self, key: str) -> int:
        with self._lock:
            return self._state(key).bytes_sent

    def requests(self, key: str) -> int:
        with self._lock:
            return self._state(key).requests

    def enter(self, key: str, limit: int) -> bool:
        """Counts a file response of `key` as under way, unless `limit` already are
        (then it is counted as refused and False is returned)."""
        with self._lock:
            state = self._state(key)
            now = time.monotonic()
            if state.first_request is None:
                state.first_request = now
            if state.active >= limit:
                state.refused += 1
                return False
            state.active += 1
            state.max_active_seen = max(state.max_active_seen, state.active)
            state.active_history.append((round(now - state.first_request, 3), state.active))
            return True

    def leave(self, key: str) -> None:
        with self._lock:
            state = self._state(key)
            state.active -= 1
            state.active_history.append((round(time.monotonic() - (state.first_request or 0), 3), state.active))

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
                self._presets.clear()
            else:
                self._states.pop(key, None)
                self._presets = {path: preset for path, preset in self._presets.items() if preset.get("key") != key}

    def set_preset(self, path: str, parameters: dict[str, str]) -> None:
        with self._lock:
            self._presets[path] = dict(parameters)

    def preset(self, path: str) -> dict[str, str]:
        with self._lock:
            return dict(self._presets.get(path, {}))


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


_CRC32C_TABLE: list[int] = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    _CRC32C_TABLE.append(_crc)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as S3's x-amz-checksum-crc32c; a byte at a time (test files are small)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ _CRC32C_TABLE[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


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

    # The faults of the request being answered, while its response is sent:
    # end_headers() adds the hostile header lines it asks for.
    plan: Optional[FaultPlan] = None

    def version_string(self) -> str:
        return SERVER_NAME

    def end_headers(self) -> None:
        plan = self.plan
        if plan is not None:
            if plan.header_crlf:
                self.send_raw_header_line(HEADER_CRLF_LINE)
            if plan.header_nul:
                self.send_raw_header_line(HEADER_NUL_LINE)
            if plan.big_header:
                self.send_raw_header_line(b"X-Big: " + b"a" * plan.big_header + b"\r\n")
        super().end_headers()

    def send_raw_header_line(self, line: bytes) -> None:
        """Queue a header line as bytes, unchecked, like send_header() does."""
        if not hasattr(self, "_headers_buffer"):
            self._headers_buffer = []
        self._headers_buffer.append(line)

    # -- plumbing ----------------------------------------------------------

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        if self.path.startswith(TUS_PREFIX):
            self.handle_tus()
            return
        if self.path.startswith(IETF_PREFIX):
            self.handle_ietf()
            return
        self.handle_request(send_body=True)

    def do_HEAD(self) -> None:
        if self.path.startswith(TUS_PREFIX):
            self.handle_tus()
            return
        if self.path.startswith(IETF_PREFIX):
            self.handle_ietf()
            return
        self.handle_request(send_body=False)

    def do_POST(self) -> None:
        if self.path.startswith(TUS_PREFIX):
            self.handle_tus()
            return
        if self.path.startswith(IETF_PREFIX):
            self.handle_ietf()
            return
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
        if is_echo(target.path):
            query = dict(parse_qsl(target.query, keep_blank_values=True))
            if not self.answer_echo_faults(target.path, query, None):
                if "key" in query:
                    # Only bodies that were answered 2xx: what the receiver accepted.
                    self.server.registry.record_body(query["key"], self.command,
                                                     {name.lower(): value for name, value in self.headers.items()}, body)
                self.send_echo(body)
            return
        self.send_simple(
            http.HTTPStatus.METHOD_NOT_ALLOWED,
            "method not allowed\n",
            extra_headers={"Allow": "GET, HEAD"},
        )

    def answer_echo_faults(
        self, path: str, query: dict[str, str], range_header: Optional[str], send_body: bool = True
    ) -> bool:
        """Count an /_echo request with a `key`, and answer its `status`,
        `fail` or `endless*` fault; True if a fault answered (then there is no
        echo).

        Uploads can be faulted this way, and a redirect's target can be an
        echo whose arrival the key's stats show."""
        if "key" not in query:
            return False
        try:
            plan = FaultPlan.from_query(path, query)
        except BadRequest as error:
            self.send_simple(http.HTTPStatus.BAD_REQUEST, f"{error}\n")
            return True
        registry = self.server.registry
        registry.record_request(plan.key, range_header)
        if plan.status is not None:
            self.send_simple(plan.status, plan.message or default_status_message(plan.status), key=plan.key)
            return True
        if plan.fail_status is not None and registry.claim_failure(plan.key, plan.fail_count):
            headers = {}
            if plan.retry_after is not None:
                headers["Retry-After"] = plan.retry_after
            self.send_simple(plan.fail_status, plan.message or default_status_message(plan.fail_status),
                             key=plan.key, extra_headers=headers)
            return True
        if plan.endless or plan.endless_chunked or plan.endless_line:
            # The answer to an upload that never ends (the request body was read first).
            try:
                self.send_endless(plan, send_body)
            except ConnectionAborted:
                self.abort_connection()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return True
        return False

    def set_preset(self, query: dict[str, str]) -> None:
        """`/_preset?path=P&PARAMS`: later GET and HEAD requests for path P take
        PARAMS as fault parameters (their own query's win)."""
        path = query.pop("path", "")
        if not path.startswith("/") or path.startswith("/_"):
            self.send_simple(http.HTTPStatus.BAD_REQUEST, "path must be a request path, not a control endpoint\n")
            return
        try:
            FaultPlan.from_query(path, query)
        except BadRequest as error:
            self.send_simple(http.HTTPStatus.BAD_REQUEST, f"{error}\n")
            return
        self.server.registry.set_preset(path, query)
        self.send_json({"preset": path, "parameters": query})

    # -- tus ------------------------------------------------------------------

    def handle_tus(self) -> None:
        """The tus 1.0 endpoint below /_tus/ (TusUploads): creation, HEAD, PATCH
        with the checksum extension, termination, and faults per key."""
        target = urlsplit(self.path)
        path = target.path
        query = dict(parse_qsl(target.query, keep_blank_values=True))
        tus = self.server.tus
        method = self.command
        if path == "/_tus/stats" and method == "GET":
            self.send_json(tus.stats(query.get("key", "")))
            return
        if path == "/_tus/set" and method == "GET":
            key = query.pop("key", "")
            self.send_json(tus.set_faults(key, query))
            return
        body_length = int(self.headers.get("Content-Length") or 0)

        def answer(status: int, headers: Optional[dict[str, str]] = None, drain: bool = True) -> None:
            if drain and body_length > 0 and method != "HEAD":
                self.rfile.read(body_length)
            self.send_response(status)
            self.send_header("Tus-Resumable", "1.0.0")
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        if path == "/_tus/files" and method in ("OPTIONS", "POST"):
            # Faults given in the creation URL's query hold for its key from now on.
            given = {name: value for name, value in query.items() if name != "key"}
            if given:
                tus.set_faults(query.get("key", ""), given)
        if path == "/_tus/files" and method == "OPTIONS":
            faults = tus.faults(query.get("key", ""))
            if faults.get("no_options"):
                answer(405)
                return
            extensions = "creation,termination" + (",checksum" if faults.get("checksum") else "")
            headers = {"Tus-Version": "1.0.0", "Tus-Extension": extensions, "Tus-Max-Size": str(1 << 34)}
            if faults.get("checksum"):
                headers["Tus-Checksum-Algorithm"] = "md5,sha1"
            answer(204, headers)
            return
        if self.headers.get("Tus-Resumable") != "1.0.0":
            answer(412, {"Tus-Version": "1.0.0"})
            return
        if path == "/_tus/files" and method == "POST":
            try:
                length = int(self.headers.get("Upload-Length", ""))
            except ValueError:
                answer(400)
                return
            upload = tus.create(query.get("key", ""), length, self.headers.get("Upload-Metadata", ""))
            # Relative on purpose: the client resolves it against the creation URL.
            answer(201, {"Location": f"files/{upload.id}"})
            return
        if not path.startswith("/_tus/files/"):
            answer(404)
            return
        upload = tus.find(path[len("/_tus/files/"):])
        if upload is None or upload.deleted:
            answer(404)
            return
        faults = tus.faults(upload.key)
        stats = tus.key_stats(upload.key)
        if upload.lost:
            answer(int(faults.get("lose_status") or 404))
            return
        if method == "HEAD":
            with upload.busy, tus.lock:
                stats["heads"] += 1
                offset = upload.offset + int(faults.get("head_offset_delta") or 0)
            answer(200, {"Upload-Offset": str(offset), "Upload-Length": str(upload.length)})
            return
        if method == "DELETE":
            with tus.lock:
                upload.deleted = True
                stats["deleted"] += 1
            answer(204)
            return
        if method != "PATCH":
            answer(405)
            return
        if self.headers.get("Content-Type") != "application/offset+octet-stream":
            answer(415)
            return
        try:
            offset = int(self.headers.get("Upload-Offset", ""))
        except ValueError:
            answer(400)
            return
        with upload.busy:
            self.tus_patch(upload, offset, body_length, faults, stats, answer)

    def tus_patch(self, upload: "TusUpload", offset: int, body_length: int, faults: dict[str, str],
                  stats: dict[str, int], answer: Callable[..., None]) -> None:
        """A PATCH to `upload`, its lock held."""
        tus = self.server.tus
        if upload.lost or upload.deleted:
            answer(int(faults.get("lose_status") or 404))
            return
        if offset != upload.offset:
            with tus.lock:
                stats["conflicts"] += 1
            answer(409)
            return
        checksum = self.headers.get("Upload-Checksum")
        rate = int(faults.get("rate") or 0)
        with tus.lock:
            stats["patches"] += 1
            if checksum:
                stats["checksums"] += 1
        received = bytearray()
        piece = 16 * 1024 if rate else 256 * 1024
        started = time.monotonic()
        while len(received) < body_length:
            data = self.rfile.read(min(piece, body_length - len(received)))
            if not data:
                break
            received += data
            with tus.lock:
                stats["received"] += len(data)
                if not checksum:
                    # Without a checksum, what arrived is kept even if the request is cut (as tusd does).
                    upload.data += data
            if rate:
                ahead = len(received) / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        if len(received) < body_length:
            self.close_connection = True
            return
        if checksum:
            algorithm, _, digest = checksum.partition(" ")
            if algorithm not in ("sha1", "md5"):
                answer(400, drain=False)
                return
            expected = base64.b64encode(hashlib.new(algorithm, bytes(received)).digest()).decode()
            with tus.lock:
                mismatch = digest != expected or bool(faults.get("mismatch_once")) and not stats["mismatches"]
                if mismatch:
                    stats["mismatches"] += 1
                else:
                    upload.data += received
            if mismatch:
                answer(460, drain=False)
                return
        with tus.lock:
            lose_after = int(faults.get("lose_after") or 0)
            if lose_after and stats["received"] >= lose_after and not stats["lost"]:
                stats["lost"] += 1
                upload.lost = True
            reported = upload.offset + int(faults.get("patch_offset_delta") or 0)
        answer(204, {"Upload-Offset": str(reported)}, drain=False)


    # -- resumable uploads (IETF draft) ----------------------------------------

    def handle_ietf(self) -> None:
        """The endpoint of draft-ietf-httpbis-resumable-upload-12 (interop version 8) below
        /_ietf/ (IetfUploads): creation (POST /_ietf/upload, with a 104 interim answer naming the
        upload resource), offset retrieval (HEAD), append (PATCH), cancellation (DELETE),
        Upload-Limit, and faults per key."""
        target = urlsplit(self.path)
        path = target.path
        query = dict(parse_qsl(target.query, keep_blank_values=True))
        ietf = self.server.ietf
        method = self.command
        if path == "/_ietf/stats" and method == "GET":
            self.send_json(ietf.stats(query.get("key", "")))
            return
        if path == "/_ietf/set" and method == "GET":
            key = query.pop("key", "")
            if query.pop("forget", ""):
                ietf.forget_latest(key)
            self.send_json(ietf.set_faults(key, query))
            return
        try:
            body_length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            body_length = -1

        def answer(status: int, headers: Optional[dict[str, str]] = None, drain: bool = True, text: str = "") -> None:
            if drain and body_length > 0 and method != "HEAD":
                self.rfile.read(body_length)
            elif body_length > 0 and method != "HEAD":
                self.close_connection = True
            body = text.encode()
            self.send_response(status)
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            if body:
                self.send_header("Content-Type", "application/json")
            self.end_headers()
            if body and method != "HEAD":
                self.wfile.write(body)

        if body_length < 0:
            self.close_connection = True
            answer(400, drain=False)
            return
        if path == "/_ietf/upload" and method in ("OPTIONS", "POST"):
            given = {name: value for name, value in query.items() if name != "key"}
            if given:
                ietf.set_faults(query.get("key", ""), given)
        key = query.get("key", "")
        if path == "/_ietf/upload" and method == "OPTIONS":
            faults = ietf.faults(key)
            headers = {"Accept-Patch": "application/partial-upload"}
            if ietf_limits(faults) and not faults.get("quiet_options"):
                headers["Upload-Limit"] = ietf_limits(faults)
            answer(204, headers)
            return
        if path == "/_ietf/upload" and method == "POST":
            self.ietf_create(key, body_length, answer)
            return
        if not path.startswith("/_ietf/uploads/"):
            answer(404)
            return
        upload = ietf.find(path[len("/_ietf/uploads/"):])
        if upload is None or upload.deleted:
            answer(404)
            return
        faults = ietf.faults(upload.key)
        stats = ietf.key_stats(upload.key)
        # Requests on the upload resource that carried credentials (a test of where they go).
        if self.headers.get("Authorization") or self.headers.get("Cookie"):
            with ietf.lock:
                stats["credentials"] += 1
        if upload.lost:
            answer(int(faults.get("lose_status") or 404))
            return
        limits = ietf_limits(faults)
        if method == "HEAD":
            with upload.busy, ietf.lock:
                stats["heads"] += 1
                offset = upload.offset + int(faults.get("head_offset_delta") or 0)
                complete = upload.complete
            headers = {"Upload-Offset": str(offset), "Upload-Complete": "?1" if complete else "?0"}
            if upload.length is not None:
                headers["Upload-Length"] = str(upload.length)
            if limits:
                headers["Upload-Limit"] = limits
            answer(204, headers)
            return
        if method == "DELETE":
            with ietf.lock:
                upload.deleted = True
                stats["deleted"] += 1
            answer(204)
            return
        if method != "PATCH":
            answer(405, {"Allow": "HEAD, PATCH, DELETE"})
            return
        if self.headers.get("Content-Type") != "application/partial-upload":
            answer(415)
            return
        completes = sf_boolean(self.headers.get("Upload-Complete"))
        offset = sf_integer(self.headers.get("Upload-Offset"))
        if completes is None or offset is None:
            answer(400)
            return
        with upload.busy:
            if upload.lost or upload.deleted:
                answer(int(faults.get("lose_status") or 404))
                return
            if upload.complete:
                answer(400, text='{"type": "https://iana.org/assignments/http-problem-types#completed-upload"}')
                return
            if offset != upload.offset:
                with ietf.lock:
                    stats["conflicts"] += 1
                answer(409, {"Upload-Offset": str(upload.offset)})
                return
            if not self.ietf_length_agrees(upload, completes, offset, body_length, answer):
                return
            max_append = int(faults.get("max_append") or 0)
            if max_append and body_length > max_append:
                with ietf.lock:
                    stats["too_large"] += 1
                answer(413, {"Upload-Limit": limits}, drain=False)
                return
            with ietf.lock:
                stats["appends"] += 1
            if not self.ietf_receive(upload, body_length, faults, stats):
                return
            if completes:
                upload.complete = True
                answer(200, {"Upload-Complete": "?1"}, drain=False, text=ietf_result(upload))
                return
            reported = upload.offset + int(faults.get("patch_offset_delta") or 0)
            answer(204, {"Upload-Complete": "?0", "Upload-Offset": str(reported)}, drain=False)

    def ietf_length_agrees(self, upload: "IetfUpload", completes: bool, offset: int, body_length: int,
                           answer: Callable[..., None]) -> bool:
        """Record the length a request indicates; False (after a 400) when it disagrees."""
        indicated = sf_integer(self.headers.get("Upload-Length"))
        if completes:
            by_content = offset + body_length
            if indicated is not None and indicated != by_content:
                answer(400, drain=False, text='{"type": "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"}')
                return False
            indicated = by_content
        if indicated is not None:
            if upload.length is not None and upload.length != indicated:
                answer(400, drain=False, text='{"type": "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"}')
                return False
            upload.length = indicated
        if upload.length is not None and offset + body_length > upload.length:
            answer(400, drain=False)
            return False
        return True

    def ietf_create(self, key: str, body_length: int, answer: Callable[..., None]) -> None:
        ietf = self.server.ietf
        faults = ietf.faults(key)
        stats = ietf.key_stats(key)
        completes = sf_boolean(self.headers.get("Upload-Complete"))
        version = sf_integer(self.headers.get("Upload-Draft-Interop-Version"))
        speaks = str(version) == (faults.get("interop") or str(IETF_INTEROP_VERSION))
        if completes is None or not speaks:
            # Not a resumable upload (no Upload-Complete, or another draft): a plain one, processed whole.
            received = self.rfile.read(body_length) if body_length > 0 else b""
            with ietf.lock:
                stats["plain"] += 1
                stats["received"] += len(received)
            answer(200, drain=False, text=json.dumps({"size": len(received),
                                                     "sha256": hashlib.sha256(received).hexdigest()}) + "\n")
            return
        limits = ietf_limits(faults)
        length = sf_integer(self.headers.get("Upload-Length"))
        if completes and length is None:
            length = body_length
        max_size = int(faults.get("max_size") or 0)
        if max_size and length is not None and length > max_size:
            with ietf.lock:
                stats["too_large"] += 1
            answer(413, {"Upload-Limit": limits}, drain=False)
            return
        upload = ietf.create(key, length)
        with ietf.lock:
            stats["requests"] += 1
            if body_length == 0:
                stats["empty_creations"] += 1
        # Relative: the client resolves it against the target; location_base (an absolute URL of
        # this endpoint under another name) puts the upload resource on another origin.
        location = (faults.get("location_base") or "") + f"uploads/{upload.id}"
        with upload.busy:
            if not faults.get("no_interim"):
                lines = [b"HTTP/1.1 104 Upload Resumption Supported",
                         b"Location: " + location.encode(),
                         b"Upload-Draft-Interop-Version: " + str(version).encode()]
                if limits:
                    lines.append(b"Upload-Limit: " + limits.encode())
                self.wfile.write(b"\r\n".join(lines) + b"\r\n\r\n")
                self.wfile.flush()
                with ietf.lock:
                    stats["interim"] += 1
            max_append = int(faults.get("max_append") or 0)
            if max_append and body_length > max_append:
                with ietf.lock:
                    stats["too_large"] += 1
                answer(413, {"Upload-Limit": limits, "Location": location}, drain=False)
                return
            if not self.ietf_receive(upload, body_length, faults, stats):
                return
            upload.creation_received = body_length
            if completes:
                upload.complete = True
                answer(200, {"Upload-Complete": "?1", "Location": location}, drain=False, text=ietf_result(upload))
                return
            headers = {"Location": location, "Upload-Complete": "?0"}
            if limits:
                headers["Upload-Limit"] = limits
            answer(201, headers, drain=False)

    def ietf_receive(self, upload: "IetfUpload", body_length: int, faults: dict[str, str], stats: dict[str, int]) -> bool:
        """Read a request's body into `upload` as it arrives (what arrives is kept when the
        request is cut, as the draft asks); False when it was cut (the connection then closes)."""
        ietf = self.server.ietf
        rate = int(faults.get("rate") or 0)
        cut_after = int(faults.get("cut_after") or 0)
        lose_after = int(faults.get("lose_after") or 0)
        piece = 16 * 1024 if rate else 256 * 1024
        started = time.monotonic()
        done = 0
        while done < body_length:
            want = min(piece, body_length - done)
            with ietf.lock:
                if cut_after and not stats["cuts"]:
                    left = cut_after - stats["received"]
                    if left <= 0:
                        stats["cuts"] += 1
                        self.close_connection = True
                        self.abort_ietf_connection()
                        return False
                    want = min(want, left)
            data = self.rfile.read(want)
            if not data:
                break
            done += len(data)
            with ietf.lock:
                stats["received"] += len(data)
                upload.data += data
                if lose_after and stats["received"] >= lose_after and not stats["lost"]:
                    stats["lost"] += 1
                    upload.lost = True
            if rate:
                ahead = done / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        if done < body_length:
            self.close_connection = True
            return False
        return True

    def abort_ietf_connection(self) -> None:
        """Drop the connection at once, mid-request, as a network failure would."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

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
        if path == "/_preset":
            self.set_preset(query)
            return
        if is_echo(path):
            if not self.answer_echo_faults(path, query, self.headers.get("Range"), send_body):
                self.send_echo()
            return

        # Parameters the request's own query does not give come from a preset for its path.
        query = {**self.server.registry.preset(path), **query}
        try:
            plan = FaultPlan.from_query(path, query)
        except BadRequest as error:
            self.send_simple(http.HTTPStatus.BAD_REQUEST, f"{error}\n")
            return

        registry = self.server.registry
        registry.record_request(plan.key, self.headers.get("Range"))
        self.plan = plan
        try:
            self.serve_with_faults(plan, path, target.query, send_body)
        except ConnectionAborted:
            self.abort_connection()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.plan = None

    def serve_with_faults(
        self, plan: FaultPlan, path: str, raw_query: str, send_body: bool
    ) -> None:
        registry = self.server.registry
        key = plan.key

        if plan.redirect_to is not None:
            self.send_simple(
                http.HTTPStatus.FOUND,
                f"redirecting to {plan.redirect_to}\n",
                key=key,
                extra_headers={"Location": plan.redirect_to},
                send_body=send_body,
            )
            return

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

        if plan.endless or plan.endless_chunked or plan.endless_line:
            self.send_endless(plan, send_body)
            return

        served = self.select_file(plan, path)
        if served is None:
            self.send_simple(
                http.HTTPStatus.NOT_FOUND, "not found\n", key=key, send_body=send_body
            )
            return
        if plan.max_active is not None:
            if not registry.enter(key, plan.max_active):
                self.send_simple(
                    429, "too many requests at once\n", key=key, extra_headers={"Retry-After": "1"}, send_body=send_body
                )
                return
            try:
                self.send_file(plan, served, send_body)
            finally:
                registry.leave(key)
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

        if plan.new_version_each:
            # A file that changes under every request (a log being written, a file re-uploaded):
            # the same bytes, but validators no earlier answer had, so no If-Range matches.
            count = self.server.registry.requests(plan.key)
            return ServedFile(original.path, original.size, original.etag[:-1] + f'-v{count}"',
                              original.last_modified + count)
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
        first, length = 0, served.size  # the part of the body that is sent
        declared = served.size  # the Content-Length header
        content_range: Optional[str] = None
        etag = served.etag
        compressed: Optional[bytes] = None
        range_header = self.headers.get("Range")
        if_range = self.headers.get("If-Range")

        if plan.gzip:
            # The whole file, compressed, whatever Accept-Encoding and Range say.
            with open(served.path, "rb") as file:
                compressed = gzip.compress(file.read(), mtime=0)
            length = declared = len(compressed)
            etag = served.etag[:-1] + '-gzip"'  # another representation
        elif plan.length_lie is not None:
            declared = plan.length_lie
        elif range_header and not plan.ignore_range:
            if if_range is None or served.matches_if_range(if_range):
                parsed = parse_single_range(range_header, served.size)
                if parsed == "unsatisfiable":
                    headers = {"Content-Range": f"bytes */{served.size}"}
                    if not plan.no_validators:
                        headers.update(
                            {
                                "ETag": served.etag,
                                "Last-Modified": served.last_modified_header,
                                "Accept-Ranges": "bytes",
                            }
                        )
                    self.send_simple(
                        http.HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                        "range not satisfiable\n",
                        key=plan.key,
                        extra_headers=headers,
                        send_body=send_body,
                    )
                    return
                if isinstance(parsed, tuple):
                    first, last = parsed
                    length = declared = last - first + 1
                    content_range = f"bytes {first}-{last}/{served.size}"
                    if plan.range_bare:  # the range's bytes as a 200, saying nothing of it
                        content_range = None
                    elif not plan.range_lie:  # range_lie: the range, but as a 200
                        status = http.HTTPStatus.PARTIAL_CONTENT

        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        if compressed is not None:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(declared))
        if not plan.no_validators:
            self.send_header("ETag", "W/" + etag if plan.weak_etag else etag)
            self.send_header("Last-Modified", served.last_modified_header)
            if not plan.ignore_range and compressed is None:
                self.send_header("Accept-Ranges", "bytes")
        if content_range is not None:
            self.send_header("Content-Range", content_range)
        if plan.digest:
            self.send_digests(plan, served.path, first, length, compressed)
        self.end_headers()

        if not send_body:
            return
        if compressed is not None:
            self.send_body(plan, self.bytes_writer(compressed), first, length)
        else:
            with open(served.path, "rb") as file:
                self.send_body(plan, self.file_writer(file.fileno()), first, length)
        if plan.length_lie is not None:
            raise ConnectionAborted()  # whatever was declared, the body is over

    def send_digests(self, plan: FaultPlan, path: str, first: int, length: int, compressed: Optional[bytes]) -> None:
        """The checksums `plan.digest` names: of the whole file, or of the body this answer sends."""
        with open(path, "rb") as file:
            whole = file.read()
        body = compressed if compressed is not None else whole[first:first + length]
        if plan.digest_wrong:
            whole, body = whole + b"x", body + b"x"

        def b64(raw: bytes) -> str:
            return base64.b64encode(raw).decode("ascii")

        for kind in plan.digest:
            if kind == "repr":
                self.send_header("Repr-Digest", f"sha-256=:{b64(hashlib.sha256(whole).digest())}:")
            elif kind == "repr512":
                self.send_header("Repr-Digest", f"sha-256=:{b64(hashlib.sha256(whole).digest())}:, "
                                 f"sha-512=:{b64(hashlib.sha512(whole).digest())}:")
            elif kind == "content":
                self.send_header("Content-Digest", f"sha-256=:{b64(hashlib.sha256(body).digest())}:")
            elif kind == "legacy":
                self.send_header("Digest", f"SHA-256={b64(hashlib.sha256(body).digest())}")
            elif kind == "amz-sha256":
                self.send_header("x-amz-checksum-sha256", b64(hashlib.sha256(whole).digest()))
            elif kind == "amz-crc32c":
                self.send_header("x-amz-checksum-crc32c", b64(crc32c(whole).to_bytes(4, "big")))
            elif kind == "amz-composite":
                self.send_header("x-amz-checksum-crc32c", b64(crc32c(whole).to_bytes(4, "big")) + "-3")

    def send_endless(self, plan: FaultPlan, send_body: bool) -> None:
        """200 with a body that never ends: no Content-Length and
        `Connection: close`, or chunked without the last chunk. With
        `endless_line`, an event stream whose one line never ends."""
        self.send_response(http.HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream" if plan.endless_line else "application/octet-stream")
        if plan.endless_chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        if not send_body:
            return
        unit = ENDLESS_PATTERN
        if plan.endless_line:
            unit = ENDLESS_LINE_PATTERN
            self.connection.sendall(ENDLESS_LINE_START)
            self.server.registry.add_bytes(plan.key, len(ENDLESS_LINE_START))
        pattern = unit * (CHUNK_SIZE // len(unit) + 2)
        view = memoryview(pattern)
        sock = self.connection

        def write(offset: int, count: int) -> int:
            start = offset % len(unit)
            data = view[start : start + count]
            if plan.endless_chunked:
                sock.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
            else:
                sock.sendall(data)
            return len(data)

        self.send_body(plan, write, 0, None)

    def file_writer(self, file_fd: int) -> Callable[[int, int], int]:
        """A body writer sending bytes of an open file with sendfile."""
        socket_fd = self.connection.fileno()
        return lambda offset, count: os.sendfile(socket_fd, file_fd, offset, count)

    def bytes_writer(self, data: bytes) -> Callable[[int, int], int]:
        """A body writer sending bytes held in memory."""
        view = memoryview(data)
        sock = self.connection

        def write(offset: int, count: int) -> int:
            piece = view[offset : offset + count]
            sock.sendall(piece)
            return len(piece)

        return write

    def send_body(
        self,
        plan: FaultPlan,
        write: Callable[[int, int], int],
        first: int,
        length: Optional[int],
    ) -> None:
        """Write `length` body bytes from offset `first`, applying body faults.

        `write(offset, count)` sends at most `count` bytes from `offset` of
        the body's source and returns how many it sent. `length` None means
        a body without end: it stops only when the client goes away (or at
        `drop_every`).
        """
        registry = self.server.registry
        key = plan.key

        # How much of the promised body is actually sent before cutting.
        to_send = length
        if plan.drop_every is not None:
            to_send = plan.drop_every if to_send is None else min(to_send, plan.drop_every)
        if (
            plan.short_by
            and length is not None
            and length > 0
            and registry.claim_short_response(key, plan.short_count)
        ):
            to_send = min(to_send, max(0, length - plan.short_by))

        stall_pending = plan.stall_after is not None and plan.stall_seconds > 0
        rate_piece = (
            max(1, plan.rate // RATE_STEPS_PER_SECOND) if plan.rate is not None else None
        )
        started = time.monotonic()
        position = 0  # body bytes of this response written so far

        while to_send is None or position < to_send:
            if stall_pending and position >= plan.stall_after:
                stall_pending = False
                if registry.claim_stall(key, plan.stall_count):
                    time.sleep(plan.stall_seconds)
                    started += plan.stall_seconds  # pace `rate` from here on

            piece = CHUNK_SIZE if to_send is None else min(CHUNK_SIZE, to_send - position)
            if rate_piece is not None:
                piece = min(piece, rate_piece)
            if stall_pending:
                piece = min(piece, plan.stall_after - position)

            sent = write(first + position, piece)
            if sent == 0:  # file shrank underneath us
                raise ConnectionAborted()
            position += sent
            registry.add_bytes(key, sent)

            if plan.rate is not None:
                due = started + position / plan.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

        if length is None or to_send < length:
            raise ConnectionAborted()

    def abort_connection(self) -> None:
        """Close the connection without sending anything more."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def is_echo(path: str) -> bool:
    """`/_echo`, or a path below it (a client that adds its own path, as an S3
    client does with its bucket and key, can be echoed and faulted too)."""
    return path == "/_echo" or path.startswith("/_echo/")


def default_status_message(status: int) -> str:
    if status == http.HTTPStatus.FORBIDDEN:
        return "access denied by policy\n"
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "status"
    return f"{status} {phrase}\n"


# ---------------------------------------------------------------------------
# FTP responder
# ---------------------------------------------------------------------------


class FtpResponder:
    """Just enough FTP for curl's anonymous RETR of any path, on 127.0.0.1.

    Every path holds FTP_CONTENT. Each accepted control connection is counted
    as one request of the stats key FTP_STATS_KEY ("ftp"), and the data bytes
    sent as its bytes_sent, so GET /_stats?key=ftp shows whether a client
    followed a redirect to ftp://. One thread per control connection.

    Commands: USER and PASS (230), PWD (257 "/"), CWD (250), TYPE (200),
    SIZE (213 n), EPSV (229) and PASV (227) open a passive data port, RETR
    (150, the bytes on the data connection, 226), QUIT (221); anything else
    gets 502.
    """

    DATA_ACCEPT_TIMEOUT_SECONDS = 10
    IDLE_TIMEOUT_SECONDS = 60

    def __init__(self, port: int, registry: StateRegistry, verbose: bool) -> None:
        self.registry = registry
        self.verbose = verbose
        self.listener = socket.create_server(("127.0.0.1", port), backlog=64)
        self.port = self.listener.getsockname()[1]

    def start(self) -> None:
        threading.Thread(target=self.accept_loop, name="ftp-accept", daemon=True).start()

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self.listener.close()

    def accept_loop(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.registry.record_request(FTP_STATS_KEY, None)
            threading.Thread(
                target=self.session, args=(connection,), name="ftp-session", daemon=True
            ).start()

    def session(self, connection: socket.socket) -> None:
        passive: Optional[socket.socket] = None  # listening data socket

        def reply(text: str) -> None:
            if self.verbose:
                print(f"ftp > {text}", file=sys.stderr, flush=True)
            connection.sendall(text.encode("latin-1") + b"\r\n")

        def open_passive() -> int:
            nonlocal passive
            if passive is not None:
                passive.close()
            passive = socket.create_server(("127.0.0.1", 0), backlog=1)
            passive.settimeout(self.DATA_ACCEPT_TIMEOUT_SECONDS)
            return passive.getsockname()[1]

        connection.settimeout(self.IDLE_TIMEOUT_SECONDS)
        try:
            with connection, connection.makefile("rb") as reader:
                reply("220 transferd test FTP responder")
                while True:
                    line = reader.readline(4096)
                    if not line:
                        return
                    command, _, _argument = line.decode("latin-1").strip().partition(" ")
                    verb = command.upper()
                    if self.verbose:
                        print(f"ftp < {line.decode('latin-1').strip()}", file=sys.stderr, flush=True)
                    if verb in ("USER", "PASS"):
                        reply("230 Logged in")
                    elif verb == "PWD":
                        reply('257 "/" is the current directory')
                    elif verb == "CWD":
                        reply("250 Directory changed")
                    elif verb == "TYPE":
                        reply("200 Type set")
                    elif verb == "SIZE":
                        reply(f"213 {len(FTP_CONTENT)}")
                    elif verb == "EPSV":
                        reply(f"229 Entering Extended Passive Mode (|||{open_passive()}|)")
                    elif verb == "PASV":
                        port = open_passive()
                        reply(f"227 Entering Passive Mode (127,0,0,1,{port >> 8},{port & 0xFF})")
                    elif verb == "RETR":
                        if passive is None:
                            reply("425 Use PASV or EPSV first")
                            continue
                        reply(f"150 Opening BINARY mode data connection ({len(FTP_CONTENT)} bytes)")
                        try:
                            data, _ = passive.accept()
                        except OSError:
                            reply("425 No data connection")
                            continue
                        finally:
                            passive.close()
                            passive = None
                        with data:
                            data.sendall(FTP_CONTENT)
                        self.registry.add_bytes(FTP_STATS_KEY, len(FTP_CONTENT))
                        reply("226 Transfer complete")
                    elif verb == "QUIT":
                        reply("221 Goodbye")
                        return
                    else:
                        reply("502 Command not implemented")
        except OSError:
            pass  # the client went away or was idle too long
        finally:
            if passive is not None:
                passive.close()


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


TUS_PREFIX = "/_tus/"


@dataclass
class TusUpload:
    id: str
    key: str
    length: int
    metadata: str
    data: bytearray = field(default_factory=bytearray)
    deleted: bool = False
    lost: bool = False
    # Held by a PATCH while it runs (a request cut by a killed client included, until its
    # bytes are in): HEAD waits for it, another PATCH too, as tusd's upload locks do.
    busy: threading.Lock = field(default_factory=threading.Lock)

    @property
    def offset(self) -> int:
        return len(self.data)


class TusUploads:
    """The uploads of the /_tus/ endpoint and, per key, their faults and counts.

    Faults (set at creation with the creation URL's query, or later with
    GET /_tus/set?key=K&NAME=VALUE; an empty VALUE removes one):
    checksum=1 (offer the checksum extension, sha1 and md5), mismatch_once=1
    (answer the first checksummed PATCH 460), lose_after=N (after N PATCH body
    bytes in all, the upload is lost: HEAD and PATCH answer lose_status, 404 by
    default), head_offset_delta=D and patch_offset_delta=D (add D to the offset
    HEAD or PATCH reports), rate=BYTES (read PATCH bodies at most this fast),
    no_options=1 (answer OPTIONS 405)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.uploads: dict[str, TusUpload] = {}
        self.fault_sets: dict[str, dict[str, str]] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.latest: dict[str, str] = {}
        self.next_id = 0

    def faults(self, key: str) -> dict[str, str]:
        with self.lock:
            return dict(self.fault_sets.get(key, {}))

    def set_faults(self, key: str, values: dict[str, str]) -> dict[str, str]:
        with self.lock:
            faults = self.fault_sets.setdefault(key, {})
            for name, value in values.items():
                if value:
                    faults[name] = value
                else:
                    faults.pop(name, None)
            return dict(faults)

    def key_stats(self, key: str) -> dict[str, int]:
        with self.lock:
            return self.counts.setdefault(key, {name: 0 for name in (
                "creations", "received", "patches", "conflicts", "checksums", "mismatches", "heads", "deleted", "lost")})

    def create(self, key: str, length: int, metadata: str) -> TusUpload:
        stats = self.key_stats(key)
        with self.lock:
            self.next_id += 1
            upload = TusUpload(id=f"u{self.next_id}-{os.urandom(6).hex()}", key=key, length=length, metadata=metadata)
            self.uploads[upload.id] = upload
            self.latest[key] = upload.id
            stats["creations"] += 1
            return upload

    def find(self, upload_id: str) -> Optional[TusUpload]:
        with self.lock:
            return self.uploads.get(upload_id)

    def stats(self, key: str) -> dict[str, object]:
        stats = self.key_stats(key)
        with self.lock:
            result: dict[str, object] = dict(stats)
            upload = self.uploads.get(self.latest.get(key, ""))
            if upload is not None:
                result.update(offset=upload.offset, length=upload.length, metadata=upload.metadata,
                              sha256=hashlib.sha256(bytes(upload.data)).hexdigest(), id=upload.id)
            return result


IETF_PREFIX = "/_ietf/"
# draft-ietf-httpbis-resumable-upload-12, "Draft Version Identification".
IETF_INTEROP_VERSION = 8


def sf_integer(text: Optional[str]) -> Optional[int]:
    """A structured-field Integer that is not negative (parameters ignored), else None."""
    if text is None:
        return None
    item = text.split(";", 1)[0].strip()
    if not item or len(item) > 15 or not item.isascii() or not item.isdigit():
        return None
    return int(item)


def sf_boolean(text: Optional[str]) -> Optional[bool]:
    if text is None:
        return None
    item = text.split(";", 1)[0].strip()
    return {"?1": True, "?0": False}.get(item)


def ietf_limits(faults: dict[str, str]) -> str:
    """The Upload-Limit value the faults configure ("" for none)."""
    members = []
    for name, fault in (("max-size", "max_size"), ("min-size", "min_size"), ("max-append-size", "max_append"),
                        ("min-append-size", "min_append"), ("max-age", "max_age")):
        if faults.get(fault):
            members.append(f"{name}={int(faults[fault])}")
    return ", ".join(members)


def ietf_result(upload: "IetfUpload") -> str:
    """The target's answer to a completed upload: what it holds."""
    return json.dumps({"id": upload.id, "size": len(upload.data),
                       "sha256": hashlib.sha256(bytes(upload.data)).hexdigest()}) + "\n"


@dataclass
class IetfUpload:
    id: str
    key: str
    length: Optional[int]
    data: bytearray = field(default_factory=bytearray)
    complete: bool = False
    deleted: bool = False
    lost: bool = False
    creation_received: int = 0
    # Held by a request that carries bytes while it runs (a request cut by a killed client
    # included, until its bytes are in): HEAD and another append wait for it.
    busy: threading.Lock = field(default_factory=threading.Lock)

    @property
    def offset(self) -> int:
        return len(self.data)


class IetfUploads:
    """The uploads of the /_ietf/ endpoint and, per key, their faults and counts.

    Faults (set with the query of the target URL, POST or OPTIONS /_ietf/upload?key=K&..., or
    later with GET /_ietf/set?key=K&NAME=VALUE; an empty VALUE removes one): no_interim=1 (send
    no 104), interop=N (the interop version the server speaks, default 8), cut_after=N (once,
    drop the connection when the key's received bytes reach N, keeping them), lose_after=N (after
    N body bytes in all, the upload is lost: HEAD and PATCH answer lose_status, 404 by default),
    forget=1 on /_ietf/set (lose the key's latest upload now), head_offset_delta=D and
    patch_offset_delta=D (lie about the offset), max_size, min_size, max_append, min_append,
    max_age (announced in Upload-Limit; max_size and max_append enforced with 413), quiet_options=1
    (OPTIONS announces no Upload-Limit: the client learns it from the 104), rate=BYTES (read bodies
    at most this fast)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.uploads: dict[str, IetfUpload] = {}
        self.fault_sets: dict[str, dict[str, str]] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.latest: dict[str, str] = {}
        self.next_id = 0

    def faults(self, key: str) -> dict[str, str]:
        with self.lock:
            return dict(self.fault_sets.get(key, {}))

    def set_faults(self, key: str, values: dict[str, str]) -> dict[str, str]:
        with self.lock:
            faults = self.fault_sets.setdefault(key, {})
            for name, value in values.items():
                if value:
                    faults[name] = value
                else:
                    faults.pop(name, None)
            return dict(faults)

    def key_stats(self, key: str) -> dict[str, int]:
        with self.lock:
            return self.counts.setdefault(key, {name: 0 for name in (
                "creations", "empty_creations", "plain", "interim", "requests", "appends", "received", "conflicts",
                "heads", "deleted", "lost", "cuts", "too_large", "credentials")})

    def create(self, key: str, length: Optional[int]) -> IetfUpload:
        stats = self.key_stats(key)
        with self.lock:
            self.next_id += 1
            upload = IetfUpload(id=f"r{self.next_id}-{os.urandom(6).hex()}", key=key, length=length)
            self.uploads[upload.id] = upload
            self.latest[key] = upload.id
            stats["creations"] += 1
            return upload

    def find(self, upload_id: str) -> Optional[IetfUpload]:
        with self.lock:
            return self.uploads.get(upload_id)

    def forget_latest(self, key: str) -> None:
        stats = self.key_stats(key)
        with self.lock:
            upload = self.uploads.get(self.latest.get(key, ""))
            if upload is not None:
                upload.lost = True
                stats["lost"] += 1

    def stats(self, key: str) -> dict[str, object]:
        stats = self.key_stats(key)
        with self.lock:
            result: dict[str, object] = dict(stats)
            upload = self.uploads.get(self.latest.get(key, ""))
            if upload is not None:
                result.update(offset=upload.offset, length=upload.length, complete=upload.complete,
                              creation_received=upload.creation_received,
                              sha256=hashlib.sha256(bytes(upload.data)).hexdigest(), id=upload.id)
            return result


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, root: str, verbose: bool) -> None:
        self.root = os.path.realpath(root)
        self.verbose = verbose
        self.registry = StateRegistry()
        self.tus = TusUploads()
        self.ietf = IetfUploads()
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
    parser.add_argument("--ftp-port", type=int, default=0,
                        help="port of the FTP responder (0 = any free port)")
    parser.add_argument("--ftp-port-file",
                        help="write the FTP responder's port to this file (before --port-file)")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    if not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is not a directory")

    server = FaultServer(args.port, args.root, args.verbose)
    ftp = FtpResponder(args.ftp_port, server.registry, args.verbose)
    # Written before the HTTP port file: once that exists, this one does too.
    if args.ftp_port_file:
        serving.write_port_file(args.ftp_port_file, ftp.port)
    ftp.start()
    banner = (
        f"fault server on 127.0.0.1:{server.server_address[1]}, root {server.root}, "
        f"FTP responder on 127.0.0.1:{ftp.port}"
        if args.verbose
        else None
    )
    try:
        return serving.serve(server, args.port_file, banner)
    finally:
        ftp.close()


if __name__ == "__main__":
    sys.exit(main())
