#!/usr/bin/env python3
"""A signature-verifying S3 stand-in for CLIO's tests (Python standard library only).

Path-style requests only (http://127.0.0.1:PORT/bucket/key). Every API request must carry a
valid AWS Signature Version 4 Authorization header for one of the configured credentials (and
the session token when one is configured); Content-MD5 is checked when sent. Supports the calls
CLIO's s3 transport and the self-test make: ListBuckets, HeadBucket, CreateBucket, DeleteBucket,
ListObjectsV2, PutObject, GetObject (with Range), HeadObject, DeleteObject. Objects live in
memory. Fault injection and counters: see standin_common.py.
"""

import base64
import hashlib
import xml.sax.saxutils as sx
import urllib.parse

import sigv4
from standin_common import StandinHandler, StandinServer, common_args, serve


def _xml(root, inner):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} '
            f'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{inner}</{root}>')


class S3Handler(StandinHandler):
    def error_body(self, status, code, message):
        return "application/xml", (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>' + sx.escape(code) +
            "</Code><Message>" + sx.escape(message) + "</Message><RequestId>standin</RequestId>"
            "</Error>")

    def fail(self, status, code, message, resource="", headers=None):
        ctype, body = self.error_body(status, code, message + (f" ({resource})" if resource else ""))
        self.answer(status, body, headers, content_type=ctype)

    def handle_api(self, method, body):
        srv = self.server
        try:
            sigv4.verify(method, self.path, self.headers, body, srv.secrets, srv.region)
        except sigv4.AuthError as e:
            with srv.stats.lock:
                srv.stats.auth_failures += 1
            # As S3 does, an answer to a request for the wrong region says the right one.
            extra = {"x-amz-bucket-region": srv.region} \
                if e.code == "AuthorizationHeaderMalformed" else None
            self.fail(e.status, e.code, e.message, headers=extra)
            return
        if srv.session_token is not None:
            token = self.headers.get("x-amz-security-token")
            signed = self.headers.get("Authorization", "")
            if token != srv.session_token or "x-amz-security-token" not in signed:
                with srv.stats.lock:
                    srv.stats.auth_failures += 1
                self.fail(403, "InvalidToken", "the session token is missing, unsigned or wrong")
                return
        md5 = self.headers.get("Content-MD5")
        if md5 is not None and base64.b64encode(hashlib.md5(body).digest()).decode() != md5:
            self.fail(400, "BadDigest", "the Content-MD5 you specified did not match what we "
                      "received")
            return
        path, _, query = self.path.partition("?")
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        parts = path.lstrip("/").split("/", 1)
        bucket = urllib.parse.unquote(parts[0])
        key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        if not bucket:
            if method == "GET":
                return self.list_buckets()
            return self.fail(405, "MethodNotAllowed", f"{method} on the service")
        if not key:
            return self.bucket_call(method, bucket, params, body)
        return self.object_call(method, bucket, key, body)

    def list_buckets(self):
        with self.server.data_lock:
            names = sorted(self.server.buckets)
        inner = "<Owner><ID>standin</ID></Owner><Buckets>" + "".join(
            f"<Bucket><Name>{sx.escape(n)}</Name><CreationDate>2026-01-01T00:00:00.000Z"
            "</CreationDate></Bucket>" for n in names) + "</Buckets>"
        self.answer(200, _xml("ListAllMyBucketsResult", inner))

    def bucket_call(self, method, bucket, params, body):
        srv = self.server
        with srv.data_lock:
            exists = bucket in srv.buckets
            if method == "PUT":
                if exists:
                    return self.fail(409, "BucketAlreadyOwnedByYou",
                                     "your previous request to create the named bucket succeeded",
                                     bucket)
                srv.buckets[bucket] = {}
                return self.answer(200, headers={"Location": "/" + bucket})
            if not exists:
                return self.fail(404, "NoSuchBucket", "the specified bucket does not exist",
                                 bucket)
            if method == "HEAD":
                return self.answer(200)
            if method == "DELETE":
                if srv.buckets[bucket]:
                    return self.fail(409, "BucketNotEmpty", "the bucket is not empty", bucket)
                del srv.buckets[bucket]
                return self.answer(204)
            if method == "GET":
                return self.list_objects(srv.buckets[bucket], bucket, params)
        self.fail(405, "MethodNotAllowed", f"{method} on a bucket")

    def list_objects(self, objects, bucket, params):
        # Called with data_lock held.
        prefix = params.get("prefix", "")
        start = params.get("continuation-token") or params.get("start-after", "")
        max_keys = max(1, min(1000, int(params.get("max-keys", "1000"))))
        keys = sorted(k for k in objects if k.startswith(prefix) and k > start)
        page, more = keys[:max_keys], len(keys) > max_keys
        inner = (f"<Name>{sx.escape(bucket)}</Name><Prefix>{sx.escape(prefix)}</Prefix>"
                 f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"
                 f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>")
        if more:
            inner += f"<NextContinuationToken>{sx.escape(page[-1])}</NextContinuationToken>"
        for k in page:
            data = objects[k]
            inner += (f"<Contents><Key>{sx.escape(k)}</Key><Size>{len(data)}</Size>"
                      f"<ETag>&quot;{hashlib.md5(data).hexdigest()}&quot;</ETag>"
                      "<StorageClass>STANDARD</StorageClass></Contents>")
        self.answer(200, _xml("ListBucketResult", inner))

    def object_call(self, method, bucket, key, body):
        srv = self.server
        with srv.data_lock:
            objects = srv.buckets.get(bucket)
            if objects is None:
                return self.fail(404, "NoSuchBucket", "the specified bucket does not exist",
                                 bucket)
            if method == "PUT":
                if srv.require_md5 and self.headers.get("Content-MD5") is None:
                    return self.fail(400, "InvalidRequest", "this server requires Content-MD5 "
                                     "on uploads (--require-content-md5)", key)
                objects[key] = bytes(body)
                return self.answer(200, headers={"ETag": f'"{hashlib.md5(body).hexdigest()}"'})
            if method == "DELETE":
                objects.pop(key, None)
                return self.answer(204)
            data = objects.get(key)
        if method not in ("GET", "HEAD"):
            return self.fail(405, "MethodNotAllowed", f"{method} on an object")
        if data is None:
            return self.fail(404, "NoSuchKey", "the specified key does not exist", key)
        etag = f'"{hashlib.md5(data).hexdigest()}"'
        if method == "HEAD":
            return self.answer(200, headers={"ETag": etag, "Content-Length": str(len(data))})
        r = self.pick_range(len(data))
        if r == "invalid":
            return self.fail(416, "InvalidRange", "the requested range is not satisfiable", key)
        if r is None:
            return self.send_object(200, data, {"ETag": etag, "Accept-Ranges": "bytes"})
        start, end = r
        self.send_object(206, data[start:end + 1],
                         {"ETag": etag, "Content-Range": f"bytes {start}-{end}/{len(data)}"})


def main():
    p = common_args(__doc__.splitlines()[0])
    p.add_argument("--access-key", action="append", required=True,
                   help="an accepted access key (repeat for several)")
    p.add_argument("--secret-key", action="append", required=True,
                   help="the secret of the access key in the same position")
    p.add_argument("--session-token", help="require this x-amz-security-token on every request")
    p.add_argument("--region", default="us-east-1", help="the region signatures must be scoped to")
    p.add_argument("--require-content-md5", action="store_true",
                   help="refuse PutObject without Content-MD5 (CLIO always sends it)")
    args = p.parse_args()
    if len(args.access_key) != len(args.secret_key):
        p.error("give one --secret-key per --access-key")
    server = StandinServer(args.port, S3Handler, args.verbose)
    server.secrets = dict(zip(args.access_key, args.secret_key))
    server.session_token = args.session_token
    server.region = args.region
    server.require_md5 = args.require_content_md5
    serve(server, args.port_file)


if __name__ == "__main__":
    main()
