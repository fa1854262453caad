"""A file server that wants a bearer token, run as a process (e.g. inside a pod network namespace, where a thread
of the test could not be reached): ``python token_http.py DIR PORT SEEN``; the token is read from $SERVE_TOKEN
(never argv), and each request's path and whether its token matched is appended to SEEN."""

from __future__ import annotations

import http.server
import os
import sys
from pathlib import Path


def main() -> None:
    root, port, seen = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    token = os.environ["SERVE_TOKEN"]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.headers.get("Authorization") == f"Bearer {token}"
            with open(seen, "a") as fh:
                fh.write(f"{self.path} {'token' if ok else 'no-token'}\n")
            path = root / self.path.lstrip("/")
            if not ok:
                self.send_error(401)
            elif not path.is_file():
                self.send_error(404)
            else:
                body = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    print("serving", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
