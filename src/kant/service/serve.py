"""The composition root of ``kant serve``: the :class:`Service` (the process: database, leadership,
scheduling loop), the API on it (:func:`kant.service.api.create_app`) with the dashboard mounted
(:func:`kant.service.dashboard.routes.mount`), served by uvicorn until interrupted.

Nothing below imports this module: the service knows nothing of HTTP, the API and the dashboard
know the service, and this module knows all three. ``kant serve`` (:mod:`kant.cli.serve`) and the
tests call it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI

from kant.service.api import create_app
from kant.service.config import ServeConfig
from kant.service.dashboard.routes import mount
from kant.service.server import Service

__all__ = ["build_app", "serve"]


def build_app(svc: Service) -> FastAPI:
    """The API of ``svc`` and the dashboard, in one app."""
    app = create_app(svc)
    mount(app, svc)
    return app


def serve(config: ServeConfig) -> None:
    """Prepare and start a service with ``config`` and serve it on uvicorn until interrupted; then
    close it."""
    import uvicorn

    svc = Service(config)
    svc.prepare()
    svc.start()
    app = build_app(svc)
    # (uvicorn re-raises SIGTERM / SIGINT after its shutdown, which ends the process before ``finally``
    # runs: close at the application's shutdown, so that replicas' processes are stopped too; in the
    # app's lifespan, since Starlette runs no on_shutdown handler of an app that has a lifespan)
    app.router.lifespan_context = _closing(app.router.lifespan_context, svc)
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level,
                                           access_log=False, server_header=False, timeout_graceful_shutdown=5))
    threading.Thread(target=_when_listening, args=(server, svc), name="kant-ready", daemon=True).start()
    try:
        server.run()
    finally:
        svc.close()


def _closing(inner: Callable[[Any], AbstractAsyncContextManager[Any]], svc: Service
             ) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """The app's lifespan ``inner``, with ``svc`` closed at its end."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with inner(app):
            try:
                yield
            finally:
                svc.close()

    return lifespan


def _when_listening(server: Any, svc: Service) -> None:
    """Tell ``svc`` it is ready once uvicorn listens (it writes the admin token file then)."""
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.05)
    svc.ready()
