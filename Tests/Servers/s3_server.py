#!/usr/bin/env python3
"""moto's S3-compatible server, with SigV4 checks on and a request log.

This runs the same WSGI application as ``python3 -m moto.server`` (moto's
``DomainDispatcherApplication``, on werkzeug's threaded server) with these
additions for the transferd upload tests:

* **Authentication is enforced.** moto checks no signatures by default; here
  ``moto.settings.INITIAL_NO_AUTH_ACTION_COUNT`` is set to 0 (what the
  ``INITIAL_NO_AUTH_ACTION_COUNT=0`` environment variable does), so every S3
  request must be SigV4-signed by a key that moto's IAM knows. moto can only
  create random IAM keys, so an IAM user ``transferd-test`` with an allow-all
  inline policy is created in-process and its key is given the fixed id and
  secret from ``--access-key`` / ``--secret-key`` (default testing/testing).
  ``POST /moto-api/reset`` wipes IAM too; the user is then created again.
* **The signature is checked against the request as sent** (see
  patch_signature_check): moto's own rebuild of the request refused correct
  signatures for encoded paths and queries and for empty bodies.
* **Answers where moto would fail with 500**: no Authorization header gives
  403 AccessDenied, a non-SigV4 one 400 AuthorizationHeaderMalformed, and
  UploadPart to an unknown upload id 404 NoSuchUpload.
* **A request log.** One line per request is appended to ``--request-log``
  (and flushed) before the response is sent, so when a client has the
  response, the line is in the file::

      OPERATION METHOD STATUS CONTENT_LENGTH ACCESS_KEY TARGET

  OPERATION is derived here from the method, path and query (path-style
  URLs); see Tests/Servers/README.md.
* **``--port 0`` and ``--port-file``**, as for fault_server.py.

Usage:
    python3 s3_server.py --port 0 --port-file FILE --request-log FILE
        [--access-key testing] [--secret-key testing] [--no-auth] [--verbose]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys
import threading
from typing import Any, Callable, Iterable, Optional
from urllib.parse import parse_qsl, unquote

import serving  # Tests/Servers/serving.py: port file and serve loop

SEED_USER = "transferd-test"
SEED_POLICY_NAME = "transferd-test-allow-all"
SEED_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}
# arn:aws:iam::123456789012:role/transferd-test-role (moto's default account).
SEED_ROLE = "transferd-test-role"
SEED_TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": "*", "Federated": "*"},
            "Action": ["sts:AssumeRole", "sts:AssumeRoleWithWebIdentity"],
        }
    ],
}


# ---------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------


def account_id() -> str:
    from moto.core.models import DEFAULT_ACCOUNT_ID

    return os.environ.get("MOTO_ACCOUNT_ID", DEFAULT_ACCOUNT_ID)


def seed_credentials(access_key: str, secret_key: str) -> None:
    """Give moto's IAM a user whose access key is (access_key, secret_key)."""
    from moto.iam.models import iam_backends

    backend = iam_backends[account_id()]["aws"]
    if SEED_USER not in backend.users:
        backend.create_user(region_name="us-east-1", user_name=SEED_USER)
    backend.put_user_policy(SEED_USER, SEED_POLICY_NAME, json.dumps(SEED_POLICY))
    # A role anyone may assume (STS AssumeRole, AssumeRoleWithWebIdentity) with the
    # same allow-all policy: moto accepts the keys STS hands out for a role it knows.
    if not any(role.name == SEED_ROLE for role in backend.roles.values()):
        backend.create_role(
            role_name=SEED_ROLE,
            assume_role_policy_document=json.dumps(SEED_TRUST_POLICY),
            path="/",
            permissions_boundary=None,
            description="transferd tests",
            tags=[],
            max_session_duration="3600",
            linked_service=None,
        )
    backend.put_role_policy(SEED_ROLE, SEED_POLICY_NAME, json.dumps(SEED_POLICY))
    if access_key in backend.access_keys:
        key = backend.access_keys[access_key]
        key.secret_access_key = secret_key
        return
    key = backend.create_access_key(SEED_USER)
    generated = key.access_key_id
    key.access_key_id = access_key
    key.secret_access_key = secret_key
    backend.access_keys.pop(generated, None)
    backend.access_keys[access_key] = key


# The request target as received, for the signature check of the request
# being handled on this thread (werkzeug runs each request on its own thread).
_current = threading.local()


def split_query(query: str) -> list[tuple[str, str]]:
    """Decode a query into (name, value) pairs; '+' is kept, not a space."""
    pairs = []
    for item in query.split("&"):
        if item:
            name, _, value = item.partition("=")
            pairs.append((unquote(name), unquote(value)))
    return pairs


