"""The one gate every ``ldp.v1`` call passes before its servicer: token, role, rate, size, message.

:class:`Guard` is a ``grpc.aio`` server interceptor. For each ``ldp.*`` RPC it replaces the handler by one
that receives the raw request bytes and, in this order,

1. authenticates and authorizes the call (:mod:`ldp_aggregator.auth`): UNAUTHENTICATED, PERMISSION_DENIED;
   a call without a valid token also counts against its client address's failed-authentication limit,
   and beyond it gets RESOURCE_EXHAUSTED (with ``ldp-retry-after-ms``) instead;
2. takes one request from the caller's request bucket (:mod:`ldp_aggregator.ratelimit`): RESOURCE_EXHAUSTED;
3. parses the message itself, so that bytes that are not a valid message (bad wire format, invalid UTF-8
   in a string) get INVALID_ARGUMENT with a message instead of gRPC's generic deserialization failure;
4. for a token limited to some campaigns, checks the request's ``campaign_id`` (every message of a
   stream): PERMISSION_DENIED for any other campaign;
5. checks sizes (reports per batch, candidates per request) and takes the batch's reports from the
   caller's report bucket: RESOURCE_EXHAUSTED, with ``ldp-retry-after-ms`` trailing metadata when only
   the rate is exceeded;

then calls the servicer. Everything refused here is refused before any decoding into numpy or any store
work, so it never changes stored state. Status codes come from the same table as the servicers'
(:func:`ldp_aggregator.servicers.status_for`), so errors map to codes in one place. Health checking and
reflection pass through untouched (they need no token). The guard also records per-RPC and rejection
metrics (:mod:`ldp_aggregator.metrics`); it logs no client address, token or report content (failed
authentications are summed up in an ``auth_failures`` warning at most once a minute, as counts only).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import grpc

from ldp_aggregator.auth import Authenticator, PermissionDeniedError, Principal, UnauthenticatedError
from ldp_aggregator.logs import log_event
from ldp_aggregator.metrics import Metrics
from ldp_aggregator.ratelimit import (
    RETRY_AFTER_METADATA,
    AuthFailuresLimitedError,
    RateLimitedError,
    RateLimiter,
    RequestTooLargeError,
)
from ldp_aggregator.servicers import status_for, status_message
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.errors import LdpError

__all__ = ["Guard", "MalformedMessageError"]

log = logging.getLogger("ldp_aggregator")

_GUARDED_PREFIX: Final = "/ldp."
_ANONYMOUS: Final = "-anonymous-"  # rate-limit key of callers when authentication is off
_SUBMIT_METHODS: Final = frozenset(
    {"/ldp.v1.Collector/Submit", "/ldp.v1.Collector/SubmitStream", "/ldp.v1.Collector/SubmitReport"}
)
# Failed authentications are logged as one summary line per this many seconds at most.
_AUTH_LOG_INTERVAL_S: Final = 60.0
# An unknown token makes the guard re-read the tokens at once (a token created a moment ago is accepted
# without waiting for the periodic refresh), at most once per this many seconds whatever the callers send.
_RELOAD_MIN_INTERVAL_S: Final = 0.25


class MalformedMessageError(LdpError, ValueError):
    """The request bytes are not a valid message of the RPC's type (gRPC INVALID_ARGUMENT)."""


def _parse(deserialize: Callable[[bytes], Any] | None, raw: bytes, type_name: str) -> Any:
    if deserialize is None:
        return raw
    try:
        return deserialize(raw)
    except Exception as exc:  # protobuf raises DecodeError (and, for invalid UTF-8, sometimes others)
        raise MalformedMessageError(f"request is not a valid {type_name} message: {exc}") from None


def _reports_in(request: object) -> int:
    if isinstance(request, reports_pb2.ReportBatch):
        return int(request.count)
    if isinstance(request, reports_pb2.Report):
        return 1
    return 0


def _candidates_in(request: object) -> int:
    descriptor = getattr(request, "DESCRIPTOR", None)
    if descriptor is None:
        return 0
    fields = descriptor.fields_by_name
    if "candidates" in fields:
        return len(request.candidates)  # type: ignore[attr-defined]
    if "campaign" in fields and request.HasField("campaign"):  # type: ignore[attr-defined]
        return len(request.campaign.candidates)  # type: ignore[attr-defined]
    return 0


def _check_scope(principal: Principal | None, method: str, request: object) -> None:
    """PERMISSION_DENIED unless a campaign-limited token's request is about one of its campaigns."""
    if principal is None or principal.campaigns is None:
        return
    campaign_id = getattr(request, "campaign_id", None)
    if not isinstance(campaign_id, str):  # fail closed: a scoped token only makes per-campaign calls
        raise PermissionDeniedError(
            f"token {principal.token_id!r} is limited to some campaigns; {method} is not about one campaign"
        )
    principal.check_campaign(campaign_id)


