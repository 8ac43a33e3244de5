#!/usr/bin/env python3
"""An HTTP/1.1 server that receives multipart/form-data uploads and reports them.

``POST /form/KEY`` with a ``multipart/form-data`` body of any size is parsed as
a stream by python-multipart's ``MultipartParser`` (constant memory): file
parts are written to ``--root/KEY/`` while their SHA-256 is computed, plain
fields are kept in memory (up to ``--max-field-size`` bytes each). The answer
is JSON describing what arrived::

    {"status": 200, "outcome": "ok", "key": KEY,
     "fields": {name: value}, "field_list": [[name, value], ...],
     "files": [{"field", "filename", "content_type", "size", "sha256", "path",
                "index", "headers"}, ...],
     "request": {"framing", "content_length", "body_bytes", "content_type",
                 "expect"}}

``GET /_last/KEY`` returns the record of the last POST for KEY (the same JSON,
or the error record), ``GET /_reset?key=KEY`` forgets it (and deletes its
files; without ``key``, all), ``GET /_ready`` answers 204.

See Tests/Servers/README.md for the error statuses and what the parser accepts.

Usage:
    python3 form_server.py --root DIR [--port 0] [--port-file FILE]
        [--max-field-size BYTES] [--verbose]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO, Iterator, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

import serving  # Tests/Servers/serving.py: port file and serve loop

SERVER_NAME = "transferd-form-server"
READ_SIZE = 256 * 1024
KEY_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")
# Longest chunk-size line (with extensions) or trailer line accepted.
MAX_LINE = 8192


class Rejected(Exception):
    """The request can't be processed; answered with `status` and `message`."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


class Incomplete(Exception):
    """The client closed the connection (or timed out) before the body ended."""


# ---------------------------------------------------------------------------
# Request bodies
# ---------------------------------------------------------------------------


class Body:
    """The request body as a stream of pieces, framed by length or chunked."""

    def __init__(self, rfile: BinaryIO, length: Optional[int]) -> None:
        self.rfile = rfile
        self.length = length
        self.received = 0
        self.finished = False
        self._iterator = self._generate()

    def pieces(self) -> Iterator[bytes]:
        """The pieces not read yet (one iterator shared by all callers)."""
        return self._iterator

    def drain(self) -> None:
        """Read and discard whatever is left, so the connection can be reused."""
        for _ in self._iterator:
            pass

    def _generate(self) -> Iterator[bytes]:
        if self.length is not None:
            yield from self._by_length()
        else:
            yield from self._chunked()
        self.finished = True

    def _read_some(self, limit: int) -> bytes:
        try:
            data = self.rfile.read1(limit)
        except (OSError, socket.timeout) as error:
            raise Incomplete(f"reading the body failed: {error}") from None
        if not data:
            raise Incomplete(self._short_message())
        self.received += len(data)
        return data

    def _short_message(self) -> str:
        if self.length is not None:
            return f"connection closed after {self.received} of {self.length} body bytes"
        return f"connection closed after {self.received} body bytes, inside the chunked body"

    def _by_length(self) -> Iterator[bytes]:
        assert self.length is not None
        while not self.finished and self.received < self.length:
            yield self._read_some(min(READ_SIZE, self.length - self.received))

    def _line(self) -> bytes:
        try:
            line = self.rfile.readline(MAX_LINE + 1)
        except (OSError, socket.timeout) as error:
            raise Incomplete(f"reading the body failed: {error}") from None
        if not line:
            raise Incomplete(self._short_message())
        if len(line) > MAX_LINE or not line.endswith(b"\r\n"):
            raise Rejected(400, "malformed chunked body: line too long or not ended by CRLF", close=True)
        return line[:-2]

    def _chunked(self) -> Iterator[bytes]:
        while not self.finished:
            size_text = self._line().split(b";", 1)[0].strip()
            if not size_text or not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size_text):
                raise Rejected(400, f"malformed chunked body: bad chunk size {size_text[:40]!r}", close=True)
            size = int(size_text, 16)
            if size == 0:
                while self._line():  # trailer fields, up to the empty line
                    pass
                return
            remaining = size
            while remaining:
                data = self._read_some(min(READ_SIZE, remaining))
                remaining -= len(data)
                yield data
            if self._line() != b"":
                raise Rejected(400, "malformed chunked body: chunk data not followed by CRLF", close=True)


