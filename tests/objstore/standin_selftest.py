#!/usr/bin/python3
"""Checks the object-store stand-ins themselves, with clients that are not CLIO's: requests
signed by botocore (python3-botocore) must be accepted by s3_server.py, and every way a request
can be wrong must be refused with the right S3 error; the GCS stand-in's bearer and md5 checks;
every fault kind; the admin API. Run by ctest (objstore_standin_selftest).
"""

import base64
import hashlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HERE = os.path.dirname(os.path.abspath(__file__))
KEY, SECRET, TOKEN = "SELFTESTKEY", "self/test+secret", "selftest-token"
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def start(script, args, tmp):
    port_file = tempfile.mktemp(prefix=script, suffix=".port", dir=tmp)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, script), "--port", "0",
                             "--port-file", port_file] + args)
    for _ in range(600):  # readiness: the port file appears once the socket listens
        if os.path.exists(port_file):
            with open(port_file) as f:
                return proc, int(f.read())
        if proc.poll() is not None:
            sys.exit(f"{script} exited at start with {proc.returncode}")
        time.sleep(0.05)
    sys.exit(f"{script} wrote no port file")


class Conn:
    def __init__(self, port):
        self.port = port
        self.region = "us-east-1"
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def raw(self, method, target, body=b"", headers=None):
        try:
            self.c.request(method, target, body=body, headers=headers or {})
            r = self.c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        except (http.client.HTTPException, OSError) as e:
            self.c.close()
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            return None, {}, type(e).__name__.encode()

    def s3(self, method, path, body=b"", headers=None, creds=(KEY, SECRET, None),
           tamper=None):
        path, _, query = path.partition("?")  # the query comes already encoded
        url = f"http://127.0.0.1:{self.port}{quote(path, safe='/~')}" + (f"?{query}" if query else "")
        req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        S3SigV4Auth(Credentials(*creds), "s3", self.region).add_auth(req)
        hdrs = dict(req.headers.items())
        if tamper:
            tamper(hdrs)
        target = url[len(f"http://127.0.0.1:{self.port}"):]
        return self.raw(method, target, body, hdrs)

    def admin(self, method, path, obj=None):
        st, _, body = self.raw(method, path, json.dumps(obj).encode() if obj else b"")
        return st, json.loads(body)


def code_of(body):
    b = body.decode(errors="replace")
    return b.split("<Code>")[1].split("</Code>")[0] if "<Code>" in b else b[:60]