def _reason(exc: BaseException, code: grpc.StatusCode) -> str:
    """Label of ``ldp_reports_rejected_total`` for a refusal."""
    if isinstance(exc, UnauthenticatedError | AuthFailuresLimitedError):
        return "unauthenticated"
    if isinstance(exc, PermissionDeniedError):
        return "permission_denied"
    if isinstance(exc, RateLimitedError):
        return "rate_limited"
    if isinstance(exc, RequestTooLargeError):
        return "too_large"
    if isinstance(exc, MalformedMessageError):
        return "malformed"
    return _code_reason(code)


def _code_reason(code: grpc.StatusCode | None) -> str:
    if code is None:
        return "unknown"
    if code is grpc.StatusCode.FAILED_PRECONDITION:
        return "campaign_closed"
    return str(code.name).lower()


def _short(method: str) -> str:
    """``/ldp.v1.Collector/Submit`` -> ``Collector/Submit`` (metric label)."""
    service, _, name = method.lstrip("/").partition("/")
    return f"{service.rpartition('.')[2]}/{name}"


if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
    _Handler = grpc.RpcMethodHandler[Any, Any]
else:  # the runtime classes are not generic
    _Interceptor = grpc.aio.ServerInterceptor
    _Handler = grpc.RpcMethodHandler