# ---------------------------------------------------------------------------
# Multipart
# ---------------------------------------------------------------------------


def parameter_names(value: str) -> list[str]:
    """Lower-cased names of the ;-separated parameters of a header value."""
    names: list[str] = []
    segment: list[str] = []
    quoted = escaped = False
    for char in value + ";":
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == ";":
            names.append("".join(segment).partition("=")[0].strip().lower())
            segment = []
            continue
        segment.append(char)
    return names[1:]


def text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class FormReceiver:
    """Callbacks for MultipartParser: stores files, collects fields."""

    def __init__(self, directory: str, prefix: str, max_field_size: int) -> None:
        self.directory = directory
        self.prefix = prefix
        self.max_field_size = max_field_size
        self.fields: list[list[str]] = []
        self.files: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.index = -1
        self._reset_part()

    def _reset_part(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.name: Optional[str] = None
        self.file: Optional[BinaryIO] = None
        self.entry: Optional[dict[str, Any]] = None
        self.digest = None
        self.value = bytearray()

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def on_part_begin(self) -> None:
        self._reset_part()
        self.index += 1

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers.append((bytes(self.header_name), bytes(self.header_value)))
        self.header_name = bytearray()
        self.header_value = bytearray()

    def _header(self, name: bytes) -> Optional[bytes]:
        for header_name, value in self.headers:
            if header_name.strip().lower() == name:
                return value.strip(b" \t")
        return None

    def on_headers_finished(self) -> None:
        part = f"part {self.index}"
        disposition = self._header(b"content-disposition")
        if disposition is None:
            raise Rejected(400, f"{part} has no Content-Disposition header")
        # python-multipart takes header values as latin-1 text; so the
        # parameters come back as the bytes that were sent.
        disposition_text = disposition.decode("latin-1")
        kind, options = parse_options_header(disposition_text)
        if kind != b"form-data":
            raise Rejected(400, f"{part}: Content-Disposition is {text(kind)!r}, not form-data")
        if b"name" not in options:
            raise Rejected(400, f"{part}: Content-Disposition has no name parameter")
        self.name = text(options[b"name"])
        names = parameter_names(disposition_text)
        if b"filename" not in options and "filename*" not in names:
            return
        content_type = self._header(b"content-type")
        self.entry = {
            "field": self.name,
            "filename": text(options[b"filename"]) if b"filename" in options else None,
            "content_type": text(content_type) if content_type is not None else None,
            "size": 0,
            "sha256": None,
            "path": None,
            "index": self.index,
            "headers": [[text(name), text(value)] for name, value in self.headers],
        }
        path = os.path.join(self.directory, f"{self.prefix}-part{self.index}")
        self.file = open(path, "wb")
        self.paths.append(path)
        self.entry["path"] = path
        self.digest = hashlib.sha256()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self.file is not None:
            self.file.write(piece)
            self.digest.update(piece)
            self.entry["size"] += len(piece)
        else:
            if len(self.value) + len(piece) > self.max_field_size:
                raise Rejected(
                    400,
                    f"part {self.index} (field {self.name!r}) is larger than "
                    f"{self.max_field_size} bytes; send it as a file (with a filename)",
                )
            self.value += piece

    def on_part_end(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
            self.entry["sha256"] = self.digest.hexdigest()
            self.files.append(self.entry)
        elif self.name is not None:
            self.fields.append([self.name, text(bytes(self.value))])

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        for path in self.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


class FormServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, port: int, root: str, max_field_size: int, verbose: bool) -> None:
        self.root = os.path.realpath(root)
        self.max_field_size = max_field_size
        self.verbose = verbose
        self.lock = threading.Lock()
        self.records: dict[str, dict[str, Any]] = {}
        self.sequence = 0
        super().__init__(("127.0.0.1", port), FormRequestHandler)

    def next_sequence(self) -> int:
        with self.lock:
            self.sequence += 1
            return self.sequence

    def record(self, key: str, record: dict[str, Any]) -> None:
        """Make `record` the last one for `key`; delete the files of the one before."""
        with self.lock:
            previous = self.records.get(key)
            self.records[key] = record
        if previous is not None:
            delete_files(previous)

    def forget(self, key: Optional[str]) -> None:
        with self.lock:
            if key is None:
                dropped = list(self.records.values())
                self.records.clear()
            else:
                dropped = [self.records.pop(key)] if key in self.records else []
        for record in dropped:
            delete_files(record)

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)) and not self.verbose:
            return
        super().handle_error(request, client_address)


