"""A small HTTP/1.1 server on asyncio streams: GET and HEAD only, bounded requests, one request per
connection.

The web view needs very little of HTTP: no request bodies, no keep-alive, no uploads. A few hundred lines
on :func:`asyncio.start_server` keep it in the aggregator's own event loop (no thread, no new dependency)
and make every limit explicit:

* the request line is at most :data:`MAX_REQUEST_LINE` bytes (longer: 414 URI Too Long), the header block
  at most :data:`MAX_HEADER_BYTES` bytes in at most :data:`MAX_HEADERS` lines (more: 431 Request Header
  Fields Too Large);
* a request with a body (``Content-Length`` above 0 or any ``Transfer-Encoding``) is refused with 413
  Content Too Large: nothing this server serves takes one, and it is never read;
* a method other than GET or HEAD is refused with 405 and ``Allow: GET, HEAD``;
* a client that has not sent its whole header block within :data:`HEADER_TIMEOUT_S` gets 408 and is
  closed, and at most ``max_connections`` connections are served at once (more wait in the kernel's
  backlog), so slow clients cannot hold the process;
* the response always closes the connection (``Connection: close``).

The handler (``ldp_aggregator.web.app``) gets a parsed :class:`Request` and returns a :class:`Response`; an
exception it lets escape becomes a plain 500 with nothing of the exception in it (logged on the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Final

__all__ = [
    "HEADER_TIMEOUT_S",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_REQUEST_LINE",
    "HttpError",
    "HttpServer",
    "Request",
    "Response",
]

log = logging.getLogger("ldp_aggregator")

MAX_REQUEST_LINE: Final = 8192
"""Longest request line (method, target, version), bytes; a longer one is answered 414."""
MAX_HEADER_BYTES: Final = 16384
"""Largest header block, bytes; a larger one is answered 431."""
MAX_HEADERS: Final = 64
"""Most header lines; more are answered 431."""
HEADER_TIMEOUT_S: Final = 10.0
"""Time a client has to send its request line and headers; then 408 and the connection is closed."""
ALLOWED_METHODS: Final = ("GET", "HEAD")
_WRITE_TIMEOUT_S: Final = 30.0


class HttpError(Exception):
    """A request refused with ``status``; ``message`` is one line for the client (field, value, rule)."""

    def __init__(
        self, status: HTTPStatus, message: str, *, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


@dataclass(frozen=True, kw_only=True)
class Request:
    """One parsed request. ``path`` and ``query`` are raw (still percent-encoded); header names are lower
    case, and a header sent more than once keeps every value."""

    method: str
    path: str
    query: str
    headers: dict[str, tuple[str, ...]]
    tls: bool
    peer: str = ""
    """The client as gRPC names a peer (``ipv4:HOST:PORT``, ``ipv6:[HOST]:PORT``), for per-address limits."""

    def header(self, name: str) -> str | None:
        """The header's value if it came exactly once (None if absent; HttpError 400 if repeated)."""
        values = self.headers.get(name.lower(), ())
        if len(values) > 1:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"header {name}: sent {len(values)} times; allowed once")
        return values[0] if values else None


@dataclass(kw_only=True)
class Response:
    """A complete response; ``body`` is omitted on the wire for HEAD (its length is still announced)."""

    status: HTTPStatus
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]
ErrorRenderer = Callable[[HttpError, "Request | None"], Response]


def _plain_error(err: HttpError, request: Request | None) -> Response:
    del request
    return Response(
        status=err.status, body=f"{err.status.value} {err.status.phrase}: {err.message}\n".encode()
    )


async def _read_line(reader: asyncio.StreamReader, too_long: HttpError) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise too_long from None
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise ConnectionResetError("client closed the connection") from None
        raise HttpError(HTTPStatus.BAD_REQUEST, "the request ended before its header block did") from None
    return line.rstrip(b"\r\n")


