"""Who may drive the review app: an ASGI middleware in front of every request.

The ``Host`` header must name an allowed host (loopback names, ``--host``, ``--allow-host``), which
defeats DNS rebinding (another name pointed at 127.0.0.1); a request that changes anything (a label,
a query, a sign-in) must carry the app's own ``Origin``, so another web page open in the same browser
cannot post to it. Every answer carries a Content-Security-Policy that runs only the app's own script
and styles, so even text that escaped escaping could not run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import PlainTextResponse

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""Only the app's own files run or style the page: an injected script or inline handler could not run."""
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(host: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8765`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware: the ``Host`` and ``Origin`` checks, and the security headers of every answer."""

    def __init__(self, app: ASGIApp, hosts: set[str], port: int) -> None:
        self.app = app
        self.hosts = hosts
        self.port = port

    def origins(self) -> set[str]:
        """The origins of the app's own pages."""
        out = set()
        for h in self.hosts:
            shown = f"[{h}]" if ":" in h else h
            out.add(f"http://{shown}:{self.port}")
            if self.port == 80:
                out.add(f"http://{shown}")
        return out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.refusal(scope["method"], headers)
        if refusal is not None:
            await PlainTextResponse(refusal, status_code=403, headers=_SECURITY)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                present = {k.lower() for k, _ in message["headers"]}
                for k, v in _SECURITY.items():
                    if k.encode() not in present:
                        message["headers"].append((k.encode(), v.encode()))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def refusal(self, method: str, headers: dict[str, str]) -> str | None:
        """Why a request is refused, or None."""
        if host_name(headers.get("host", "")) not in self.hosts:
            return "refused: this Host is not allowed (rose review answers only its own address; see --allow-host)"
        if method in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is None:
            if headers.get("sec-fetch-site") == "same-origin":
                return None
            return "refused: a request that changes something must come from the app's own pages (no Origin)"
        if origin.lower().rstrip("/") not in self.origins():
            return "refused: a request that changes something must come from the app's own pages (other Origin)"
        return None


_SECURITY = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # "no-referrer" would make browsers send "Origin: null" on posts
    "cache-control": "no-store",
}