def s3_checks(tmp):
    proc, port = start("s3_server.py", ["--access-key", KEY, "--secret-key", SECRET], tmp)
    try:
        c = Conn(port)
        st, _, _ = c.s3("HEAD", "/bkt")
        check(st == 404, "HEAD of a missing bucket is 404")
        st, _, body = c.s3("PUT", "/bkt/k", b"x")
        check(st == 404 and code_of(body) == "NoSuchBucket", "PUT into a missing bucket")
        check(c.s3("PUT", "/bkt")[0] == 200, "CreateBucket signed by botocore")
        st, _, body = c.s3("PUT", "/bkt")
        check(st == 409 and code_of(body) == "BucketAlreadyOwnedByYou", "second CreateBucket")
        data = os.urandom(100000)
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        check(c.s3("PUT", "/bkt/dir/a b+c~", data, {"Content-MD5": md5})[0] == 200,
              "PutObject with an odd key and Content-MD5")
        st, hdr, body = c.s3("GET", "/bkt/dir/a b+c~", headers={"Range": "bytes=10-19"})
        check(st == 206 and body == data[10:20] and hdr.get("Content-Range") ==
              f"bytes 10-19/{len(data)}", "ranged GetObject")
        st, _, body = c.s3("GET", "/bkt/dir/a b+c~", headers={"Range": f"bytes={len(data)}-"})
        check(st == 416 and code_of(body) == "InvalidRange", "range past the end is 416")
        st, _, body = c.s3("GET", "/bkt/dir/a b+c~")
        check(st == 200 and body == data, "whole GetObject")
        st, _, body = c.s3("GET", "/bkt?list-type=2&prefix=dir%2F")
        check(st == 200 and b"<Key>dir/a b+c~</Key>" in body, "ListObjectsV2 with a prefix")
        st, _, body = c.s3("PUT", "/bkt/bad", b"abc", {"Content-MD5": md5})
        check(st == 400 and code_of(body) == "BadDigest", "wrong Content-MD5 is BadDigest")
        # Refusals.
        st, _, body = c.s3("GET", "/bkt/dir/a b+c~", creds=(KEY, "wrong", None))
        check(st == 403 and code_of(body) == "SignatureDoesNotMatch", "wrong secret")
        st, _, body = c.s3("GET", "/bkt/dir/a b+c~", creds=("NOPE", SECRET, None))
        check(st == 403 and code_of(body) == "InvalidAccessKeyId", "unknown access key")

        def swap_range(h):
            h["Range"] = "bytes=0-1"
        st, _, body = c.s3("GET", "/bkt/dir/a b+c~", headers={"Range": "bytes=10-19"},
                           tamper=swap_range)
        check(st == 403 and code_of(body) == "SignatureDoesNotMatch", "a signed header changed")

        def old_date(h):
            h["X-Amz-Date"] = "20200101T000000Z"
        st, _, body = c.s3("GET", "/bkt", tamper=old_date)
        check(st == 403, "a date outside the credential or the skew window")
        st, _, body = c.raw("PUT", "/bkt/unsigned", b"x")
        check(st == 403 and code_of(body) == "AccessDenied", "an anonymous request")

        def other_body(h):
            h["X-Amz-Content-SHA256"] = hashlib.sha256(b"other").hexdigest()
        st, _, body = c.s3("PUT", "/bkt/k2", b"payload", tamper=other_body)
        check(st in (400, 403), "a payload hash that does not match the body")
        # Faults.
        for kind, want in [("500", 500), ("503", 503), ("429", 429), ("403", 403),
                           ("non_xml", 500)]:
            c.admin("POST", "/_admin/fault", {"kind": kind, "count": 1, "method": "GET"})
            st, _, body = c.s3("GET", "/bkt/dir/a b+c~")
            check(st == want and (kind != "non_xml" or b"<" not in body), f"fault {kind}")
            check(c.s3("GET", "/bkt/dir/a b+c~")[0] == 200, f"fault {kind} fired only once")
        for kind, exc in [("drop", None), ("truncate", "IncompleteRead"),
                          ("bad_length", "IncompleteRead")]:
            c.admin("POST", "/_admin/fault", {"kind": kind, "count": 1, "method": "GET"})
            st, _, body = c.s3("GET", "/bkt/dir/a b+c~")
            check(st is None and (exc is None or body.decode() == exc),
                  f"fault {kind} breaks the answer ({body[:40]!r})")
        c.admin("POST", "/_admin/fault", {"kind": "wide_range", "count": 1, "method": "GET"})
        st, hdr, body = c.s3("GET", "/bkt/dir/a b+c~", headers={"Range": "bytes=0-0"})
        check(st == 206 and body == data and hdr.get("Content-Range") ==
              f"bytes 0-{len(data) - 1}/{len(data)}", "fault wide_range answers the whole object")
        c.admin("POST", "/_admin/fault", {"kind": "500", "count": 5, "method": "PUT"})
        st, faults = c.admin("GET", "/_admin/faults")
        check(st == 200 and faults["queued"][0]["count"] == 5, "queued faults are listed")
        check(c.s3("GET", "/bkt/dir/a b+c~")[0] == 200, "a PUT fault leaves GETs alone")
        c.admin("POST", "/_admin/clear_faults")
        check(c.s3("PUT", "/bkt/k3", b"v")[0] == 200, "clear_faults empties the queue")
        st, err = c.admin("POST", "/_admin/fault", {"kind": "bogus"})
        check(st == 400 and "bogus" in err["error"], "an unknown fault kind is refused")
        slow = Conn(port)
        slow.c = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        c.admin("POST", "/_admin/fault", {"kind": "slow", "count": 1, "delay_s": 2})
        t0 = time.monotonic()
        st, _, _ = slow.s3("GET", "/bkt/k3")
        check(st is None and time.monotonic() - t0 < 1.9, "a slow answer makes the client time out")
        # A held GET waits for the release, then is answered with what the object holds then.
        c.admin("POST", "/_admin/fault", {"kind": "hold", "count": 1, "method": "GET"})
        held_answer = []
        waiter = threading.Thread(target=lambda: held_answer.append(Conn(port).s3("GET", "/bkt/k3")))
        waiter.start()
        held = 0
        for _ in range(600):  # readiness poll: the request reached the hold
            held = c.admin("GET", "/_admin/faults")[1]["held"]
            if held:
                break
            time.sleep(0.05)
        check(held == 1 and not held_answer, "a held GET waits")
        check(c.s3("PUT", "/bkt/k3", b"w")[0] == 200, "other requests pass a held one")
        c.admin("POST", "/_admin/release")
        waiter.join(30)
        check(held_answer and held_answer[0][0] == 200 and held_answer[0][2] == b"w",
              "a released GET is served with the object as it is then")
        c.admin("POST", "/_admin/clear_faults")
        st, stats = c.admin("GET", "/_admin/stats")
        check(st == 200 and stats["bytes_stored"] == len(data) + 1 and stats["objects"] == 2,
              f"stats count stored bytes ({stats['bytes_stored']})")
        check(stats["auth_failures"] >= 5, "stats count refused requests")
        check(c.s3("DELETE", "/bkt/k3")[0] == 204 and c.s3("DELETE", "/bkt/k3")[0] == 204,
              "DeleteObject, twice")
    finally:
        proc.terminate()
        proc.wait(10)
    # Strict mode, as CLIO's tests run it: checksums required, the region pinned.
    proc, port = start("s3_server.py", ["--access-key", KEY, "--secret-key", SECRET,
                                        "--require-content-md5", "--region", "eu-west-3"], tmp)
    try:
        c = Conn(port)
        st, _, body = c.s3("PUT", "/strict")
        check(st == 400 and code_of(body) == "AuthorizationHeaderMalformed",
              "a signature scoped to another region")
        c.region = "eu-west-3"
        check(c.s3("PUT", "/strict")[0] == 200, "CreateBucket in the server's region")
        st, _, body = c.s3("PUT", "/strict/k", b"v")
        check(st == 400 and code_of(body) == "InvalidRequest", "PutObject without Content-MD5")
        md5 = base64.b64encode(hashlib.md5(b"v").digest()).decode()
        check(c.s3("PUT", "/strict/k", b"v", {"Content-MD5": md5})[0] == 200,
              "PutObject with Content-MD5")
        # A path character S3 would encode, sent raw: the client signed another path.
        url_path = "/strict/a+b"
        req = AWSRequest(method="GET", url=f"http://127.0.0.1:{port}{url_path}")
        S3SigV4Auth(Credentials(KEY, SECRET), "s3", "eu-west-3").add_auth(req)
        st, _, body = c.raw("GET", url_path, b"", dict(req.headers.items()))
        check(st == 403 and code_of(body) == "SignatureDoesNotMatch",
              "a path signed as sent, unencoded")
    finally:
        proc.terminate()
        proc.wait(10)
    # Session tokens.
    proc, port = start("s3_server.py", ["--access-key", KEY, "--secret-key", SECRET,
                                        "--session-token", TOKEN], tmp)
    try:
        c = Conn(port)
        st, _, body = c.s3("PUT", "/tok")
        check(st == 403 and code_of(body) == "InvalidToken", "no session token")
        check(c.s3("PUT", "/tok", creds=(KEY, SECRET, TOKEN))[0] == 200, "with the session token")
        st, _, body = c.s3("PUT", "/tok2", creds=(KEY, SECRET, "other"))
        check(st == 403, "a wrong session token")
    finally:
        proc.terminate()
        proc.wait(10)