async def read_request(reader: asyncio.StreamReader, *, tls: bool, peer: str = "") -> Request:
    """Read and check one request line and header block (module docstring for the limits).

    Raises:
        HttpError: what to answer (400, 405, 413, 414, 431, 505).
        ConnectionResetError: the client closed the connection before sending anything.
    """
    too_long = HttpError(
        HTTPStatus.REQUEST_URI_TOO_LONG, f"request line: allowed at most {MAX_REQUEST_LINE:,} bytes"
    )
    line = await _read_line(reader, too_long)
    if len(line) > MAX_REQUEST_LINE:
        raise too_long
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(HTTPStatus.BAD_REQUEST, "request line: allowed ASCII only (percent-encode)") from None
    parts = text.split(" ")
    if len(parts) != 3 or not all(parts):
        raise HttpError(HTTPStatus.BAD_REQUEST, "request line: allowed 'METHOD /path?query HTTP/1.1'")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise HttpError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"version {version[:16]!r}: allowed HTTP/1.x")
    headers: dict[str, list[str]] = {}
    total = 0
    too_big = HttpError(
        HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        f"headers: allowed at most {MAX_HEADERS} lines and {MAX_HEADER_BYTES:,} bytes",
    )
    while True:
        raw = await _read_line(reader, too_big)
        if not raw:
            break
        total += len(raw) + 2
        if total > MAX_HEADER_BYTES or sum(len(v) for v in headers.values()) >= MAX_HEADERS:
            raise too_big
        name, sep, value = raw.partition(b":")
        if not sep or not name or name != name.strip():
            raise HttpError(HTTPStatus.BAD_REQUEST, "header line: allowed 'Name: value'")
        try:
            key, val = name.decode("ascii").lower(), value.strip().decode("latin-1")
        except UnicodeDecodeError:
            raise HttpError(HTTPStatus.BAD_REQUEST, "header name: allowed ASCII only") from None
        headers.setdefault(key, []).append(val)
    if method not in ALLOWED_METHODS:
        raise HttpError(
            HTTPStatus.METHOD_NOT_ALLOWED,
            f"method {method[:16]!r}: this view is read-only; allowed {', '.join(ALLOWED_METHODS)}",
            headers=(("Allow", ", ".join(ALLOWED_METHODS)),),
        )
    lengths = headers.get("content-length", [])
    if "transfer-encoding" in headers or any(v.strip() != "0" for v in lengths):
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body: allowed none (GET and HEAD only)")
    if not target.startswith("/") or target.startswith("//"):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"request target {target[:64]!r}: allowed a path from '/'")
    path, _, query = target.partition("?")
    return Request(
        method=method,
        path=path,
        query=query.partition("#")[0],
        headers={k: tuple(v) for k, v in headers.items()},
        tls=tls,
        peer=peer,
    )


def _peer(writer: asyncio.StreamWriter) -> str:
    """The client's address in gRPC's peer form (``ldp_aggregator.ratelimit.peer_address`` reads it)."""
    name = writer.get_extra_info("peername")
    if not isinstance(name, tuple) or len(name) < 2:
        return str(name)
    host, port = name[0], name[1]
    return f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"


def _encode(response: Response, *, head: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {response.status.value} {response.status.phrase}",
        f"Date: {formatdate(usegmt=True)}",
        "Server: ldp-aggregator",
        "Connection: close",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        *(f"{k}: {v}" for k, v in response.headers),
    ]
    head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head_bytes if head else head_bytes + response.body


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0: a free port) in the running event loop.

    Args:
        handler: Answers a parsed request.
        render_error: Turns a refused request into a response (an HTML or JSON page); default plain text.
        ssl_context: TLS for every connection (None: plain HTTP).
        max_connections: Connections served at once.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        render_error: ErrorRenderer = _plain_error,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 64,
    ) -> None:
        self._handler = handler
        self._render_error = render_error
        self._ssl = ssl_context
        self._slots = asyncio.Semaphore(max_connections)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        """Bind and listen; returns the bound port. Raises OSError if the address cannot be bound."""
        self._server = await asyncio.start_server(
            self._accept,
            host.removeprefix("[").removesuffix("]"),
            port,
            ssl=self._ssl,
            limit=max(MAX_REQUEST_LINE, MAX_HEADER_BYTES) + 2,
            ssl_handshake_timeout=HEADER_TIMEOUT_S if self._ssl is not None else None,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        """Stop listening and end the connections still open."""
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            async with self._slots:
                await self._serve_one(reader, writer)
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 5.0)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request: Request | None = None
        try:
            request = await asyncio.wait_for(
                read_request(reader, tls=self._ssl is not None, peer=_peer(writer)), HEADER_TIMEOUT_S
            )
        except HttpError as err:
            response = self._render_error(err, None)
            response.headers.extend(err.headers)
        except TimeoutError:
            response = _plain_error(
                HttpError(HTTPStatus.REQUEST_TIMEOUT, f"headers not received within {HEADER_TIMEOUT_S:g} s"),
                None,
            )
        except (ConnectionError, ssl.SSLError):
            return
        else:
            try:
                response = await self._handler(request)
            except HttpError as err:
                response = self._render_error(err, request)
                response.headers.extend(err.headers)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("unexpected error in the web view")
                response = self._render_error(
                    HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (logged on the server)"),
                    request,
                )
        head = request is not None and request.method == "HEAD"
        with contextlib.suppress(ConnectionError, TimeoutError, ssl.SSLError):
            writer.write(_encode(response, head=head))
            await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_S)
