"""The server's transport: the listen address checked before binding, the open-file and connection limits,
gRPC channel options, TLS credentials from PEM files, and server reflection under v1alpha and v1.

Pure set-up steps over a :class:`~ldp_aggregator.server_config.ServerConfig`; :mod:`ldp_aggregator.server`
runs them when it starts a server.
"""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

from ldp_aggregator.server_config import ServerConfig
from ldp_client.errors import InvalidParameterError, LdpError

__all__ = ["REFLECTION_V1_SERVICE", "AddressInUseError", "raise_open_file_limit"]

log = logging.getLogger("ldp_aggregator")

_AioReflectionServicer: Any = reflection.aio.ReflectionServicer  # type: ignore[attr-defined]
#: The stable reflection service; grpcio-reflection only serves v1alpha, whose messages are identical.
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
# File descriptors kept free for the store (each SQLite connection holds the database, WAL and
# shared-memory files), the metrics port, logs and gRPC's own; the rest may be client connections.
_FD_RESERVE = 128
_MIN_CONNECTIONS = 16


class AddressInUseError(LdpError):
    """The listen address is taken (another process, perhaps another aggregator, listens on it)."""


def _read_pem(field_name: str, path: Path) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidParameterError(field_name, str(path), f"a readable PEM file ({exc.strerror})") from None
    if b"-----BEGIN " not in data:
        raise InvalidParameterError(field_name, str(path), "a PEM file (no '-----BEGIN' line found)")
    return data


def _check_address_free(listen: str) -> None:
    """Fail with one clear line if ``listen`` cannot be bound: in use, not of this host, unresolvable.

    gRPC binds with ``SO_REUSEPORT`` by default, which let a second server share the port with the first
    (calls then alternated between two databases). The server turns that off; this probe runs first, for
    every address the host resolves to, so that a taken address is reported plainly, before the store is
    opened, and also when only one of several addresses (``localhost``: 127.0.0.1 and ::1) is taken. An
    address of a family this host lacks (::1 without IPv6) is skipped, as gRPC skips it, unless none is left.
    """
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    if port == 0:
        return  # any free port
    name = host.removeprefix("[").removesuffix("]")
    try:
        infos = socket.getaddrinfo(name or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidParameterError(
            "listen", listen, f"a HOST:PORT whose host resolves ({exc.strerror})"
        ) from None
    unusable: list[OSError] = []
    for family, kind, proto, _, address in infos:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError as exc:  # e.g. no IPv6 in this kernel
            unusable.append(exc)
            continue
        with probe:
            try:
                # As gRPC does: SO_REUSEADDR binds over connections in TIME_WAIT, never over a listener.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # "::" is dual-stack in gRPC: probe the IPv4 side too
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(name not in ("", "::")))
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise AddressInUseError(
                        f"listen={listen}: address already in use (another process, perhaps another"
                        " ldp-aggregator, listens on it): stop it or choose another --listen port"
                    ) from None
                if exc.errno == errno.EACCES:
                    raise InvalidParameterError(
                        "listen", listen, "a port this user may bind (ports below 1024 need privileges)"
                    ) from None
                unusable.append(exc)
    if unusable and len(unusable) == len(infos):
        first = unusable[0]
        if first.errno == errno.EADDRNOTAVAIL:
            raise InvalidParameterError(
                "listen", listen, "an address of this host (this one is not assigned to it)"
            )
        raise InvalidParameterError("listen", listen, f"an address this host can bind ({first.strerror})")


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit; returns (soft, hard) as they are now.

    Every client connection is a file descriptor: with a low soft limit (1024 or less is common) a flood
    of idle sockets would exhaust it and stop the server from accepting anyone (observed: 300 silent
    sockets under a 256-descriptor limit froze new clients for a minute).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Some systems refuse "infinity" as the soft value: ask for 2^20 then.
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # keep the soft limit; max_connections is lowered to fit it
    return soft, hard


