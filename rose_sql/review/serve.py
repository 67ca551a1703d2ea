"""Serving the review app with uvicorn on a socket bound here (so that port 0 works and the app knows its port)."""

from __future__ import annotations

import socket
from collections.abc import Callable

from rose_sql.review.settings import LOOPBACK, ReviewConfig


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when the host is one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    """Whether the address reaches only this machine."""
    return host in LOOPBACK or host.startswith("127.")


def serve(config: ReviewConfig, *, ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; ``ready`` is told the URL once the socket is bound."""
    import uvicorn

    from rose_sql.review.app import create_app

    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    app = create_app(config, port=port)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    if ready is not None:
        ready(f"http://{shown}:{port}/")
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False, server_header=False)
    )
    server.run(sockets=[sock])
