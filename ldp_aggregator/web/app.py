"""The web view's routes, access check and query strings (``ldp-aggregator serve --web-port PORT``).

Routes (GET or HEAD; any other method is 405):

==============================  ============================================================================
``/``                           campaigns: mechanism, epsilon, reports received, rates (``?format=json``)
``/campaigns/ID``               one campaign (ID percent-encoded): estimates, decode or association,
                                ranges and quantiles, marginals, privacy; ``?confidence=``, ``?alpha=``,
                                ``?correction=bonferroni|bh``, ``?population_size=``, ``?page=`` (table
                                page), ``?range=LO:HI`` and ``?quantile=Q`` (range mechanisms,
                                repeatable), ``?marginal=A,B`` (marginal mechanisms, repeatable) and
                                ``?non_negative=1``, ``?format=json``
``/api/campaigns``              the list as JSON (the same document as ``/?format=json``)
``/api/campaigns/ID``           a campaign as JSON (the same as ``/campaigns/ID?format=json``)
``/login?token=T&next=/PATH``   checks the token, keeps it in an HttpOnly cookie, redirects to ``next``
``/logout``                     forgets the cookie
==============================  ============================================================================

Access: while the database has access tokens (as for gRPC, :mod:`ldp_aggregator.auth`), every page needs
an analyst or admin token, checked by the server's own :class:`Authenticator` with the role rule of the
Analyst RPC the page reads (``ListCampaigns``, ``GetEstimate``, ``DecodeRappor``, ``EstimateAssociation``):
``Authorization: Bearer TOKEN``, or the cookie ``ldp_web_token`` that ``/login`` sets. No token or an
unknown or revoked one: 401 (with the sign-in form); a reporter token: 403. JSON documents and errors are
JSON under ``/api/`` and with ``format=json``, HTML pages otherwise.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qsl, unquote

from ldp_aggregator.auth import Authenticator, PermissionDeniedError, UnauthenticatedError
from ldp_aggregator.marginals import parse_marginal
from ldp_aggregator.ranges import parse_range
from ldp_aggregator.ratelimit import AuthFailuresLimitedError, RateLimiter
from ldp_aggregator.web import pages
from ldp_aggregator.web.data import CampaignQuery, CampaignState, WebReader, complete
from ldp_aggregator.web.http import HttpError, Request, Response
from ldp_client.errors import CampaignNotFoundError, InvalidParameterError

__all__ = ["COOKIE", "HTML_WAIT_S", "MAX_MARGINALS", "MAX_QUANTILES", "MAX_RANGES", "WebApp"]

COOKIE: Final = "ldp_web_token"
HTML_WAIT_S: Final = 0.6
"""An HTML page waits this long for its analyses, then shows what is ready and reloads itself; JSON waits
for all of them."""
MAX_RANGES: Final = 32
"""At most this many ``range=`` fields on a campaign page (each costs a pass over the range tree)."""
MAX_QUANTILES: Final = 32
"""At most this many ``quantile=`` fields."""
MAX_MARGINALS: Final = 64
"""At most this many ``marginal=`` fields: the most marginals a calm campaign chooses, so that a page can
ask for all of them (each costs a pass of the consistency steps' adjoint over the queried cells)."""
_MAX_QUERY_FIELDS: Final = 256  # the request line is at most 8 KiB anyway; the limits above name the field
_TOKEN_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_CORRECTIONS: Final = ("bonferroni", "bh")
_CAMPAIGN_PARAMS: Final = (
    "format",
    "confidence",
    "alpha",
    "correction",
    "population_size",
    "page",
    "range",
    "quantile",
    "marginal",
    "non_negative",
)
_REPEATABLE: Final = {"range": MAX_RANGES, "quantile": MAX_QUANTILES, "marginal": MAX_MARGINALS}
_FLAGS: Final = {"0": False, "1": True}
_LIST_PARAMS: Final = ("format",)
_LIST_RPC: Final = "/ldp.v1.Analyst/ListCampaigns"
_RPC_OF: Final = {
    "estimate": "/ldp.v1.Analyst/GetEstimate",
    "decode": "/ldp.v1.Analyst/DecodeRappor",
    "association": "/ldp.v1.Analyst/EstimateAssociation",
    "ranges": "/ldp.v1.Analyst/GetEstimate",
    "marginals": "/ldp.v1.Analyst/GetEstimate",
}
_SECURITY_HEADERS: Final = (
    # No script at all, styles and images only from the page itself; never framed, never cached.
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
    ("X-Frame-Options", "DENY"),
)


def _bad(field: str, value: str, allowed: str) -> HttpError:
    shown = value if len(value) <= 64 else value[:64] + f"... ({len(value)} chars)"
    return HttpError(HTTPStatus.BAD_REQUEST, f"query {field}={shown!r} is invalid: allowed {allowed}")


def parse_query(query: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query string's fields: UTF-8, percent-encoded, each at most once, only ``allowed`` names.

    Raises:
        HttpError: 400 naming the field, the value and what is allowed.
    """
    return parse_query_multi(query, allowed)[0]


def parse_query_multi(
    query: str, allowed: tuple[str, ...], repeatable: dict[str, int] | None = None
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """:func:`parse_query` where the names of ``repeatable`` may come up to their number of times each:
    (the single fields, the repeated ones' values in order). An empty value of a repeatable field counts
    as absent (a form's blank input).

    Raises:
        HttpError: 400 naming the field, the value and what is allowed.
    """
    repeatable = repeatable or {}
    if not query:
        return {}, {}
    try:
        pairs = parse_qsl(
            query,
            keep_blank_values=True,
            strict_parsing=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=_MAX_QUERY_FIELDS,
        )
    except ValueError as exc:  # bad field, bad UTF-8 (UnicodeDecodeError is a ValueError), too many
        raise HttpError(
            HTTPStatus.BAD_REQUEST,
            f"malformed query string ({str(exc)[:80]}): allowed name=value pairs joined by '&', UTF-8,"
            f" percent-encoded, at most {_MAX_QUERY_FIELDS}",
        ) from None
    out: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in pairs:
        if name not in allowed:
            raise _bad("name", name, f"one of {', '.join(allowed)}")
        if name in repeatable:
            values = multi.setdefault(name, [])
            if value.strip():
                values.append(value)
            if len(values) > repeatable[name]:
                raise _bad(name, value, f"at most {repeatable[name]} {name} fields (got more)")
            continue
        if name in out:
            raise _bad(name, value, "the field once")
        out[name] = value
    return out, {k: v for k, v in multi.items() if v}


def _unit_interval(fields: dict[str, str], name: str) -> float | None:
    text = fields.get(name)
    return None if text is None else _fraction(name, text)


def _fraction(name: str, text: str) -> float:
    """``text`` as a number in (0, 1) (400 naming ``name`` otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise _bad(name, text, "a number in (0, 1)") from None
    if not (math.isfinite(value) and 0.0 < value < 1.0):
        raise _bad(name, text, "a number in (0, 1)")
    return value


def _flag(fields: dict[str, str], name: str) -> bool:
    text = fields.get(name, "0")
    if text not in _FLAGS:
        raise _bad(name, text, "0 or 1")
    return _FLAGS[text]


def _positive_int(fields: dict[str, str], name: str, default: int | None, limit: int) -> int | None:
    text = fields.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= limit:
        raise _bad(name, text, f"an integer from 1 to {limit:,}")
    return int(text)


def campaign_query(
    fields: dict[str, str], multi: dict[str, list[str]] | None = None
) -> tuple[CampaignQuery, int]:
    """The campaign page's options and table page, checked (400 otherwise); the quantiles are checked here,
    the ranges against the campaign's domain by :func:`resolve_ranges`, the marginals against its
    attributes by :func:`resolve_marginals`."""
    correction = fields.get("correction")
    if correction is not None and correction not in _CORRECTIONS:
        raise _bad("correction", correction, " or ".join(_CORRECTIONS))
    texts = (multi or {}).get("quantile")
    quantiles = None if texts is None else tuple(_fraction("quantile", text) for text in texts)
    query = CampaignQuery(
        confidence=_unit_interval(fields, "confidence"),
        alpha=_unit_interval(fields, "alpha"),
        correction=correction,
        population_size=_positive_int(fields, "population_size", None, 10**15),
        quantiles=quantiles,
        non_negative=_flag(fields, "non_negative"),
    )
    page = _positive_int(fields, "page", 1, 10**6)
    return query, page or 1


def resolve_ranges(query: CampaignQuery, multi: dict[str, list[str]], state: CampaignState) -> CampaignQuery:
    """``query`` with the ``range=LO:HI`` fields as positions of the campaign's ordered domain, checked as
    ``ldp-aggregator estimate --range`` and ``Analyst.GetEstimate`` check them (``ranges.parse_range``:
    LO and HI each a value of the domain, or else a position 0..D-1; LO <= HI); ``quantile=`` needs a
    range mechanism too.

    Raises:
        HttpError: 400 naming the field, the value and what is allowed.
    """
    texts = multi.get("range", [])
    labels = state.range_labels
    if labels is None:
        for name in ("range", "quantile"):
            if name in multi:
                raise _bad(
                    name,
                    multi[name][0],
                    "only on campaigns of a range mechanism (hio, haar); this campaign's mechanism is "
                    f"{state.doc['mechanism']}",
                )
        return query
    if not texts:
        return query
    d = len(labels)
    allowed = (
        f"LO:HI with 0 <= LO <= HI <= {d - 1}, positions or labels of the domain "
        f"({labels[0]!r} ... {labels[-1]!r}), at most {MAX_RANGES} ranges"
    )
    wanted = []
    for text in texts:
        try:
            lo, hi = parse_range(text, labels)
        except InvalidParameterError:
            raise _bad("range", text, allowed) from None
        if not 0 <= lo <= hi < d:
            raise _bad("range", text, allowed)
        wanted.append((lo, hi))
    return replace(query, ranges=tuple(wanted))


def resolve_marginals(
    query: CampaignQuery, fields: dict[str, str], multi: dict[str, list[str]], state: CampaignState
) -> CampaignQuery:
    """``query`` with the ``marginal=A,B`` fields as attribute names, checked as ``ldp-aggregator estimate
    --marginal`` and ``Analyst.GetEstimate`` check them (``marginals.parse_marginal``: attributes of the
    campaign, each once; then covered by one of the campaign's chosen marginals), before any estimate;
    ``marginal=`` and ``non_negative=`` need a marginal mechanism.

    Raises:
        HttpError: 400 naming the field, the value and what is allowed.
    """
    attributes, chosen = state.marginal_attributes, state.chosen_marginals
    if attributes is None or chosen is None:
        given = [("marginal", multi["marginal"][0])] if "marginal" in multi else []
        given += [("non_negative", fields["non_negative"])] if "non_negative" in fields else []
        if given:
            raise _bad(
                *given[0],
                "only on campaigns of a marginal mechanism (calm); this campaign's mechanism is "
                f"{state.doc['mechanism']}",
            )
        return query
    texts = multi.get("marginal", [])
    if not texts:
        return query
    listed = "; ".join(",".join(m) for m in chosen)
    allowed = (
        f"attribute names joined by ',' among {', '.join(attributes)}, each once, covered by one chosen "
        f"marginal ({listed}), at most {MAX_MARGINALS} marginals"
    )
    wanted = []
    for text in texts:
        try:
            names = tuple(attributes[i] for i in parse_marginal(text, attributes))
        except InvalidParameterError:
            raise _bad("marginal", text, allowed) from None
        if not any(set(names) <= set(m) for m in chosen):
            raise _bad("marginal", text, allowed)
        wanted.append(names)
    return replace(query, marginals=tuple(wanted))


def _wants_json(request: Request, fields: dict[str, str] | None = None) -> bool:
    if request.path.startswith("/api/"):
        return True
    fmt = (fields or {}).get("format")
    if fmt is None and fields is None:  # the query could not be parsed: look for the field itself
        return "format=json" in request.query
    if fmt not in (None, "html", "json"):
        raise _bad("format", fmt, "html or json")
    return fmt == "json"


def _json(status: HTTPStatus, doc: Any) -> Response:
    body = json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(status=status, body=body, content_type="application/json; charset=utf-8")


def _html(status: HTTPStatus, text: str) -> Response:
    return Response(status=status, body=text.encode(), content_type="text/html; charset=utf-8")


def _cookie_token(request: Request) -> str | None:
    for header in request.headers.get("cookie", ()):
        for part in header.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name == COOKIE and value:
                return value
    return None


class WebApp:
    """Answers the web view's requests (module docstring) from a :class:`WebReader`."""

    def __init__(
        self, reader: WebReader, authenticator: Authenticator, limiter: RateLimiter | None = None
    ) -> None:
        self._reader = reader
        self._auth = authenticator
        self._limiter = limiter

    def _failed(self, request: Request) -> None:
        """Count a request without a valid token against its address, in the budget the gRPC port uses
        (``failed_auth_per_s``, ``failed_auth_burst``): over it, 429 with Retry-After."""
        if self._limiter is None:
            return
        try:
            self._limiter.note_failed_auth(request.peer)
        except AuthFailuresLimitedError as exc:
            raise HttpError(
                HTTPStatus.TOO_MANY_REQUESTS,
                str(exc),
                headers=(("Retry-After", str(max(1, math.ceil(exc.retry_after_s or 1.0)))),),
            ) from None

    def render_error(self, err: HttpError, request: Request | None) -> Response:
        """An error as JSON (under /api/ or with format=json) or as an HTML page (with the sign-in form
        for 401)."""
        resp: Response
        if request is not None and _wants_json(request):
            resp = _json(err.status, {"error": {"status": err.status.value, "message": err.message}})
        elif err.status is HTTPStatus.UNAUTHORIZED and request is not None:
            resp = _html(err.status, pages.login_page(request.path, err.message))
        else:
            resp = _html(err.status, pages.error_page(err.status.value, err.status.phrase, err.message))
        resp.headers.extend(_SECURITY_HEADERS)
        return resp

    def _check(self, request: Request, method: str) -> None:
        """Authenticate the request as a call of ``method`` would be (401 / 403)."""
        header = request.header("authorization")
        cookie = _cookie_token(request)
        metadata = []
        if header is not None:
            metadata.append(("authorization", header))
        elif cookie is not None:
            metadata.append(("authorization", f"Bearer {cookie}"))
        try:
            self._auth.check(method, metadata)
        except UnauthenticatedError as exc:
            self._failed(request)
            raise HttpError(
                HTTPStatus.UNAUTHORIZED,
                f"{exc} (here: the header 'Authorization: Bearer <token>' or sign in at /login)",
                headers=(("WWW-Authenticate", 'Bearer realm="ldp-aggregator"'),),
            ) from None
        except PermissionDeniedError as exc:
            raise HttpError(HTTPStatus.FORBIDDEN, str(exc)) from None

    async def __call__(self, request: Request) -> Response:
        response = await self._route(request)
        response.headers.extend(_SECURITY_HEADERS)
        return response

    async def _route(self, request: Request) -> Response:
        path = request.path
        if path == "/login":
            return self._login(request)
        if path == "/logout":
            parse_query(request.query, ())
            return Response(
                status=HTTPStatus.SEE_OTHER,
                headers=[("Location", "/login"), ("Set-Cookie", f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly")],
            )
        if path in ("/", "/api/campaigns"):
            fields = parse_query(request.query, _LIST_PARAMS)
            as_json = _wants_json(request, fields)
            self._check(request, _LIST_RPC)
            doc = await self._reader.run(self._reader.campaigns)
            return _json(HTTPStatus.OK, doc) if as_json else _html(HTTPStatus.OK, pages.campaigns_page(doc))
        for prefix in ("/campaigns/", "/api/campaigns/"):
            if path.startswith(prefix) and len(path) > len(prefix):
                return await self._campaign(request, path[len(prefix) :])
        raise HttpError(HTTPStatus.NOT_FOUND, f"no page at {path[:80]!r}: see / for the campaigns")

    async def _campaign(self, request: Request, raw_id: str) -> Response:
        fields, multi = parse_query_multi(request.query, _CAMPAIGN_PARAMS, _REPEATABLE)
        as_json = _wants_json(request, fields)
        query, page = campaign_query(fields, multi)
        try:
            campaign_id = unquote(raw_id, errors="strict")
        except UnicodeDecodeError:
            raise _bad("campaign id", raw_id, "a percent-encoded UTF-8 campaign id") from None
        self._check(request, _RPC_OF["estimate"])
        try:
            state = await self._reader.run(self._reader.campaign_state, campaign_id)
        except CampaignNotFoundError:
            raise HttpError(
                HTTPStatus.NOT_FOUND, f"no campaign {campaign_id[:128]!r}: see / for the list"
            ) from None
        query = resolve_marginals(resolve_ranges(query, multi, state), fields, multi, state)
        doc = state.doc
        entries = self._reader.analyses(state, query)
        for name in doc["analyses"]:
            self._check(request, _RPC_OF[name])
        pending = await complete(doc, entries, wait_s=None if as_json else HTML_WAIT_S)
        if as_json:
            return _json(HTTPStatus.OK, doc)
        link = pages.page_link(request.path, fields, multi)
        return _html(HTTPStatus.OK, pages.campaign_page(doc, pending, page, link))

    def _login(self, request: Request) -> Response:
        fields = parse_query(request.query, ("token", "next"))
        target = fields.get("next", "/")
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            raise _bad("next", target, "a path on this site, from '/'")
        token = fields.get("token")
        if token is None:
            return _html(HTTPStatus.OK, pages.login_page(target))
        if not _TOKEN_CHARS.issuperset(token) or not 1 <= len(token) <= 512:  # it goes into a header
            self._failed(request)
            return _html(HTTPStatus.UNAUTHORIZED, pages.login_page(target, "invalid or revoked access token"))
        try:
            self._auth.check(_LIST_RPC, [("authorization", f"Bearer {token}")])
        except UnauthenticatedError:
            self._failed(request)
            return _html(HTTPStatus.UNAUTHORIZED, pages.login_page(target, "invalid or revoked access token"))
        except PermissionDeniedError as exc:
            return _html(HTTPStatus.FORBIDDEN, pages.login_page(target, str(exc)))
        secure = "; Secure" if request.tls else ""
        return Response(
            status=HTTPStatus.SEE_OTHER,
            headers=[
                ("Location", target),
                ("Set-Cookie", f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"),
            ],
        )
