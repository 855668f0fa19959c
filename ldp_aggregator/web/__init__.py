"""A read-only web view of the aggregator for operators and analysts (``serve --web-port PORT``).

It runs in the aggregator's own process and event loop, on a port of its own (off by default; loopback
by default, ``--web-host`` to change it), with TLS from the gRPC port's certificate options and access
by the same analyst and admin tokens. The modules, bottom up:

* :mod:`~ldp_aggregator.web.http`: a small HTTP/1.1 server on asyncio streams (GET and HEAD only,
  bounded requests, no bodies, one request per connection);
* :mod:`~ldp_aggregator.web.data`: the documents it shows, made by the Analyst service's own methods and
  JSON functions (the same numbers), with the rates and a cache of long computations;
* :mod:`~ldp_aggregator.web.svg`, :mod:`~ldp_aggregator.web.cells`, :mod:`~ldp_aggregator.web.sections`
  and :mod:`~ldp_aggregator.web.pages`: inline-SVG interval plots, table cells, the sections of a calm
  campaign's marginals and an SVIM stage's itemsets, and the server-rendered HTML (no script);
* :mod:`~ldp_aggregator.web.app`: routes, the token check, query strings, error pages.

See ``docs/web.md``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from ldp_aggregator.auth import Authenticator
from ldp_aggregator.ratelimit import RateLimiter
from ldp_aggregator.service import Aggregator
from ldp_aggregator.web.app import WebApp
from ldp_aggregator.web.data import WebReader
from ldp_aggregator.web.http import HttpServer
from ldp_client.errors import InvalidParameterError

__all__ = ["WebView", "web_ssl_context"]


def web_ssl_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    """The web port's TLS: the gRPC port's certificate and key, and with ``client_ca`` client
    certificates required (mutual TLS), as on the gRPC port. TLS 1.2 at least."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
        if client_ca is not None:
            ctx.load_verify_locations(client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise InvalidParameterError(
            "tls_cert", cert, f"a PEM certificate chain with its key usable for the web port ({exc})"
        ) from None
    return ctx


@dataclass(kw_only=True, eq=False)
class WebView:
    """The web view of one aggregator: :meth:`start` in the aggregator's event loop, :meth:`stop`."""

    aggregator: Aggregator
    authenticator: Authenticator
    limiter: RateLimiter | None = None
    ssl_context: ssl.SSLContext | None = None
    port: int = 0
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.reader = WebReader(self.aggregator)
        self._app = WebApp(self.reader, self.authenticator, self.limiter)
        self._http = HttpServer(self._app, render_error=self._app.render_error, ssl_context=self.ssl_context)

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{scheme}://{host}:{self.port}/"

    async def start(self, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); returns the port.

        Raises:
            InvalidParameterError: The address cannot be bound (field ``web_port``).
        """
        try:
            self.port = await self._http.start(self.host, port)
        except OSError as exc:
            raise InvalidParameterError(
                "web_port", port, f"a free TCP port on {self.host} ({exc.strerror or exc})"
            ) from None
        return self.port

    async def stop(self) -> None:
        await self._http.stop()
        self.reader.close()
