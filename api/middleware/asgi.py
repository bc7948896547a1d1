"""The one skeleton of the API's observing middlewares (pure ASGI: no per-request task and
no body buffering, unlike Starlette's ``BaseHTTPMiddleware``).

:class:`ObservingMiddleware` hands every scope that is not an HTTP call it
:meth:`~ObservingMiddleware.observes` straight to the app. For the others it runs
:meth:`~ObservingMiddleware.serve` with a ``send`` that notes the response's status (and
lets :meth:`~ObservingMiddleware.starting` add headers), and calls
:meth:`~ObservingMiddleware.observe` with that status and the call's duration however the
call ended. Used by the Prometheus histograms (:mod:`api.middleware.metrics`) and the limits and
usage log (:mod:`api.middleware.usage`).
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ObservingMiddleware:
    """Subclasses implement :meth:`observe`; see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def observes(self, scope: Scope) -> bool:
        """Whether this HTTP call is observed (all, unless a subclass says otherwise)."""
        return True

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the call: the app, unless a subclass answers some calls itself."""
        await self.app(scope, receive, send)

    def starting(self, scope: Scope, message: Message) -> None:
        """Amend the response's ``http.response.start`` message before it is sent."""

    def observe(self, scope: Scope, status: int, seconds: float) -> None:
        """Record the finished call."""
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.observes(scope):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes every handler is answered 500 by Starlette

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                self.starting(scope, message)
            await send(message)

        try:
            await self.serve(scope, receive, send_status)
        finally:
            self.observe(scope, status, time.perf_counter() - started)