def gcs_checks(tmp):
    proc, port = start("gcs_server.py", ["--token", "tok"], tmp)
    try:
        c = Conn(port)
        auth = {"Authorization": "Bearer tok"}
        st, _, _ = c.raw("GET", "/storage/v1/b/gb", headers={"Authorization": "Bearer no"})
        check(st == 401, "gcs: a wrong token is 401")
        check(c.raw("GET", "/storage/v1/b/gb", headers=auth)[0] == 404, "gcs: missing bucket")
        st, _, _ = c.raw("POST", "/storage/v1/b?project=p", b'{"name":"gb"}', auth)
        check(st == 200, "gcs: create bucket")
        data = os.urandom(5000)
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        st, _, _ = c.raw("POST", "/upload/storage/v1/b/gb/o?uploadType=media&name=p%2Fo", data,
                         {**auth, "x-goog-hash": "md5=" + md5})
        check(st == 200, "gcs: upload with md5")
        st, _, _ = c.raw("POST", "/upload/storage/v1/b/gb/o?uploadType=media&name=x", b"zz",
                         {**auth, "x-goog-hash": "md5=" + md5})
        check(st == 400, "gcs: wrong md5 refused")
        st, hdr, body = c.raw("GET", "/storage/v1/b/gb/o/p%2Fo?alt=media",
                              headers={**auth, "Range": "bytes=100-199"})
        check(st == 206 and body == data[100:200], "gcs: ranged download")
        check(c.raw("DELETE", "/storage/v1/b/gb/o/p%2Fo", headers=auth)[0] == 204, "gcs: delete")
        st, _, _ = c.raw("POST", "/upload/storage/v1/b/gb/o?uploadType=media&name=nomd5", b"zz",
                         auth)
        check(st == 200, "gcs: upload without md5 accepted unless --require-md5")
        check(c.raw("GET", "/storage/v1/b/gb/o/p%2Fo?alt=media", headers=auth)[0] == 404,
              "gcs: deleted object is 404")
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        s3_checks(tmp)
        gcs_checks(tmp)
    if failures:
        sys.exit(f"{len(failures)} stand-in checks failed: {failures}")
    print("all stand-in checks passed")


if __name__ == "__main__":
    main()
