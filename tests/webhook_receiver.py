"""A webhook receiver for tests: a real HTTP server, in its own process (a test kills it and
starts it again), that checks each call's Standard Webhooks signature with the reference library
(`standardwebhooks`) and appends what it got to a JSON-lines file.

    python -m tests.webhook_receiver --port P --out events.jsonl --secret /PATH=whsec_... [...]

Each `--secret` maps a path to the secret its calls are signed with. A call whose signature
checks is answered 204 and written `{"path", "verified": true, "id", "timestamp", "body"}`; one
that does not, 401 and `"verified": false`. Under `/slow/...` it waits `--slow-s` first.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--secret", action="append", default=[], metavar="PATH=whsec_...")
    parser.add_argument("--slow-s", type=float, default=5.0)
    args = parser.parse_args()
    secrets = dict(item.split("=", 1) for item in args.secret)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            path = self.path.removeprefix("/slow")
            if self.path.startswith("/slow/"):
                time.sleep(args.slow_s)
            entry: dict[str, Any] = {
                "path": path,
                "id": self.headers.get("webhook-id"),
                "timestamp": self.headers.get("webhook-timestamp"),
            }
            try:
                entry["body"] = Webhook(secrets[path]).verify(body, dict(self.headers.items()))
                entry["verified"] = True
                status = 204
            except (KeyError, WebhookVerificationError) as err:
                entry["verified"], entry["error"] = False, repr(err)
                status = 401
            with lock, args.out.open("a") as out:
                out.write(json.dumps(entry) + "\n")
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *values: Any) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