def patch_signature_check() -> None:
    """Make moto verify S3 signatures against the request as sent.

    moto (5.2) rebuilds the request it verifies from the URL Flask gives it,
    in which percent-escapes are partly decoded (``%C3%A9`` -> ``é``,
    ``%2B`` -> ``+``, ``prefix=dir%2F`` -> ``prefix=dir/``), and it signs an
    empty body as the url-encoded form of its parsed parameters. So correct
    signatures were refused for keys outside [A-Za-z0-9._~/-] or an empty body
    without x-amz-content-sha256. Here the canonical URI is the path exactly
    as received (S3 does not normalise it), the canonical query is made from
    the received query by decoding each name and value and letting botocore
    encode and sort them (as AWS does), and an empty body is empty.
    """
    from botocore.awsrequest import AWSRequest
    from moto.iam.access_control import S3IAMRequest

    original = S3IAMRequest._create_aws_request

    def create_aws_request(self) -> AWSRequest:
        target = getattr(_current, "target", None)
        if target is None:
            return original(self)
        signed_headers = self._get_string_between(
            "SignedHeaders=", ",", self._headers["Authorization"]
        ).split(";")
        headers = self._create_headers_for_aws_request(signed_headers, self._headers)
        path, _, query = target.partition("?")
        body = self._body if isinstance(self._body, (bytes, str)) else b""
        request = AWSRequest(
            method=self._method,
            url=path,
            data=body or b"",
            headers=headers,
            params=split_query(query),
        )
        request.context["timestamp"] = headers["X-Amz-Date"]
        return request

    S3IAMRequest._create_aws_request = create_aws_request


def enable_authentication() -> None:
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0

    # moto (5.2) authenticates AssumeRoleWithWebIdentity too and fails with 500 without a
    # signature; AWS takes it unsigned. The middleware marks such a request (UNSIGNED_ACTIONS).
    original = ActionAuthenticatorMixin._authenticate_and_authorize_normal_action

    def authenticate(self, *args: Any, **kwargs: Any) -> None:
        if getattr(_current, "unsigned", False):
            return
        original(self, *args, **kwargs)

    ActionAuthenticatorMixin._authenticate_and_authorize_normal_action = authenticate


# ---------------------------------------------------------------------------
# Request log
# ---------------------------------------------------------------------------

# STS actions AWS takes without a signature (the token is the proof).
UNSIGNED_ACTIONS = {"AssumeRoleWithWebIdentity"}

# GET on a bucket with only these parameters is ListObjects (V1).
LIST_OBJECTS_PARAMETERS = {"prefix", "delimiter", "marker", "max-keys", "encoding-type"}


def s3_operation(method: str, path: str, query: dict[str, str], copy_source: bool) -> str:
    """Name the S3 operation of a path-style request, or "Other"."""
    if path.startswith("/moto-api/"):
        return "MotoApi"
    parts = path.lstrip("/").split("/", 1)
    bucket = parts[0]
    key = parts[1] if len(parts) > 1 else ""
    names = set(query)

    if not bucket:
        return "ListBuckets" if method == "GET" else "Other"

    if not key:
        if method == "PUT":
            return "CreateBucket" if not names else "Other"
        if method == "DELETE":
            return "DeleteBucket" if not names else "Other"
        if method == "HEAD":
            return "HeadBucket"
        if method == "POST":
            return "DeleteObjects" if "delete" in names else "Other"
        if method == "GET":
            if "uploads" in names:
                return "ListMultipartUploads"
            if "versions" in names:
                return "ListObjectVersions"
            if "location" in names:
                return "GetBucketLocation"
            if query.get("list-type") == "2":
                return "ListObjectsV2"
            if names <= LIST_OBJECTS_PARAMETERS:
                return "ListObjects"
        return "Other"

    if method == "PUT":
        if "partNumber" in names and "uploadId" in names:
            return "UploadPartCopy" if copy_source else "UploadPart"
        if "tagging" in names:
            return "PutObjectTagging"
        if "acl" in names:
            return "PutObjectAcl"
        if names - {"versionId"}:
            return "Other"
        return "CopyObject" if copy_source else "PutObject"
    if method == "POST":
        if "uploads" in names:
            return "CreateMultipartUpload"
        if "uploadId" in names:
            return "CompleteMultipartUpload"
        return "Other"
    if method == "DELETE":
        if "uploadId" in names:
            return "AbortMultipartUpload"
        if "tagging" in names:
            return "DeleteObjectTagging"
        return "DeleteObject"
    if method == "GET":
        if "uploadId" in names:
            return "ListParts"
        if "tagging" in names:
            return "GetObjectTagging"
        if "acl" in names:
            return "GetObjectAcl"
        if "attributes" in names:
            return "GetObjectAttributes"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject"
    return "Other"


def access_key_of(environ: dict[str, Any], query: dict[str, str]) -> str:
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    marker = "Credential="
    if marker in authorization:
        return authorization.split(marker, 1)[1].split("/", 1)[0] or "-"
    credential = query.get("X-Amz-Credential")
    if credential:
        return credential.split("/", 1)[0] or "-"
    return "-"