class Guard(_Interceptor):
    """Authentication, authorization, rate and size limits, and message parsing for ``ldp.*`` RPCs.

    Args:
        authenticator: Valid tokens and the on/off state of authentication (shared with the server's
            refresh task, which replaces its tokens).
        limiter: Per-token buckets and size limits.
        metrics: Where to count calls and refusals (None: not counted).
        reload_tokens: Re-reads the stored tokens into ``authenticator`` (None: only the periodic refresh
            does). Called when a call's token is unknown, at most every ``_RELOAD_MIN_INTERVAL_S``, so that
            a token created just now (``token create`` then at once a call with it) is not refused until
            the next refresh.
    """

    def __init__(
        self,
        authenticator: Authenticator,
        limiter: RateLimiter,
        metrics: Metrics | None,
        reload_tokens: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.limiter = limiter
        self.metrics = metrics
        self._reload_tokens = reload_tokens
        self._reloaded_at = -math.inf
        self._auth_failures = 0  # since the last auth_failures log line
        self._auth_limited = 0
        self._auth_logged_at = -math.inf
        self._wrapped: dict[str, tuple[_Handler, _Handler]] = {}  # method -> (servicer's, guarded)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(_GUARDED_PREFIX):
            return handler
        # gRPC calls this for every call; the servicer's handler of a method is the same object each time,
        # so its guarded wrapper is made once and reused (not a new closure and handler per report).
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, handler: _Handler) -> _Handler:
        """The guarded handler of one method (admission, parsing, checks and counting around it)."""
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler),
                request_deserializer=None,  # raw bytes: parsed in _parse
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._stream(method, handler),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        # Server-streaming RPCs (none yet in ldp.v1): the same admission, gRPC's own parsing.
        return self._admission_only(method, handler)

    # ------------------------------------------------------------------ checks

    async def _admit(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tuple[str, Principal | None]:
        """Token, role and request rate; returns the caller's rate-limit key and identity."""
        metadata = context.invocation_metadata()
        try:
            principal = self.authenticator.check(method, metadata)
        except UnauthenticatedError:
            principal = await self._check_after_reload(method, metadata)
            if principal is None:
                self._auth_failed(context)
                raise
        key = _ANONYMOUS if principal is None else principal.token_id
        self.limiter.admit_request(key)
        return key, principal

    async def _check_after_reload(self, method: str, metadata: Any) -> Principal | None:
        """The caller after re-reading the tokens, or None if that is not allowed yet or does not help."""
        now = time.monotonic()
        if self._reload_tokens is None or now - self._reloaded_at < _RELOAD_MIN_INTERVAL_S:
            return None
        self._reloaded_at = now
        try:
            await self._reload_tokens()
        except LdpError:  # the database cannot be read now: the last known tokens decide
            return None
        try:
            return self.authenticator.check(method, metadata)  # PermissionDeniedError propagates
        except UnauthenticatedError:
            return None

    def _auth_failed(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Count a call without a valid token against its address; raises when the address is over."""
        self._auth_failures += 1
        try:
            self.limiter.note_failed_auth(context.peer())
        except AuthFailuresLimitedError:
            self._auth_limited += 1
            raise
        finally:
            now = time.monotonic()
            if now - self._auth_logged_at >= _AUTH_LOG_INTERVAL_S:
                # Counts only: never the token, the address or the metadata.
                log_event(
                    log,
                    "auth_failures",
                    level=logging.WARNING,
                    calls=self._auth_failures,
                    refused_over_limit=self._auth_limited,
                    note="calls without a valid access token since the last auth_failures line",
                )
                self._auth_failures = self._auth_limited = 0
                self._auth_logged_at = now

    def _check_request(
        self, key: str, principal: Principal | None, method: str, request: object, n_reports: int
    ) -> None:
        _check_scope(principal, method, request)
        candidates = _candidates_in(request)
        if candidates:
            self.limiter.check_candidates(candidates)
        if n_reports:
            self.limiter.admit_reports(key, n_reports)

    async def _refuse(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str, exc: Exception, n_reports: int
    ) -> None:
        code = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            log.exception("unexpected error checking a request")
            message = "internal error (logged on the server)"
        else:
            message = status_message(exc)
        self._count(method, code, _reason(exc, code), n_reports)
        trailing: tuple[tuple[str, str], ...] = ()
        if isinstance(exc, RateLimitedError):
            trailing = ((RETRY_AFTER_METADATA, str(math.ceil((exc.retry_after_s or 0.0) * 1000))),)
        await context.abort(code, message, trailing_metadata=trailing)

    def _count(self, method: str, code: grpc.StatusCode | None, reason: str | None, n_reports: int) -> None:
        m = self.metrics
        if m is None:
            return
        m.observe_rpc(_short(method), "UNKNOWN" if code is None else code.name)
        if reason is not None and method in _SUBMIT_METHODS:
            m.observe_rejected(reason, n_reports)

    def _finished(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any], n_reports: int, failed: bool
    ) -> None:
        if self.metrics is None:
            return
        if not failed:
            self._count(method, grpc.StatusCode.OK, None, 0)
            return
        code = context.code()
        code = code if isinstance(code, grpc.StatusCode) else None
        self._count(method, code, _code_reason(code), n_reports)

    # ------------------------------------------------------------------ handlers

    def _unary(self, method: str, handler: _Handler) -> Callable[..., Awaitable[Any]]:
        inner: Any = handler.unary_unary
        deserialize = handler.request_deserializer
        type_name = method.rpartition("/")[2] + " request"

        async def behavior(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            n = 0
            try:
                key, principal = await self._admit(method, context)
                request = _parse(deserialize, raw, type_name)
                n = _reports_in(request)
                self._check_request(key, principal, method, request, n)
            except Exception as exc:
                await self._refuse(context, method, exc, n)
                raise  # unreachable: abort raises
            try:
                response = await inner(request, context)
            except BaseException:
                self._finished(method, context, n, failed=True)
                raise
            self._finished(method, context, n, failed=False)
            return response

        return behavior

    def _stream(self, method: str, handler: _Handler) -> Callable[..., Awaitable[Any]]:
        inner: Any = handler.stream_unary
        deserialize = handler.request_deserializer
        type_name = method.rpartition("/")[2] + " request"

        async def behavior(
            raw_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            try:
                key, principal = await self._admit(method, context)
            except Exception as exc:
                await self._refuse(context, method, exc, 0)
                raise  # unreachable
            current = [0]  # reports of the message being handled, for the rejection count

            async def requests() -> AsyncIterator[Any]:
                # Errors raised here surface inside the servicer's loop, which maps them to their status
                # (the same table); every message before the bad one stays committed (stream semantics).
                async for raw in raw_iterator:
                    current[0] = 0
                    request = _parse(deserialize, raw, type_name)
                    n = _reports_in(request)
                    current[0] = n
                    try:
                        self._check_request(key, principal, method, request, n)
                    except RateLimitedError as exc:
                        ms = math.ceil((exc.retry_after_s or 0.0) * 1000)
                        context.set_trailing_metadata(((RETRY_AFTER_METADATA, str(ms)),))
                        raise
                    yield request

            try:
                response = await inner(requests(), context)
            except BaseException:
                self._finished(method, context, current[0], failed=True)
                raise
            self._finished(method, context, 0, failed=False)
            return response

        return behavior

    def _admission_only(self, method: str, handler: _Handler) -> _Handler:
        async def gate(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            try:
                _, principal = await self._admit(method, context)
                # A request stream has no single campaign_id: a campaign-limited token is refused (closed).
                _check_scope(principal, method, request)
            except Exception as exc:
                await self._refuse(context, method, exc, 0)
                raise  # unreachable

        def wrap(fn: Any) -> Callable[..., Any]:
            if inspect.isasyncgenfunction(fn):

                async def generator(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                    await gate(request, context)
                    async for item in fn(request, context):
                        yield item

                return generator

            async def coroutine(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                await gate(request, context)
                return await fn(request, context)

            return coroutine

        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                wrap(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            wrap(handler.stream_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
