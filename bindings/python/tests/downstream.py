"""A real HTTP service on 127.0.0.1 standing for a tool's downstream API (a payment, a mail
service): it records the ``Idempotency-Key`` header of every request, so a test can see that a
framework's tool sent toolonce's operation key and that a duplicate sent nothing."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Downstream:
    def __init__(self) -> None:
        self.keys: list = []
        lock = threading.Lock()
        keys = self.keys

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    keys.append(self.headers.get("Idempotency-Key"))
                    body = json.dumps({"id": f"rcpt_{len(keys)}"}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def send(self, key: str) -> str:
        """POSTs with ``key`` as ``Idempotency-Key``; the service's receipt id."""
        request = urllib.request.Request(
            self.url, data=b"{}", method="POST", headers={"Idempotency-Key": key}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())["id"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
