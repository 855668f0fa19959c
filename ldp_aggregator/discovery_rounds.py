"""Adaptive multi-round discovery on the aggregator (issue 16): which round a batch answers, the operator's
round step (``Analyst.NextRound``, ``ldp-aggregator campaign next-round``) and the estimate over the closed
rounds. The devices' side and the rounds' oracles: :mod:`ldp_client.mechanisms.pem.rounds`.

**State.** The campaign's stored ``Campaign`` message carries the round collecting now
(``discovery_round``) and the closed rounds with the prefixes each kept (``discovery_rounds``); every
replica reads it from the store. A batch answers one round (the ``groups`` of its reports, which are the
devices' rounds): it is refused with FAILED_PRECONDITION unless that round is collecting, checked inside
the store's commit transaction, after the duplicate check (:meth:`CampaignStore.advance_round` excludes
commits of the campaign while it reads the round's reports and publishes), so a report of a closed round
is counted nowhere, not in the accumulator and not in the raw reports, and a retry of a batch stored
before its round closed answers "duplicate".

**Round step.** Closing round r runs :func:`ldp_aggregator.discovery.discover` on rounds 0..r with the
published prefixes of rounds 0..r-1 fixed, keeps level r's top_k candidates and publishes them: round
r + 1's devices encode against their extensions. Closing the last round closes the campaign.

**Estimate.** Over the reports of the closed rounds only (N = their number): each round's support comes from
its own oracle (:func:`~ldp_client.mechanisms.pem.rounds.round_support`), with each level keeping what was
published; the discovered values are the prefixes the last closed round kept (whole values once every round
is closed) with estimate, standard error and interval as :mod:`ldp_aggregator.discovery` gives them, and
each round's reports, tested, kept and threshold.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ldp_aggregator.discovery import DiscoveryResult, discover, discovery_columns
from ldp_client import wire
from ldp_client.errors import InvalidParameterError, InvalidReportError, LdpError, RoundNotOpenError, shown
from ldp_client.layouts import Support
from ldp_client.mechanisms.pem import PEMParams, Prefix
from ldp_client.mechanisms.pem.rounds import RoundPlan, check_round_columns, round_plan, round_support

__all__ = [
    "RoundWithoutReportsError",
    "batch_round",
    "describe_round",
    "discover_published",
    "discover_rounds",
    "is_adaptive",
    "next_round_blob",
    "rounds_note",
]


def is_adaptive(params: Any) -> bool:
    """Whether the campaign collects its levels in rounds."""
    return isinstance(params, PEMParams) and params.adaptive


def _pem(info: wire.CampaignInfo) -> PEMParams:
    """The parameters of an adaptive campaign (InvalidParameterError for any other)."""
    params = info.params
    if not isinstance(params, PEMParams) or not params.adaptive:
        raise InvalidParameterError(
            "campaign",
            f"{info.campaign_id} ({params.name})",
            "an adaptive discovery campaign (pem with rounds=adaptive)",
        )
    return params


@functools.lru_cache(maxsize=8)  # a plan holds up to 2**16 candidates: a few campaigns' worth
def _collecting_plan(info: wire.CampaignInfo) -> RoundPlan:
    """The plan of the round collecting (computed once per campaign state: every batch needs it)."""
    r = info.discovery_round
    published = info.discovery_rounds[r - 1].kept if r else ()
    return round_plan(_pem(info), r, published)


def batch_round(info: wire.CampaignInfo, columns: Any) -> int | None:
    """The round a decoded batch of an adaptive campaign answers (None for an empty batch), its reports
    checked against the round's oracle when it is the round collecting. A batch of another round goes on
    to the store, which refuses it (RoundNotOpenError) after its duplicate check: a retry of a batch
    stored before its round closed still answers "duplicate".

    Raises:
        InvalidReportError: reports of several rounds in one batch, or a bucket or seed that the round's
            oracle cannot produce.
    """
    groups = np.asarray(columns[0])
    if groups.size == 0:
        return None
    round_ = int(groups[0])
    other = np.flatnonzero(groups != round_)
    if other.size:
        i = int(other[0])
        raise InvalidReportError(
            f"pem.groups[{i}]",
            int(groups[i]),
            f"round {round_} (the batch's first report's): one round per batch",
        )
    if round_ == info.discovery_round < _pem(info).levels:
        check_round_columns(_collecting_plan(info), columns, info.campaign_id)
    return round_


def _closed_columns(info: wire.CampaignInfo, payloads: Iterable[bytes], rounds: int) -> tuple[Any, int]:
    """The columns of the reports of rounds 0..rounds-1, and their number."""
    columns, n = discovery_columns(info.params, info.campaign_id, payloads)
    if n == 0:
        return None, 0
    keep = columns[0] < rounds
    columns = tuple(c[keep] for c in columns)
    return columns, int(np.count_nonzero(keep))


def discover_published(
    params: PEMParams,
    published: Sequence[Sequence[tuple[int, int]]],
    columns: Any,
    n: int,
    rounds: int,
    *,
    confidence: float = 0.95,
    cache: dict[tuple[int, tuple[Prefix, ...]], Support] | None = None,
) -> DiscoveryResult:
    """:func:`~ldp_aggregator.discovery.discover` over rounds 0..rounds-1 of an adaptive campaign whose
    first rounds published ``published`` (at most ``rounds`` lists): each round's support from its own
    oracle (:func:`round_support`), each published level keeping what it published. ``columns``: the
    reports of these rounds, ``n`` their number. ``cache``: supports of closed rounds kept between calls
    (a simulation running the rounds in process; their reports do not change)."""
    kept = [tuple(Prefix(*p) for p in level) for level in published]
    round_plans = [round_plan(params, r, kept[r - 1] if r else ()) for r in range(rounds)]
    groups, a, b, y = columns

    def support_of(level: int, candidates: Sequence[Hashable]) -> Support:
        cands = tuple(Prefix(*c) for c in candidates)  # type: ignore[misc]
        key = (level, cands)
        if cache is not None and key in cache:
            return cache[key]
        support = round_support(round_plans[level], groups, a, b, y, cands)
        if cache is not None and level < len(published):  # a closed round's reports never change
            cache[key] = support
        return support

    return discover(params, support_of, n, confidence=confidence, levels=rounds, published=kept[:rounds])


def _discover(
    info: wire.CampaignInfo, columns: Any, n: int, rounds: int, *, confidence: float
) -> DiscoveryResult:
    published = [r.kept for r in info.discovery_rounds[:rounds]]
    return discover_published(_pem(info), published, columns, n, rounds, confidence=confidence)


def next_round_blob(info: wire.CampaignInfo, round_: int, payloads: Iterator[bytes]) -> tuple[bytes, bool]:
    """Close round ``round_`` (the round collecting): its discovery step over the reports of rounds
    0..round_, the new ``Campaign`` message with the kept prefixes published, and whether the campaign
    is now closed (the last round). The store's ``RoundStep``.

    Raises:
        InvalidParameterError: not an adaptive campaign.
        RoundNotOpenError: ``round_`` is not the round collecting.
        RoundWithoutReportsError: the round has no reports (nothing to publish; wait for them).
    """
    params = _pem(info)
    if round_ != info.discovery_round:
        raise RoundNotOpenError(info.campaign_id, round_, info.discovery_round, params.levels)
    columns, n = _closed_columns(info, payloads, round_ + 1)
    n_round = 0 if columns is None else int(np.count_nonzero(columns[0] == round_))
    if n_round == 0:
        raise RoundWithoutReportsError(info.campaign_id, round_)
    result = _discover(info, columns, n, round_ + 1, confidence=0.95)
    level = result.levels[-1]
    kept = tuple((int(p[0]), int(p[1])) for p in result.kept)  # type: ignore[index]
    closed_round = wire.DiscoveryRoundInfo(
        round=round_, reports=level.reports, tested=level.tested, threshold=level.threshold, kept=kept
    )
    last = round_ + 1 == params.levels
    msg = wire.campaign_to_proto(
        campaign_id=info.campaign_id,
        params=info.params,
        description=info.description,
        candidates=info.candidates,
        created_unix_ms=info.created_unix_ms,
        closed=info.closed or last,
        shuffler=info.shuffler,
        discovery_round=round_ + 1,
        discovery_rounds=(*info.discovery_rounds, closed_round),
    )
    return msg.SerializeToString(), last


class RoundWithoutReportsError(LdpError):
    """NextRound on a round without reports: nothing to publish (FAILED_PRECONDITION by the service)."""

    def __init__(self, campaign_id: str, round_: int) -> None:
        self.campaign_id = campaign_id
        self.round = round_
        super().__init__(
            f"round {round_} of campaign_id={shown(campaign_id)} has no reports yet: nothing to publish and"
            " nothing changed; wait for its devices (the round stays open), or close the campaign"
        )


def discover_rounds(
    info: wire.CampaignInfo, payloads: Iterable[bytes], *, confidence: float = 0.95
) -> DiscoveryResult | None:
    """The discovery over the closed rounds of an adaptive campaign (module docstring); None before the
    first round closes."""
    rounds = info.discovery_round
    if rounds == 0:
        return None
    columns, n = _closed_columns(info, payloads, rounds)
    if n == 0:
        return None
    return _discover(info, columns, n, rounds, confidence=confidence)


def rounds_note(info: wire.CampaignInfo) -> str:
    """What an estimate's items are while rounds remain (``EstimateResponse.note``); "" once all closed."""
    levels, done = _pem(info).levels, info.discovery_round
    if done >= levels:
        return ""
    cid = shown(info.campaign_id)
    if done == 0:
        return (
            f"adaptive campaign {cid}: no round closed yet, so nothing is estimated; close round 0 once its"
            f" devices reported (ldp-aggregator campaign next-round {info.campaign_id})"
        )
    return (
        f"adaptive campaign {cid}: rounds 0..{done - 1} of 0..{levels - 1} closed (round {done} collecting):"
        f" the items are the prefixes round {done - 1} kept, over the closed rounds' reports; whole values"
        " once every round is closed"
    )


def describe_round(info: wire.CampaignInfo) -> str:
    """One line for operators: the round collecting, or that every round is closed."""
    levels = _pem(info).levels
    if info.discovery_round >= levels:
        return f"all {levels} rounds closed"
    text = f"collecting round {info.discovery_round} of 0..{levels - 1}"
    if info.discovery_rounds:
        last = info.discovery_rounds[-1]
        text += f"; round {last.round} kept {len(last.kept)} of {last.tested} candidates"
        if math.isfinite(last.threshold):
            text += f" (threshold {last.threshold:,.0f})"
    return text
