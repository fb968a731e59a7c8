"""A tiny real HTTP server for the replica tests (stdlib only): it listens on 127.0.0.1:$PORT and
answers ``GET /health`` 200 and any other path 200 with its port and pid. Options change its
behaviour: ``--exit CODE`` prints a line and exits at once; ``--never-ready`` answers /health 503;
``--sick-after S`` answers /health 503 after S seconds; ``--slow-after S --slow-for D`` answers
/health 200 but 2 s late from S to S + D seconds (a busy replica); ``--ignore-term`` keeps running on
SIGTERM.

(The route helper's ``examples/model_server.py`` is the real model server; this one only needs to
listen and answer its readiness path.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exit", type=int, default=None)
    ap.add_argument("--never-ready", action="store_true")
    ap.add_argument("--sick-after", type=float, default=None)
    ap.add_argument("--slow-after", type=float, default=None)
    ap.add_argument("--slow-for", type=float, default=0.0)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    if args.exit is not None:
        print(f"model failed to load (tag {args.tag})", flush=True)
        sys.exit(args.exit)
    port = int(os.environ["PORT"])
    started = time.monotonic()
    signal.signal(signal.SIGUSR1, lambda *_: print("checkpoint signal", flush=True))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                age = time.monotonic() - started
                if args.slow_after is not None and args.slow_after <= age < args.slow_after + args.slow_for:
                    time.sleep(2.0)
                sick = args.never_ready or (args.sick_after is not None
                                            and time.monotonic() - started > args.sick_after)
                self.send_response(503 if sick else 200)
                self.end_headers()
                return
            body = json.dumps({"port": port, "pid": os.getpid(), "tag": args.tag}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on {port} (tag {args.tag})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
