"""How the command lines reach an aggregator: access token and TLS, in one place for both (issue 13).

``ldp-aggregator`` (options before the command) and ``ldp-sim`` (``run`` and ``sweep`` with ``--mode grpc
--server``) take the same client options, with the same environment variables:

    ``--token TOKEN``    ``LDP_TOKEN``     sent with every call as ``authorization: Bearer TOKEN``
    ``--tls-ca PEM``     ``LDP_TLS_CA``    use TLS, trusting this CA
    ``--tls-cert PEM``   ``LDP_TLS_CERT``  client certificate, for mutual TLS (with ``--tls-key``)
    ``--tls-key PEM``    ``LDP_TLS_KEY``   the private key of ``--tls-cert``

:func:`read_client_access` checks them and reads the PEM files once, in the calling process, into a
:class:`ClientAccess`: strings and bytes only, so it pickles to the worker processes ``ldp-sim`` spawns,
which open their own channels from it. :meth:`ClientAccess.channel` opens a channel that sends the token
with every call (an interceptor, so no call site can forget it). :func:`rpc_error_message` words the
errors of refused credentials and unreachable servers, naming the option or variable that fixes them.
The typer declarations of the options are in :mod:`ldp_aggregator.cli_common`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import grpc

from ldp_client.errors import LdpError, shown

__all__ = [
    "ENV_TLS_CA",
    "ENV_TLS_CERT",
    "ENV_TLS_KEY",
    "ENV_TOKEN",
    "TLS_HINT",
    "ClientAccess",
    "ClientOptionError",
    "TokenHints",
    "check_token",
    "read_client_access",
    "rpc_error_message",
]

ENV_TOKEN: Final = "LDP_TOKEN"
ENV_TLS_CA: Final = "LDP_TLS_CA"
ENV_TLS_CERT: Final = "LDP_TLS_CERT"
ENV_TLS_KEY: Final = "LDP_TLS_KEY"

#: What a client needs to reach a TLS server (the end of every "cannot reach" message).
TLS_HINT: Final = (
    "a TLS server needs --tls-ca (LDP_TLS_CA), mutual TLS also --tls-cert and --tls-key (docs/tls.md)"
)
_CREATE = "ldp-aggregator token create --role {role} --db PATH, PATH being the server's database"
_PEM_MARKER = b"-----BEGIN "
_MAX_TOKEN_CHARS = 400  # "ldp_" + 43 base64url characters; the server refuses anything much longer


class ClientOptionError(LdpError):
    """A client option cannot be used (unreadable or non-PEM file, a certificate without its key, a
    token that cannot travel in gRPC metadata); the message names the option and its variable."""


@dataclass(frozen=True, kw_only=True)
class ClientAccess:
    """What a client sends to reach a server: an access token, and TLS material as PEM bytes.

    Immutable, hashable and picklable (strings and bytes only). Its ``repr`` shows which parts are set,
    never the token or a key.
    """

    token: str | None = None
    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None

    def __repr__(self) -> str:
        parts = [name for name in ("token", "tls_ca", "tls_cert", "tls_key") if getattr(self, name)]
        return f"ClientAccess({', '.join(f'{name}=<set>' for name in parts)})"

    @property
    def uses_tls(self) -> bool:
        """True when channels use TLS (a CA or a client certificate was given)."""
        return self.tls_ca is not None or self.tls_cert is not None

    def with_token(self, token: str | None) -> ClientAccess:
        """The same TLS material with another token (``ldp-sim``: its reporter token)."""
        return dataclasses.replace(self, token=token)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials for a channel, or None for plaintext."""
        if not self.uses_tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.tls_ca, private_key=self.tls_key, certificate_chain=self.tls_cert
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata that carries the token (empty without one)."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def open_channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A channel to ``target`` with this TLS material (or plaintext), sending no token."""
        creds = self.credentials()
        if creds is not None:
            return grpc.secure_channel(target, creds, options=list(options))
        return grpc.insecure_channel(target, options=list(options))

    def authorize(self, channel: grpc.Channel) -> grpc.Channel:
        """``channel`` sending this token with every call (``channel`` itself without a token).

        Closing the returned channel closes ``channel``; several tokens can share one connection.
        """
        metadata = self.metadata()
        if not metadata:
            return channel
        return grpc.intercept_channel(channel, _Authorization(metadata))

    def channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A channel to ``target`` with this TLS material that sends the token with every call."""
        return self.authorize(self.open_channel(target, options))


class _CallDetails(grpc.ClientCallDetails):
    """A call's details with metadata added (grpc's own class has no public constructor)."""

    def __init__(self, base: grpc.ClientCallDetails, extra: tuple[tuple[str, str], ...]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = (*tuple(base.metadata or ()), *extra)
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


# The interceptor classes are generic in the type stubs only (not subscriptable at run time).
if TYPE_CHECKING:
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.UnaryStreamClientInterceptor[Any, Any]
    _StreamUnary = grpc.StreamUnaryClientInterceptor[Any, Any]
    _StreamStream = grpc.StreamStreamClientInterceptor[Any, Any]
else:
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.UnaryStreamClientInterceptor
    _StreamUnary = grpc.StreamUnaryClientInterceptor
    _StreamStream = grpc.StreamStreamClientInterceptor


class _Authorization(_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream):
    """Adds the ``authorization`` metadata to every call, of every kind, on a channel."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(details, self._metadata)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, request_iterator: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, request_iterator: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), request_iterator)