class RequestLog:
    def __init__(self, path: Optional[str]) -> None:
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None

    def write(self, line: str) -> None:
        if self._file is None:
            return
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class LoggingMiddleware:
    """Logs each request before its response goes out; re-seeds after reset."""

    def __init__(
        self, app: Callable, log: RequestLog, reseed: Callable[[], None], require_auth: bool
    ) -> None:
        self.app = app
        self.log = log
        self.reseed = reseed
        self.require_auth = require_auth

    @staticmethod
    def refuse(status: str, code: str, message: str, start_response: Callable) -> list[bytes]:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        ).encode()
        start_response(
            status,
            [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
        )
        return [body]

    @staticmethod
    def form_action(environ: dict[str, Any]) -> Optional[str]:
        """The Action of a form POST to / (STS, IAM), read and put back."""
        if environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO", "/") not in ("", "/"):
            return None
        if not environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
            return None
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length <= 0 or length > 1 << 20:
            return None
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)
        fields = dict(parse_qsl(body.decode("utf-8", "replace")))
        return fields.get("Action")

    def auth_problem(self, environ: dict[str, Any]) -> Optional[tuple[str, str, str]]:
        """Why moto could not check this request's signature, if it could not.

        moto answers 500 (a KeyError) to requests without an Authorization
        header, presigned URLs included, and to other schemes than SigV4.
        """
        if not self.require_auth or environ.get("PATH_INFO", "").startswith("/moto-api/"):
            return None
        authorization = environ.get("HTTP_AUTHORIZATION")
        if authorization is None:
            return (
                "403 Forbidden",
                "AccessDenied",
                "Access Denied (no Authorization header; presigned URLs are not supported here)",
            )
        if not authorization.startswith("AWS4-HMAC-SHA256 ") or not all(
            part in authorization for part in ("Credential=", "SignedHeaders=", "Signature=")
        ) or "HTTP_X_AMZ_DATE" not in environ:
            return (
                "400 Bad Request",
                "AuthorizationHeaderMalformed",
                "only AWS4-HMAC-SHA256 with Credential, SignedHeaders, Signature and X-Amz-Date",
            )
        return None

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "-")
        raw_path = environ.get("PATH_INFO", "/")
        query_string = environ.get("QUERY_STRING", "")
        target = environ.get("RAW_URI") or environ.get("REQUEST_URI")
        if not target:
            target = raw_path + ("?" + query_string if query_string else "")
        query = dict(parse_qsl(query_string, keep_blank_values=True))
        # PATH_INFO is already percent-decoded (WSGI); TARGET is as received.
        operation = s3_operation(method, raw_path, query, "HTTP_X_AMZ_COPY_SOURCE" in environ)
        _current.target = target
        length = environ.get("CONTENT_LENGTH") or "-"
        access_key = access_key_of(environ, query)
        logged = False

        def logging_start_response(status: str, headers: list, exc_info: Any = None):
            nonlocal logged
            if not logged:
                logged = True
                code = status.split(None, 1)[0]
                self.log.write(f"{operation} {method} {code} {length} {access_key} {target}")
            return start_response(status, headers, exc_info)

        action = self.form_action(environ)
        if action:
            operation = action
        _current.unsigned = action in UNSIGNED_ACTIONS and "HTTP_AUTHORIZATION" not in environ
        problem = None if _current.unsigned else self.auth_problem(environ)
        if problem is not None:
            return self.refuse(*problem, logging_start_response)
        try:
            result = self.app(environ, logging_start_response)
        except KeyError:
            # moto (5.2) looks an unknown or aborted uploadId up without a
            # check in UploadPart and fails with 500; S3 answers 404.
            if operation in ("UploadPart", "UploadPartCopy") and not logged:
                return self.refuse(
                    "404 Not Found",
                    "NoSuchUpload",
                    "The specified upload does not exist.",
                    logging_start_response,
                )
            if not logged:
                logged = True
                self.log.write(f"{operation} {method} 500 {length} {access_key} {target}")
            raise
        except Exception:
            if not logged:
                logged = True
                self.log.write(f"{operation} {method} 500 {length} {access_key} {target}")
            raise
        finally:
            _current.target = None
            _current.unsigned = False
        if method == "POST" and raw_path.rstrip("/") == "/moto-api/reset":
            self.reseed()
        return result


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--port-file", help="write the listening port to this file")
    parser.add_argument("--request-log", help="append one line per request to this file")
    parser.add_argument("--access-key", default="testing")
    parser.add_argument("--secret-key", default="testing")
    parser.add_argument("--no-auth", action="store_true", help="leave moto's auth checks off")
    parser.add_argument("--verbose", action="store_true", help="werkzeug's own request log on stderr")
    args = parser.parse_args(argv)

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

    def reseed() -> None:
        seed_credentials(args.access_key, args.secret_key)

    reseed()
    if not args.no_auth:
        patch_signature_check()
        enable_authentication()

    moto_app = DomainDispatcherApplication(create_backend_app)
    app = LoggingMiddleware(moto_app, RequestLog(args.request_log), reseed, not args.no_auth)
    server = make_server("127.0.0.1", args.port, app, threaded=True)
    return serving.serve(server, args.port_file, f"moto S3 server on http://127.0.0.1:{server.server_address[1]}")


if __name__ == "__main__":
    sys.exit(main())
