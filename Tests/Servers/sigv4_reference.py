#!/usr/bin/env python3
"""Sign one request with botocore's SigV4 signer, as a reference for tests.

Reads a JSON object on stdin::

    {"method": "GET", "url": "https://host/path?query",
     "headers": {"Name": "value", ...}        (or [["Name", "value"], ...]),
     "body_sha256": "<hex>" | "UNSIGNED-PAYLOAD",
     "access_key": "...", "secret_key": "...", "session_token": "..." (optional),
     "region": "us-east-1", "service": "s3", "timestamp": "20150830T123600Z"}

and prints a JSON object::

    {"authorization", "x-amz-date", "x-amz-content-sha256",
     "x-amz-security-token", "signed_headers", "signature",
     "canonical_request", "string_to_sign", "signer", "botocore_version"}

Header values that botocore did not set are null. The signer is
``botocore.auth.S3SigV4Auth`` when service is "s3" (signs
x-amz-content-sha256, which it sets to body_sha256; the path is used exactly
as given) and ``botocore.auth.SigV4Auth`` otherwise (path normalised and
encoded again; x-amz-content-sha256 is only signed if given in headers).
botocore's clock is fixed to ``timestamp``, and the payload hash is
body_sha256 instead of a hash of a body (no body is given).

botocore uses the URL as given: the query string is split at '&', sorted and
used without encoding it again, so give it already encoded (RFC 3986,
unreserved characters bare), as botocore's own serializers do. The Host header
comes from the URL (default port left out) unless given. botocore never signs
user-agent, expect, transfer-encoding, connection, keep-alive, te, trailer,
upgrade, proxy-* and x-amzn-trace-id. A Date header makes botocore sign Date
(rewritten from the timestamp) instead of adding X-Amz-Date.

Exit status: 0 on success, 2 on bad input.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any
from unittest import mock

import botocore
import botocore.auth
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

REQUIRED = ("method", "url", "body_sha256", "access_key", "secret_key", "region", "service", "timestamp")


def make_signer(base: type, payload_hash: str) -> Any:
    """A subclass of `base` that uses payload_hash and records its steps."""

    class ReferenceSigner(base):  # type: ignore[misc, valid-type]
        recorded: dict[str, str] = {}

        def payload(self, request: AWSRequest) -> str:
            return payload_hash

        def canonical_request(self, request: AWSRequest) -> str:
            result = super().canonical_request(request)
            self.recorded["canonical_request"] = result
            return result

        def string_to_sign(self, request: AWSRequest, canonical_request: str) -> str:
            result = super().string_to_sign(request, canonical_request)
            self.recorded["string_to_sign"] = result
            return result

        def signature(self, string_to_sign: str, request: AWSRequest) -> str:
            result = super().signature(string_to_sign, request)
            self.recorded["signature"] = result
            return result

    ReferenceSigner.__name__ = f"Reference{base.__name__}"
    return ReferenceSigner


def header_pairs(headers: Any) -> list[tuple[str, str]]:
    if headers is None:
        return []
    if isinstance(headers, dict):
        return [(str(name), str(value)) for name, value in headers.items()]
    if isinstance(headers, list) and all(isinstance(pair, list) and len(pair) == 2 for pair in headers):
        return [(str(name), str(value)) for name, value in headers]
    raise ValueError("headers must be an object or a list of [name, value] pairs")


def sign(spec: dict[str, Any]) -> dict[str, Any]:
    missing = [name for name in REQUIRED if name not in spec]
    if missing:
        raise ValueError(f"missing fields: {', '.join(missing)}")
    try:
        moment = datetime.datetime.strptime(spec["timestamp"], "%Y%m%dT%H%M%SZ")
    except (TypeError, ValueError):
        raise ValueError("timestamp must look like 20150830T123600Z") from None

    base = S3SigV4Auth if spec["service"] == "s3" else SigV4Auth
    signer_class = make_signer(base, spec["body_sha256"])
    credentials = Credentials(spec["access_key"], spec["secret_key"], spec.get("session_token"))
    signer = signer_class(credentials, spec["service"], spec["region"])

    request = AWSRequest(method=spec["method"], url=spec["url"])
    for name, value in header_pairs(spec.get("headers")):
        request.headers[name] = value  # HTTPMessage: repeated names are kept

    if not hasattr(botocore.auth, "get_current_datetime"):
        raise RuntimeError("this botocore has no botocore.auth.get_current_datetime to fix the clock")
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=moment):
        signer.add_auth(request)

    authorization = request.headers.get("Authorization")
    signed_headers = None
    if authorization and "SignedHeaders=" in authorization:
        signed_headers = authorization.split("SignedHeaders=", 1)[1].split(",", 1)[0]
    return {
        "authorization": authorization,
        "x-amz-date": request.headers.get("X-Amz-Date"),
        "x-amz-content-sha256": request.headers.get("X-Amz-Content-SHA256"),
        "x-amz-security-token": request.headers.get("X-Amz-Security-Token"),
        "signed_headers": signed_headers,
        "signature": signer.recorded.get("signature"),
        "canonical_request": signer.recorded.get("canonical_request"),
        "string_to_sign": signer.recorded.get("string_to_sign"),
        "signer": f"botocore.auth.{base.__name__}",
        "botocore_version": botocore.__version__,
    }


def main() -> int:
    try:
        spec = json.load(sys.stdin)
        if not isinstance(spec, dict):
            raise ValueError("input must be a JSON object")
        result = sign(spec)
    except (ValueError, json.JSONDecodeError) as error:
        print(f"sigv4_reference: {error}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