def _connection_cap(config: ServerConfig) -> int:
    """``max_connections``, lowered to fit the open-file limit (minus a reserve) when that is smaller."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return config.max_connections
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return config.max_connections
    return max(_MIN_CONNECTIONS, min(config.max_connections, soft - _FD_RESERVE))


def _grpc_options(config: ServerConfig, max_connections: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.so_reuseport", 0),  # exclusive port: a second server fails to bind instead of sharing it
        ("grpc.max_receive_message_length", config.max_message_bytes),
        # Answers can carry a whole accumulator (ExportCampaign): room for the largest one allowed.
        ("grpc.max_send_message_length", 64 * 1024 * 1024 + config.limits.max_accumulator_bytes),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        ("grpc.server_handshake_timeout_ms", int(config.handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(config.idle_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", int(config.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]


def _register_reflection_v1_descriptor() -> None:
    """Put ``grpc/reflection/v1/reflection.proto`` in the default pool (v1alpha's, renamed), once.

    Then a v1 client can also describe the reflection service itself, as it can every other service.
    """
    pool = descriptor_pool.Default()
    name = "grpc/reflection/v1/reflection.proto"
    try:
        pool.FindFileByName(name)
        return
    except KeyError:
        pass
    file_proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file_proto)
    old, new = "grpc.reflection.v1alpha", "grpc.reflection.v1"
    file_proto.name, file_proto.package = name, new
    file_proto.options.Clear()
    for message in file_proto.message_type:
        for f in message.field:
            if f.HasField("type_name"):  # (assigning "" would mark a scalar field as typed)
                f.type_name = f.type_name.replace(f".{old}.", f".{new}.")
    for service in file_proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(f".{old}.", f".{new}.")
            method.output_type = method.output_type.replace(f".{old}.", f".{new}.")
    try:
        pool.Add(file_proto)
    except (TypeError, ValueError) as exc:  # e.g. another build of it is there: v1 calls still work
        log.warning("could not describe %s under reflection v1: %s", name, exc)


def _enable_reflection(server: grpc.aio.Server, service_names: tuple[str, ...]) -> None:
    """Server reflection under ``grpc.reflection.v1alpha`` and ``grpc.reflection.v1`` (one servicer).

    The two versions' messages are the same on the wire (v1 only renamed the package), so v1 is served by
    the v1alpha servicer through a generic handler with the v1alpha message classes.
    """
    _register_reflection_v1_descriptor()
    names = (*service_names, reflection.SERVICE_NAME, REFLECTION_V1_SERVICE)
    servicer = _AioReflectionServicer(names)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for service in (reflection.SERVICE_NAME, REFLECTION_V1_SERVICE):
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )


def _check_tls_files(cert: Path, key: Path, client_ca: Path | None) -> None:
    """Load the files as OpenSSL will, so that a key that does not match its certificate (or an unusable
    file) is named here: gRPC would only report that the address could not be bound (issue 13)."""
    import ssl

    def no_password() -> str:
        raise InvalidParameterError(
            "tls_key", str(key), "an unencrypted PEM private key (gRPC takes no passphrase)"
        )

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert), str(key), password=no_password)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            raise InvalidParameterError(
                "tls_key",
                str(key),
                f"the private key of the certificate in tls_cert={str(cert)!r} (this key does not match it)",
            ) from None
        raise InvalidParameterError(
            "tls_cert/tls_key", f"{cert}, {key}", f"a PEM certificate chain and its PEM private key ({exc})"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except ssl.SSLError as exc:
            raise InvalidParameterError(
                "tls_client_ca", str(client_ca), f"PEM CA certificates ({exc})"
            ) from None


def _server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    if config.tls_cert is None or config.tls_key is None:
        return None
    cert = _read_pem("tls_cert", config.tls_cert)
    key = _read_pem("tls_key", config.tls_key)
    ca = _read_pem("tls_client_ca", config.tls_client_ca) if config.tls_client_ca is not None else None
    _check_tls_files(config.tls_cert, config.tls_key, config.tls_client_ca)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )
