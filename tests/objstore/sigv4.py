"""Server-side AWS Signature Version 4 verification (header authorization) for the S3 stand-in.

Written from the AWS documentation ("Authenticating Requests: Using the Authorization Header"),
independently of CLIO's C++ signer; standin_selftest.py checks it against requests signed by
botocore. Standard library only.
"""

import hashlib
import hmac
import re
import urllib.parse
from datetime import datetime, timezone

UNSIGNED = "UNSIGNED-PAYLOAD"
MAX_SKEW_S = 15 * 60

_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request,\s*"
    r"SignedHeaders=([a-z0-9;\-]+),\s*Signature=([0-9a-f]{64})$")


class AuthError(Exception):
    """An S3 error code and message: the caller answers 403 (or 400) with them."""

    def __init__(self, code, message, status=403):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def _encode(s, keep_slash):
    safe = "-_.~/" if keep_slash else "-_.~"
    return urllib.parse.quote(s, safe=safe)


def canonical_query(raw):
    params = []
    for part in raw.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        params.append((_encode(urllib.parse.unquote(name), False),
                       _encode(urllib.parse.unquote(value), False)))
    params.sort()
    return "&".join(f"{n}={v}" for n, v in params)


def _header_value(v):
    return " ".join(v.strip().split())


def signing_key(secret, date, region, service):
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def verify(method, raw_target, headers, body, secrets, region="us-east-1", now=None):
    """Checks the Authorization header of a request.

    headers: a case-insensitive mapping (email.message.Message or dict with lower-case keys)
    secrets: {access_key: secret_key}
    region: the region this server is in; the credential scope must name it and service s3
    Returns the access key on success, raises AuthError otherwise."""
    auth = headers.get("Authorization")
    if not auth:
        raise AuthError("AccessDenied", "anonymous requests are not allowed")
    m = _AUTH_RE.match(auth.strip())
    if not m:
        raise AuthError("AuthorizationHeaderMalformed", f"cannot parse Authorization: {auth}",
                        400)
    access_key, date, scope_region, service, signed, signature = m.groups()
    if scope_region != region or service != "s3":
        raise AuthError("AuthorizationHeaderMalformed",
                        f"the credential scope names {scope_region}/{service}; this is "
                        f"{region}/s3", 400)
    if access_key not in secrets:
        raise AuthError("InvalidAccessKeyId",
                        f"the access key '{access_key}' does not exist in our records")
    signed_names = signed.split(";")
    if "host" not in signed_names:
        raise AuthError("AccessDenied", "the host header must be signed")
    if signed_names != sorted(signed_names):
        raise AuthError("SignatureDoesNotMatch", "SignedHeaders are not sorted")
    amz_date = headers.get("x-amz-date")
    if not amz_date or not amz_date.startswith(date):
        raise AuthError("AccessDenied", "x-amz-date is missing or disagrees with the credential")
    try:
        when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        raise AuthError("AccessDenied", f"bad x-amz-date '{amz_date}'")
    now = now or datetime.now(timezone.utc)
    if abs((now - when).total_seconds()) > MAX_SKEW_S:
        raise AuthError("RequestTimeTooSkewed", "the request time is too far from the server's")
    payload = headers.get("x-amz-content-sha256")
    if payload is None:
        raise AuthError("InvalidRequest", "x-amz-content-sha256 is required", 400)
    if payload != UNSIGNED and payload != hashlib.sha256(body).hexdigest():
        raise AuthError("XAmzContentSHA256Mismatch",
                        "the provided x-amz-content-sha256 does not match the body", 400)
    if "x-amz-content-sha256" not in signed_names:
        raise AuthError("AccessDenied", "x-amz-content-sha256 must be signed")
    canonical_headers = ""
    for name in signed_names:
        value = headers.get(name)
        if value is None:
            raise AuthError("SignatureDoesNotMatch", f"signed header '{name}' is missing")
        canonical_headers += f"{name}:{_header_value(value)}\n"
    # The canonical URI is the path as S3 sees it (decoded), encoded again: a client that sent
    # a character unencoded that S3 would encode has signed something else.
    path, _, query = raw_target.partition("?")
    path = _encode(urllib.parse.unquote(path), True)
    canonical_request = "\n".join([method, path, canonical_query(query), canonical_headers,
                                   signed, payload])
    scope = f"{date}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                                hashlib.sha256(canonical_request.encode()).hexdigest()])
    want = hmac.new(signing_key(secrets[access_key], date, region, service),
                    string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature):
        raise AuthError("SignatureDoesNotMatch",
                        "the request signature we calculated does not match the signature you "
                        "provided; canonical request was:\n" + canonical_request)
    return access_key
