"""A small real model server for kant's inference services (docs/inference.md, "The example model server").

It ships in the package so that ``python -m kant.model_server`` runs it wherever kant is installed
(``kant serve --demo unified`` starts its replicas so); ``examples/model_server.py`` runs the same code.

It is an ASGI app (Starlette, which FastAPI is built on) served by uvicorn; no hand-written HTTP.
Each request does real CPU work proportional to the tokens it asks for, so tests and benches
measure real latency:

* ``POST /v1/completions`` (or any other POST path) with a JSON body: ``max_tokens`` (or
  ``output_tokens``) tokens to generate (default 16, at most 100,000), ``prompt_tokens`` (or
  ``input_tokens``; default: the words of ``prompt``) tokens to read. The work is
  ``(prompt_tokens * PREFILL + max_tokens) * --ms-per-token`` milliseconds of SHA-256 hashing
  (calibrated once at start: the hashes per millisecond of this machine), done in a worker thread
  so that the server keeps answering. The answer is JSON with ``id``, ``replica``, ``text`` and a
  ``usage`` block (``prompt_tokens``, ``completion_tokens``, ``total_tokens``); with ``"stream":
  true`` it is server-sent events instead, one per 16 generated tokens as they are done, then
  ``data: [DONE]``.
* ``GET /health``: 200 ``{"status": "ok"}`` once ready, 503 during ``--warmup`` seconds after start.
* ``GET /`` (or any other GET path): who answers (``replica``, ``port``), without work.

It listens on ``$PORT`` (else ``$KANT_PORT``, else ``--port``; kant hands a replica both) at
``$KANT_HOST`` (default 127.0.0.1; ``--host`` wins). Run it by hand:

    python -m kant.model_server --port 9000 --ms-per-token 0.5      # or python examples/model_server.py
    curl -s localhost:9000/v1/completions -d '{"max_tokens": 64, "prompt_tokens": 100}'

It needs nothing beyond kant's own dependencies (uvicorn, starlette).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

#: a prompt token costs this fraction of a generated token (prefill is batched, decode is not)
PREFILL = 0.05
MAX_TOKENS = 100_000


def calibrate(seconds: float = 0.05) -> float:
    """SHA-256 rounds (of a 64-byte block) this machine does per millisecond."""
    block = b"k" * 64
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            block = hashlib.sha256(block).digest() * 2
        n += 1000
        took = time.perf_counter() - t0
        if took >= seconds:
            return n / (took * 1000.0)


def work(rounds: int) -> str:
    """``rounds`` chained SHA-256 hashes; the last digest's hex (the "text")."""
    block = b"k" * 64
    for _ in range(rounds):
        block = hashlib.sha256(block).digest() * 2
    return block[:16].hex()


def _int(body: dict[str, Any], *keys: str, default: int) -> int:
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return min(value, MAX_TOKENS)
    return default


def create_app(ms_per_token: float, warmup_s: float = 0.0, name: str = "replica", port: int = 0) -> Starlette:
    """The server's app: ``ms_per_token`` milliseconds of hashing per generated token."""
    rounds_per_ms = calibrate()
    ready_at = time.monotonic() + warmup_s
    served = 0

    async def health(request: Request) -> JSONResponse:
        if time.monotonic() < ready_at:
            return JSONResponse({"status": "warming up"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def generate(request: Request) -> Response:
        nonlocal served
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return JSONResponse({"message": "the body is not JSON"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"message": "the body must be a JSON object"}, status_code=400)
        out = _int(body, "max_tokens", "output_tokens", default=16)
        prompt = body.get("prompt")
        words = len(prompt.split()) if isinstance(prompt, str) else 0
        inp = _int(body, "prompt_tokens", "input_tokens", default=words)
        rounds = int((inp * PREFILL + out) * ms_per_token * rounds_per_ms)
        served += 1
        usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
        if body.get("stream") is True:  # server-sent events: the prefill, then one event per 16 tokens
            return StreamingResponse(_events(f"{name}-{served}", inp, out), media_type="text/event-stream")
        text = await asyncio.to_thread(work, rounds) if rounds else ""
        return JSONResponse({"id": f"{name}-{served}", "replica": name, "text": text, "usage": usage})

    async def _events(rid: str, inp: int, out: int) -> AsyncIterator[bytes]:
        prefill = int(inp * PREFILL * ms_per_token * rounds_per_ms)
        if prefill:
            await asyncio.to_thread(work, prefill)
        for done in range(0, out, 16):
            n = min(16, out - done)
            text = await asyncio.to_thread(work, int(n * ms_per_token * rounds_per_ms))
            yield f"data: {json.dumps({'id': rid, 'replica': name, 'text': text, 'tokens': n})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"replica": name, "port": port, "path": request.url.path, "served": served})

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/{path:path}", generate, methods=["POST"]),
        Route("/{path:path}", whoami, methods=["GET"]),
    ])


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description="A small model server doing real CPU work per token.")
    ap.add_argument("--host", default=os.environ.get("KANT_HOST", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=8000, help="used when neither $PORT nor $KANT_PORT is set")
    ap.add_argument("--ms-per-token", type=float, default=1.0, help="CPU milliseconds per generated token")
    ap.add_argument("--warmup", type=float, default=0.0, help="seconds during which /health answers 503")
    ap.add_argument("--name", default=None, help="the replica's name in answers (default: replica-PORT)")
    args = ap.parse_args(argv)
    port = int(os.environ.get("PORT") or os.environ.get("KANT_PORT") or args.port)
    if args.ms_per_token < 0 or args.warmup < 0:
        ap.error("--ms-per-token and --warmup must be >= 0")
    app = create_app(args.ms_per_token, args.warmup, args.name or f"replica-{port}", port)
    uvicorn.run(app, host=args.host, port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
