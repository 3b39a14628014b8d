"""Shared plumbing of the object-store stand-ins (s3_server.py, gcs_server.py).

An HTTP/1.1 keep-alive server on loopback (one thread per connection), a port file written once
the socket listens, clean exit on SIGTERM, and an unsigned admin API under /_admin/ that tests use
to inject faults and read counters:

  POST /_admin/fault         {"kind": K, "count": N, "method": "GET", "delay_s": S, "path_prefix": P}
  GET  /_admin/faults        the queued faults
  POST /_admin/clear_faults  drop every queued fault
  GET  /_admin/stats         {"requests", "api_connections", "bytes_stored", "objects", ...}
  POST /_admin/reset_stats

Fault kinds (each consumes one queued count on a matching request, before authentication):
  500, 503, 429, 403  an error answer with the service's error body
  non_xml             HTTP 500 whose body is plain text, not the service's error format
  drop                the connection closes without an answer
  truncate            a full Content-Length, half the body, then the connection closes
  bad_length          a Content-Length longer than the body, then the connection closes
  slow                the answer is held back delay_s seconds (the client should time out)
  wide_range          a ranged GET is answered 206 with the whole object and its Content-Range
                      (as s3rver does for "bytes=0-0"; a correct client takes its part)
  request_timeout     HTTP 400 with code RequestTimeout (S3: the body came too slowly)
  trickle             a GET's body is sent one byte every delay_s seconds
  hold                the request waits, before it is served, until POST /_admin/release (or
                      delay_s seconds, 120 when 0); GET /_admin/faults counts it in "held"

  POST /_admin/release       serves the held requests, and lets later holds pass at once until
                             the next /_admin/clear_faults
Only the Python standard library is used.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULT_KINDS = {"500", "503", "429", "403", "non_xml", "drop", "truncate", "bad_length", "slow",
               "wide_range", "request_timeout", "trickle", "hold"}


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.queue = []  # dicts: kind, count, method, delay_s, path_prefix
        self.fired = 0
        self.held = 0  # requests waiting in a "hold" fault now
        self.released = threading.Event()

    def add(self, spec):
        kind = str(spec.get("kind", ""))
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind '{kind}' (known: {sorted(FAULT_KINDS)})")
        count = int(spec.get("count", 1))
        if count < 1:
            raise ValueError("count must be at least 1")
        entry = {"kind": kind, "count": count, "method": str(spec.get("method", "")).upper(),
                 "delay_s": float(spec.get("delay_s", 0)),
                 "path_prefix": str(spec.get("path_prefix", ""))}
        with self.lock:
            self.queue.append(entry)

    def take(self, method, path):
        with self.lock:
            for f in self.queue:
                if f["method"] and f["method"] != method:
                    continue
                if f["path_prefix"] and not path.startswith(f["path_prefix"]):
                    continue
                f["count"] -= 1
                if f["count"] == 0:
                    self.queue.remove(f)
                self.fired += 1
                return dict(f)
        return None

    def snapshot(self):
        with self.lock:
            return [dict(f) for f in self.queue]

    def clear(self):
        with self.lock:
            self.queue.clear()
        self.released.clear()

    def hold(self, delay_s):
        with self.lock:
            self.held += 1
        self.released.wait(delay_s or 120)
        with self.lock:
            self.held -= 1


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.requests = 0
        self.api_connections = 0
        self.auth_failures = 0
        self.by_method = {}

    def count_request(self, method):
        with self.lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1


class StandinHandler(BaseHTTPRequestHandler):
    """Base handler: admin API, fault injection, body reading, keep-alive answers.

    Subclasses implement handle_api(method, body) and error_body(status, code, message)."""

    protocol_version = "HTTP/1.1"
    server_version = "clio-standin/1"

    def log_message(self, fmt, *args):  # quiet unless --verbose
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold each small answer back by tens of milliseconds.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._counted_connection = False

    # -- plumbing ----------------------------------------------------------------------
    def read_body(self):
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(length)) if length else b""

    def answer(self, status, body=b"", headers=None, content_type="application/xml"):
        """Sends a complete answer. A HEAD answer passes the GET body's Content-Length in
        `headers` and no body."""
        if isinstance(body, str):
            body = body.encode()
        headers = dict(headers or {})
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", content_type)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def answer_json(self, status, obj):
        self.answer(status, json.dumps(obj), content_type="application/json")

    def _dispatch(self):
        path = self.path.split("?", 1)[0]
        if path.startswith("/_admin/"):
            self.handle_admin(path, self.read_body())
            return
        if not self._counted_connection:
            self._counted_connection = True
            with self.server.stats.lock:
                self.server.stats.api_connections += 1
        self.server.stats.count_request(self.command)
        body = self.read_body()
        fault = self.server.faults.take(self.command, path)
        if fault and self.inject(fault):
            return
        self.handle_api(self.command, body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _dispatch

    def inject(self, fault):
        """Applies a fault; returns True when the request is fully answered (or dropped)."""
        kind = fault["kind"]
        if kind == "slow":
            time.sleep(fault["delay_s"])
            return False  # then answer normally (the client has likely given up)
        if kind == "hold":
            self.server.faults.hold(fault["delay_s"])
            return False  # then served as it is now
        if kind == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if kind == "non_xml":
            self.answer(500, "oops: the backend fell over (plain text, not XML)",
                        content_type="text/plain")
            return True
        if kind == "wide_range":
            self._wide = True
            return False
        if kind == "trickle":
            if self.command != "GET":
                return False
            self._cut = "trickle"
            self._trickle_s = fault["delay_s"] or 0.2
            return False
        if kind == "request_timeout":
            ctype, body = self.error_body(400, "RequestTimeout",
                                          "your socket connection to the server was not read "
                                          "from or written to within the timeout period")
            self.answer(400, body, content_type=ctype)
            return True
        if kind in ("truncate", "bad_length"):
            if self.command != "GET":
                return False  # nothing to cut short: answer normally
            self._cut = kind
            return False
        status = int(kind)
        codes = {500: "InternalError", 503: "ServiceUnavailable", 429: "SlowDown",
                 403: "AccessDenied"}
        ctype, body = self.error_body(status, codes[status], f"injected fault {kind}")
        self.answer(status, body, content_type=ctype)
        return True

    def pick_range(self, size):
        """The Range header parsed (see parse_range), widened by a pending wide_range fault."""
        r = parse_range(self.headers.get("Range"), size)
        if getattr(self, "_wide", False) and isinstance(r, tuple):
            self._wide = False
            return (0, size - 1)
        return r

    def send_object(self, status, data, headers):
        """Answers with `data`, honouring a pending truncate/bad_length fault."""
        cut = getattr(self, "_cut", None)
        self._cut = None
        if cut is None or self.command == "HEAD":
            self.answer(status, data, headers, content_type="application/octet-stream")
            return
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if cut == "trickle":
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                for i in range(len(data)):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(self._trickle_s)
            except OSError:
                self.close_connection = True  # the client gave up
            return
        declared = len(data) if cut == "truncate" else len(data) + 100
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(declared))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if cut == "truncate" else data)
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def handle_admin(self, path, body):
        srv = self.server
        try:
            if path == "/_admin/fault" and self.command == "POST":
                srv.faults.add(json.loads(body or b"{}"))
                self.answer_json(200, {"queued": srv.faults.snapshot()})
            elif path == "/_admin/faults" and self.command == "GET":
                self.answer_json(200, {"queued": srv.faults.snapshot(), "fired": srv.faults.fired,
                                       "held": srv.faults.held})
            elif path == "/_admin/release" and self.command == "POST":
                srv.faults.released.set()
                self.answer_json(200, {})
            elif path == "/_admin/clear_faults" and self.command == "POST":
                srv.faults.clear()
                self.answer_json(200, {"queued": []})
            elif path == "/_admin/stats" and self.command == "GET":
                self.answer_json(200, srv.stats_json())
            elif path == "/_admin/reset_stats" and self.command == "POST":
                with srv.stats.lock:
                    srv.stats.reset()
                self.answer_json(200, {})
            else:
                self.answer_json(404, {"error": f"no admin call {self.command} {path}"})
        except (ValueError, TypeError) as e:
            self.answer_json(400, {"error": str(e)})


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, handler, verbose=False):
        super().__init__(("127.0.0.1", port), handler)
        self.verbose = verbose
        self.faults = Faults()
        self.stats = Stats()
        self.data_lock = threading.Lock()
        self.buckets = {}  # name -> {key: bytes}

    def stats_json(self):
        with self.data_lock:
            stored = sum(len(v) for b in self.buckets.values() for v in b.values())
            objects = sum(len(b) for b in self.buckets.values())
            buckets = sorted(self.buckets)
        with self.stats.lock:
            return {"requests": self.stats.requests, "api_connections": self.stats.api_connections,
                    "auth_failures": self.stats.auth_failures,
                    "by_method": dict(self.stats.by_method), "faults_fired": self.faults.fired,
                    "bytes_stored": stored, "objects": objects, "buckets": buckets}


def common_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free one)")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return p


def serve(server, port_file):
    """Writes the port file (atomically) and serves until SIGTERM or SIGINT."""
    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    port = server.server_address[1]
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.rename(tmp, port_file)
    sys.stderr.write(f"listening on 127.0.0.1:{port}\n")
    sys.stderr.flush()
    server.serve_forever(poll_interval=0.2)
    server.server_close()


def parse_range(header, size):
    """(start, end) inclusive for a 'bytes=a-b' header, None when absent, 'invalid' when
    unsatisfiable."""
    if not header:
        return None
    if not header.startswith("bytes=") or "," in header:
        return None  # unsupported forms: whole object, as S3 and GCS do
    first, _, last = header[6:].partition("-")
    try:
        if first == "":
            n = int(last)
            if n == 0:
                return "invalid"
            return (max(0, size - n), size - 1)
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "invalid"
    return (start, min(end, size - 1))