def delete_files(record: dict[str, Any]) -> None:
    for entry in record.get("files", []):
        try:
            os.unlink(entry["path"])
        except (FileNotFoundError, KeyError, TypeError):
            pass


class FormRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = SERVER_NAME
    sys_version = ""
    timeout = 120  # seconds a client may stay silent mid-request
    server: FormServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if self.server.verbose:
            super().log_message(format, *args)

    def handle_expect_100(self) -> bool:
        # Sent by do_POST once the request headers have been accepted, so a
        # request that will be refused gets its final status instead.
        return True

    # -- responses ----------------------------------------------------------

    def send_json(self, status: int, payload: Any, close: bool = False) -> None:
        body = (json.dumps(payload, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    # -- GET ----------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path == "/_ready":
            self.send_empty(204)
        elif path.startswith("/_last/"):
            key = path[len("/_last/"):]
            with self.server.lock:
                record = self.server.records.get(key)
            if record is None:
                self.send_json(404, {"error": f"no POST /form/{key} recorded"})
            else:
                self.send_json(200, record)
        elif path == "/_reset":
            key = dict(parse_qsl(parts.query)).get("key")
            self.server.forget(key)
            self.send_json(200, {"reset": key if key is not None else "all"})
        else:
            self.send_json(404, {"error": "not found"})

    do_HEAD = do_GET

    # -- POST ---------------------------------------------------------------

    def request_body(self) -> tuple[Body, str]:
        """The body's framing from the headers, or Rejected (connection closed)."""
        transfer_encoding = self.headers.get_all("Transfer-Encoding") or []
        lengths = self.headers.get_all("Content-Length") or []
        if transfer_encoding:
            if lengths:
                raise Rejected(400, "both Transfer-Encoding and Content-Length", close=True)
            codings = [c.strip().lower() for v in transfer_encoding for c in v.split(",")]
            if codings != ["chunked"]:
                raise Rejected(501, f"unsupported Transfer-Encoding {', '.join(codings)}", close=True)
            return Body(self.rfile, None), "chunked"
        if not lengths:
            raise Rejected(411, "Content-Length (or chunked Transfer-Encoding) required", close=True)
        values = {v.strip() for value in lengths for v in value.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise Rejected(400, f"invalid Content-Length {', '.join(lengths)}", close=True)
        return Body(self.rfile, int(next(iter(values)))), "content-length"

    def do_POST(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = dict(parse_qsl(parts.query))
        try:
            body, framing = self.request_body()
        except Rejected as rejected:
            self.send_json(rejected.status, {"status": rejected.status, "error": rejected.message}, close=True)
            return

        expect_continue = (self.headers.get("Expect") or "").strip().lower() == "100-continue"
        key = path[len("/form/"):] if path.startswith("/form/") else None
        info = {
            "framing": framing,
            "content_length": body.length,
            "body_bytes": 0,
            "content_type": self.headers.get("Content-Type"),
            "expect": self.headers.get("Expect"),
        }
        try:
            if key is None:
                raise Rejected(404, "POST only to /form/KEY")
            if not KEY_PATTERN.fullmatch(key) or key in (".", ".."):
                raise Rejected(400, "KEY must be 1-128 characters from A-Z a-z 0-9 . _ -")
            if framing == "chunked" and query.get("require_length") == "1":
                raise Rejected(411, "chunked body refused (require_length=1)")
            content_type, parameters = parse_options_header(self.headers.get("Content-Type", ""))
            if content_type != b"multipart/form-data":
                raise Rejected(415, f"Content-Type must be multipart/form-data, not {text(content_type)!r}")
            boundary = parameters.get(b"boundary", b"")
            if not boundary:
                raise Rejected(400, "Content-Type has no boundary parameter")
        except Rejected as rejected:
            self.refuse_before_body(rejected, body, expect_continue, key, info)
            return

        if expect_continue:
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        self.receive_form(key, boundary, body, info)

    def refuse_before_body(
        self, rejected: Rejected, body: Body, expect_continue: bool,
        key: Optional[str], info: dict[str, Any],
    ) -> None:
        """Answer a request refused on its headers alone.

        A client waiting for 100 Continue has not sent the body: answer at
        once and close. Otherwise the body is on its way: read and discard it
        first, so the client is not reset while sending, and keep the
        connection. The record for a valid KEY is stored before the answer.
        """
        close = expect_continue or rejected.close
        if not close:
            try:
                body.drain()
            except Rejected as framing:
                rejected, close = framing, True
            except Incomplete:
                self.close_connection = True
                return
        record = {"status": rejected.status, "outcome": "rejected", "error": rejected.message}
        if key is not None and KEY_PATTERN.fullmatch(key) and key not in (".", ".."):
            info["body_bytes"] = body.received
            record.update({"key": key, "request": info})
            self.server.record(key, record)
        self.send_json(rejected.status, record, close=close)

    def receive_form(self, key: str, boundary: bytes, body: Body, info: dict[str, Any]) -> None:
        directory = os.path.join(self.server.root, key)
        os.makedirs(directory, exist_ok=True)
        receiver = FormReceiver(directory, f"req{self.server.next_sequence()}", self.server.max_field_size)
        base = {"key": key, "request": info}
        try:
            try:
                parser = MultipartParser(boundary, receiver.callbacks())
                for piece in body.pieces():
                    parser.write(piece)
                if parser.state != MultipartState.END:
                    raise Rejected(400, f"body ended before the closing boundary (parser state {parser.state.name})")
            except FormParserError as error:
                raise Rejected(400, f"malformed multipart body: {error}") from None
        except Rejected as rejected:
            receiver.discard()
            if not rejected.close:
                try:
                    body.drain()
                except Rejected as framing:
                    rejected = framing
                except Incomplete as incomplete:
                    info["body_bytes"] = body.received
                    self.server.record(key, {"status": None, "outcome": "aborted", "error": str(incomplete), **base})
                    self.close_connection = True
                    return
            info["body_bytes"] = body.received
            record = {"status": rejected.status, "outcome": "rejected", "error": rejected.message, **base}
            self.server.record(key, record)
            self.send_json(rejected.status, record, close=rejected.close)
            return
        except Incomplete as incomplete:
            receiver.discard()
            info["body_bytes"] = body.received
            self.server.record(key, {"status": None, "outcome": "aborted", "error": str(incomplete), **base})
            self.close_connection = True
            return

        info["body_bytes"] = body.received
        record = {
            "status": 200,
            "outcome": "ok",
            **base,
            "fields": {name: value for name, value in receiver.fields},
            "field_list": receiver.fields,
            "files": receiver.files,
        }
        self.server.record(key, record)
        self.send_json(200, record)

    def do_PUT(self) -> None:  # noqa: N802
        self.send_json(405, {"error": "method not allowed"}, close=True)

    do_DELETE = do_PATCH = do_OPTIONS = do_PUT


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="directory for received files")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--port-file", help="write the listening port to this file")
    parser.add_argument(
        "--max-field-size", type=int, default=1024 * 1024,
        help="largest non-file part kept in memory (default 1 MiB)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    # python-multipart logs each parse error; the 400 answer carries it.
    logging.getLogger("python_multipart").setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    os.makedirs(args.root, exist_ok=True)
    server = FormServer(args.port, args.root, args.max_field_size, args.verbose)
    banner = f"form server on 127.0.0.1:{server.server_address[1]}, root {server.root}" if args.verbose else None
    return serving.serve(server, args.port_file, banner)


if __name__ == "__main__":
    sys.exit(main())
