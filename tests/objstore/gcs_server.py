#!/usr/bin/env python3
"""A GCS JSON-API stand-in for CLIO's tests (Python standard library only).

Requires `Authorization: Bearer <token>` with the configured token (401 otherwise) and checks the
md5 in x-goog-hash on uploads. Supports: buckets.get, buckets.insert, objects.insert
(uploadType=media), objects.get (alt=media, with Range; metadata otherwise), objects.delete,
objects.list. Objects live in memory. Fault injection and counters: see standin_common.py.
"""

import base64
import hashlib
import json
import urllib.parse

from standin_common import StandinHandler, StandinServer, common_args, serve


class GcsHandler(StandinHandler):
    def error_body(self, status, code, message):
        return "application/json", json.dumps(
            {"error": {"code": status, "message": message, "errors": [{"reason": code}]}})

    def fail(self, status, reason, message):
        ctype, body = self.error_body(status, reason, message)
        self.answer(status, body, content_type=ctype)

    def handle_api(self, method, body):
        srv = self.server
        if self.headers.get("Authorization") != "Bearer " + srv.token:
            with srv.stats.lock:
                srv.stats.auth_failures += 1
            return self.fail(401, "authError", "Invalid Credentials")
        path, _, query = self.path.partition("?")
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        segs = [urllib.parse.unquote(s) for s in path.strip("/").split("/")]
        if segs[:3] == ["upload", "storage", "v1"] and len(segs) == 6 and segs[3] == "b" \
                and segs[5] == "o" and method == "POST":
            return self.upload(segs[4], params, body)
        if segs[:2] != ["storage", "v1"] or len(segs) < 3 or segs[2] != "b":
            return self.fail(404, "notFound", f"no such API path {path}")
        if len(segs) == 3:
            if method == "POST":
                return self.create_bucket(params, body)
            return self.fail(405, "methodNotAllowed", f"{method} {path}")
        bucket = segs[3]
        if len(segs) == 4:
            with srv.data_lock:
                exists = bucket in srv.buckets
            if method != "GET":
                return self.fail(405, "methodNotAllowed", f"{method} {path}")
            if not exists:
                return self.fail(404, "notFound", f"bucket {bucket} not found")
            return self.answer_json(200, {"kind": "storage#bucket", "name": bucket})
        if len(segs) == 5 and segs[4] == "o" and method == "GET":
            return self.list_objects(bucket, params)
        if len(segs) == 6 and segs[4] == "o":
            return self.object_call(method, bucket, segs[5], params)
        self.fail(404, "notFound", f"no such API path {path}")

    def create_bucket(self, params, body):
        if not params.get("project"):
            return self.fail(400, "required", "the project parameter is required")
        try:
            name = json.loads(body or b"{}").get("name", "")
        except ValueError:
            return self.fail(400, "parseError", "the body is not JSON")
        if not name:
            return self.fail(400, "required", "the bucket name is required")
        with self.server.data_lock:
            if name in self.server.buckets:
                return self.fail(409, "conflict", "Your previous request to create the named "
                                 "bucket succeeded and you already own it.")
            self.server.buckets[name] = {}
        self.answer_json(200, {"kind": "storage#bucket", "name": name,
                               "projectNumber": params["project"]})

    def resource(self, bucket, key, data):
        return {"kind": "storage#object", "bucket": bucket, "name": key, "size": str(len(data)),
                "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode()}

    def upload(self, bucket, params, body):
        if params.get("uploadType") != "media" or not params.get("name"):
            return self.fail(400, "invalid", "only uploadType=media with a name is supported")
        key = params["name"]
        if self.server.require_md5 and "md5=" not in (self.headers.get("x-goog-hash") or ""):
            return self.fail(400, "required", "this server requires an md5 in x-goog-hash "
                             "(--require-md5)")
        for part in (self.headers.get("x-goog-hash") or "").split(","):
            algo, _, value = part.strip().partition("=")
            if algo == "md5" and value != base64.b64encode(hashlib.md5(body).digest()).decode():
                return self.fail(400, "invalid", "the md5 in x-goog-hash does not match the body")
        with self.server.data_lock:
            objects = self.server.buckets.get(bucket)
            if objects is None:
                return self.fail(404, "notFound", f"bucket {bucket} not found")
            objects[key] = bytes(body)
        self.answer_json(200, self.resource(bucket, key, body))

    def list_objects(self, bucket, params):
        prefix = params.get("prefix", "")
        with self.server.data_lock:
            objects = self.server.buckets.get(bucket)
            if objects is None:
                return self.fail(404, "notFound", f"bucket {bucket} not found")
            items = [self.resource(bucket, k, v) for k, v in sorted(objects.items())
                     if k.startswith(prefix)]
        self.answer_json(200, {"kind": "storage#objects", "items": items})

    def object_call(self, method, bucket, key, params):
        with self.server.data_lock:
            objects = self.server.buckets.get(bucket)
            if objects is None:
                return self.fail(404, "notFound", f"bucket {bucket} not found")
            if method == "DELETE":
                if objects.pop(key, None) is None:
                    return self.fail(404, "notFound", f"object {key} not found")
                return self.answer(204)
            data = objects.get(key)
        if method != "GET":
            return self.fail(405, "methodNotAllowed", f"{method} on an object")
        if data is None:
            return self.fail(404, "notFound", f"object {key} not found")
        if params.get("alt") != "media":
            return self.answer_json(200, self.resource(bucket, key, data))
        r = self.pick_range(len(data))
        if r == "invalid":
            return self.fail(416, "requestedRangeNotSatisfiable", "the range is not satisfiable")
        if r is None:
            return self.send_object(200, data, {})
        start, end = r
        self.send_object(206, data[start:end + 1],
                         {"Content-Range": f"bytes {start}-{end}/{len(data)}"})


def main():
    p = common_args(__doc__.splitlines()[0])
    p.add_argument("--token", required=True, help="the accepted OAuth2 bearer token")
    p.add_argument("--require-md5", action="store_true",
                   help="refuse uploads without an md5 in x-goog-hash (CLIO always sends it)")
    args = p.parse_args()
    server = StandinServer(args.port, GcsHandler, args.verbose)
    server.token = args.token
    server.require_md5 = args.require_md5
    serve(server, args.port_file)


if __name__ == "__main__":
    main()