def check_token(token: str | None, option: str = "--token", env: str = ENV_TOKEN) -> str | None:
    """``token`` if it can travel as gRPC metadata (printable ASCII, no spaces); None for None or "".

    Raises:
        ClientOptionError: naming ``option`` and ``env``, never echoing the token.
    """
    if not token:
        return None
    if len(token) > _MAX_TOKEN_CHARS or not all("!" <= ch <= "~" for ch in token):
        raise ClientOptionError(
            f"{option} (or {env}): the token given ({len(token)} characters) is not one: allowed the "
            "printable ASCII text without spaces that ldp-aggregator token create printed (ldp_...)"
        )
    return token


def _read_pem(option: str, env: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ClientOptionError(
            f"{option} {shown(str(path))} (or {env}): cannot read it ({exc.strerror or exc}); allowed a "
            "readable PEM file"
        ) from None
    if _PEM_MARKER not in data:
        raise ClientOptionError(
            f"{option} {shown(str(path))} (or {env}): not a PEM file (no '-----BEGIN' line); allowed a PEM "
            "file as docs/tls.md makes them"
        )
    return data


def read_client_access(
    *,
    token: str | None = None,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> ClientAccess:
    """The client options checked, with the PEM files read (call it where they are given, once).

    Raises:
        ClientOptionError: an unreadable or non-PEM file, ``--tls-cert`` without ``--tls-key`` (or the
            reverse), or a token that cannot be sent; the message names the option and its variable.
    """
    if (tls_cert is None) != (tls_key is None):
        raise ClientOptionError(
            "--tls-cert and --tls-key go together (the client certificate and its key; LDP_TLS_CERT and "
            "LDP_TLS_KEY): give both, or neither"
        )
    return ClientAccess(
        token=check_token(token),
        tls_ca=_read_pem("--tls-ca", ENV_TLS_CA, tls_ca),
        tls_cert=_read_pem("--tls-cert", ENV_TLS_CERT, tls_cert),
        tls_key=_read_pem("--tls-key", ENV_TLS_KEY, tls_key),
    )


@dataclass(frozen=True, kw_only=True)
class TokenHints:
    """How one command line takes a token, for the messages of :func:`rpc_error_message`.

    Attributes:
        usage: where the option goes, e.g. ``before the command (ldp-aggregator --token TOKEN campaign
            list)``.
        option: the option (``--token``).
        env: its environment variable (``LDP_TOKEN``).
        role: the role the token needs when the program always needs the same one (``ldp-sim``: admin for
            its Analyst calls, reporter for its clients); None when it depends on the command.
        purpose: why that role, e.g. ``ldp-sim creates campaigns and reads their estimates``.
    """

    usage: str
    option: str = "--token"
    env: str = ENV_TOKEN
    role: str | None = None
    purpose: str = ""


def rpc_error_message(status: str, details: str, *, token_given: bool, server: str, hints: TokenHints) -> str:
    """One line for a failed call (status by name), saying which option or variable fixes an access or
    connection error; any other status is ``STATUS: details``."""
    role = hints.role or "admin"
    why = f" ({hints.purpose})" if hints.purpose else ""
    if status == "UNAUTHENTICATED":
        if token_given:
            return (
                f"UNAUTHENTICATED: {details}: the token from {hints.option} or {hints.env} was refused "
                f"(revoked, or made for another database); create one with {_CREATE.format(role=role)}"
            )
        purpose = f": {hints.purpose}" if hints.purpose else ""
        needed = f" ({'an' if role[0] in 'aeiou' else 'a'} {role} token{purpose})" if hints.role else ""
        return (
            f"UNAUTHENTICATED: this server needs an access token{needed}: give it with {hints.option} TOKEN "
            f"{hints.usage} or in the environment variable {hints.env}; create one with "
            f"{_CREATE.format(role=role)}"
        )
    if status == "PERMISSION_DENIED":
        if hints.role is None:
            return (
                f"PERMISSION_DENIED: {details}: give a token of that role with {hints.option} TOKEN or "
                f"{hints.env} (admin: create and close campaigns, and read; analyst: read; reporter: "
                "submit); create one with ldp-aggregator token create --role ROLE --db PATH"
            )
        article = "an" if role[0] in "aeiou" else "a"
        return (
            f"PERMISSION_DENIED: {details}: give {article} {role} token with {hints.option} TOKEN or "
            f"{hints.env}{why}; create one with {_CREATE.format(role=role)}"
        )
    if status == "UNAVAILABLE":
        return (
            f"UNAVAILABLE: cannot reach the aggregator at --server {server} ({details}); is ldp-aggregator "
            f"serve running there? {TLS_HINT[0].upper()}{TLS_HINT[1:]}"
        )
    return f"{status}: {details}"
