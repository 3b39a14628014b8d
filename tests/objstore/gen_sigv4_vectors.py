#!/usr/bin/python3
"""Generates sigv4_vectors.json: AWS Signature Version 4 known answers computed by botocore
(Debian package python3-botocore), for CLIO's C++ signer (storage/objstore/sigv4_test.cc).

  /usr/bin/python3 tests/objstore/gen_sigv4_vectors.py           # rewrite sigv4_vectors.json
  /usr/bin/python3 tests/objstore/gen_sigv4_vectors.py --check   # fail if the file is stale

Each case is a request as CLIO puts it on the wire (method, already-encoded path, raw query,
headers, payload hash) with the canonical request, string to sign, signature and Authorization
header that botocore's S3SigV4Auth computes for it. Everything is fixed (dates, keys, bodies),
so the output is the same on every run.
"""

import argparse
import hashlib
import json
import os
import sys
from urllib.parse import quote

from botocore import __version__ as botocore_version
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "sigv4_vectors.json")


def sign_case(name, method, key_path, params, extra_headers, body, creds, region, amz_date,
              host="127.0.0.1:9000"):
    """key_path: unencoded path after the host ('/bucket/key'); params: unencoded pairs."""
    path = quote(key_path, safe="/~")
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in params)
    url = f"http://{host}{path}" + (f"?{query}" if query else "")
    req = AWSRequest(method=method, url=url, data=body, headers={"Host": host, **extra_headers})
    if params:
        req.params = list(params)
    req.context["timestamp"] = amz_date
    auth = S3SigV4Auth(Credentials(*creds), "s3", region)
    auth._modify_request_before_signing(req)
    canonical = auth.canonical_request(req)
    sts = auth.string_to_sign(req, canonical)
    sig = auth.signature(sts, req)
    auth._inject_signature_to_request(req, sig)
    headers = [[k, v] for k, v in req.headers.items() if k.lower() != "authorization"]
    return {
        "name": name, "method": method, "path": path, "query": query, "headers": headers,
        "payload_sha256": req.headers["X-Amz-Content-SHA256"],
        "access_key": creds[0], "secret_key": creds[1], "session_token": creds[2] or "",
        "region": region, "service": "s3", "amz_date": amz_date,
        "canonical_request": canonical, "string_to_sign": sts, "signature": sig,
        "authorization": req.headers["Authorization"],
    }


def cases():
    plain = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
    token = ("ASIAEXAMPLE", "sess/secret+key=", "FQoGZXIvYXdzEJr//////////token==")
    clio = ("CLIOTESTKEY", "clio/test+secret", None)
    body = bytes(range(256)) * 17
    md5 = "tz0BwNtpn9fpyvlvlpwiBw=="  # any well-formed value: it is only signed, not checked
    out = []
    # Every call the transport makes, across regions, dates and credentials.
    for i, (creds, region, date) in enumerate([
            (plain, "us-east-1", "20150830T123600Z"), (token, "eu-west-3", "20261202T170000Z"),
            (clio, "ap-southeast-2", "20000101T000000Z"), (plain, "us-west-2", "20991231T235959Z")]):
        tag = f"{i}-{region}"
        out.append(sign_case(f"head-bucket-{tag}", "HEAD", "/bucket", [], {}, b"", creds, region,
                             date))
        out.append(sign_case(f"create-bucket-{tag}", "PUT", "/bucket", [], {},
                             b"" if region == "us-east-1" else
                             ("<CreateBucketConfiguration><LocationConstraint>" + region +
                              "</LocationConstraint></CreateBucketConfiguration>").encode(),
                             creds, region, date))
        out.append(sign_case(f"put-object-{tag}", "PUT", "/bucket/node0/block_4096", [],
                             {"Content-MD5": md5}, body, creds, region, date))
        out.append(sign_case(f"get-range-{tag}", "GET", "/bucket/node0/block_4096", [],
                             {"Range": "bytes=512-1023"}, b"", creds, region, date))
        out.append(sign_case(f"get-all-{tag}", "GET", "/bucket/block_0", [], {}, b"", creds,
                             region, date))
        out.append(sign_case(f"delete-{tag}", "DELETE", "/bucket/p/clio_tier", [], {}, b"",
                             creds, region, date))
    # Paths that need encoding (S3 paths are signed as sent, without normalization).
    for j, key in enumerate(["a b+c=d~e%f", "caf\u00e9/\u6587\u4ef6", "x//y/./z/../w",
                             "semi;colon,comma!star*(paren)", "'quote'\"dq\"@at$dollar"]):
        out.append(sign_case(f"path-{j}", "PUT", "/bucket/" + key, [], {}, b"data", plain,
                             "us-east-1", "20261202T170000Z"))
    # Query strings: sorting, empty values, repeated names, characters needing encoding.
    for j, params in enumerate([
            [("list-type", "2"), ("prefix", "node0/")],
            [("prefix", "a b/c"), ("continuation-token", "1/2+3=4"), ("list-type", "2")],
            [("uploads", "")],
            [("b", "2"), ("a", "1"), ("a", "0"), ("A", "x")],
            [("max-keys", "1000"), ("start-after", "block_\u00e9")]]):
        out.append(sign_case(f"query-{j}", "GET", "/bucket", params, {}, b"", clio,
                             "us-east-1", "20261202T170000Z"))
    # Header values with runs of spaces, and extra signed headers in any case.
    out.append(sign_case("header-spaces", "GET", "/bucket/k", [],
                         {"X-Amz-Meta-Note": "  a   b \t c  ", "Range": "bytes=0-0"}, b"",
                         plain, "us-east-1", "20261202T170000Z"))
    out.append(sign_case("header-case", "PUT", "/bucket/k", [],
                         {"content-type": "application/octet-stream", "X-AMZ-META-X": "1",
                          "Content-MD5": md5}, b"x", token, "us-east-1", "20261202T170000Z"))
    out.append(sign_case("virtual-host", "GET", "/node0/block_0", [], {}, b"", plain,
                         "eu-central-1", "20261202T170000Z",
                         host="bucket.s3.eu-central-1.amazonaws.com"))
    out.append(sign_case("post-empty", "POST", "/bucket", [("delete", "")], {}, b"<Delete/>",
                         plain, "us-east-1", "20261202T170000Z"))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="compare with the checked-in file instead of writing it")
    args = p.parse_args()
    doc = {"generator": "tests/objstore/gen_sigv4_vectors.py",
           "botocore": botocore_version, "cases": cases()}
    text = json.dumps(doc, indent=1, ensure_ascii=True, sort_keys=True) + "\n"
    if args.check:
        with open(OUT) as f:
            old = json.load(f)
        old.pop("botocore", None)
        new = json.loads(text)
        new.pop("botocore", None)
        if old != new:
            sys.exit("sigv4_vectors.json differs from what botocore computes now: regenerate it "
                     "with tests/objstore/gen_sigv4_vectors.py")
        print(f"sigv4_vectors.json: {len(new['cases'])} cases agree with botocore "
              f"{botocore_version}")
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {len(doc['cases'])} cases (botocore {botocore_version})")


if __name__ == "__main__":
    main()
