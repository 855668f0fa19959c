"""What an analyst asks of a campaign: estimates from its accumulator, as one value with three views.

:func:`estimate_campaign` is a pure function of (campaign, accumulator, request) used by the gRPC
Analyst service and by ``ldp-aggregator estimate --db``; :func:`estimate_to_proto` and
:func:`estimate_to_dict` are its wire and JSON forms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_aggregator.accumulators import Accumulator, BitCountAccumulator
from ldp_aggregator.discovery import DiscoveryResult, discover_columns, discovery_columns
from ldp_aggregator.discovery_rounds import discover_rounds, is_adaptive
from ldp_aggregator.estimators import FrequencyEstimate, _check_candidates, estimate_frequencies
from ldp_aggregator.itemsets import mining_to_dict
from ldp_aggregator.key_values import key_values_to_dict
from ldp_aggregator.marginals import marginals_to_dict
from ldp_aggregator.means import MeanAccumulator, MeansEstimate, estimate_means
from ldp_aggregator.postprocess import PostprocessedEstimate, postprocess
from ldp_aggregator.ranges import ranges_to_dict
from ldp_aggregator.rappor_estimates import (
    RapporBitEstimate,
    estimate_rappor_bits,
    estimate_rappor_candidates,
)
from ldp_aggregator.shuffle_view import campaign_shuffle, shuffle_to_dict, shuffle_to_proto
from ldp_client import registry, wire
from ldp_client.accounting.shuffle import ShuffleAmplification
from ldp_client.errors import InvalidParameterError
from ldp_client.spec import Kind, MechanismSpec

__all__ = ["CampaignEstimate", "estimate_campaign", "estimate_to_dict", "estimate_to_proto"]

ReportsFn = Callable[[], Iterable[bytes]]
"""A campaign's retained raw payloads (``Store.raw_payloads``), read only by the kinds that need them."""


@dataclass(frozen=True, kw_only=True, eq=False)
class CampaignEstimate:
    """Estimates for one campaign: per-item frequencies (if the mechanism or candidates allow) and, for
    string RAPPOR, the debiased per-cohort Bloom-bit counts."""

    campaign_id: str
    mechanism: str
    n_reports: int
    epsilon: float
    epsilon_inf: float
    confidence: float
    frequencies: FrequencyEstimate | None
    rappor_bits: RapporBitEstimate | None
    means: MeansEstimate | None = None
    """Numeric mechanisms (issue 6): the mean and sum of every attribute."""
    postprocessed: tuple[PostprocessedEstimate, ...] = ()
    """Frequency mechanisms other than string RAPPOR (issue 6): Norm-Sub and clipped counts, labelled and
    beside (never instead of) the unbiased ``frequencies`` (:mod:`ldp_aggregator.postprocess`)."""
    discovery: DiscoveryResult | None = None
    """Discovery mechanisms (issue 16): the values found, ranked, with each level's summary; None without
    reports or without the raw reports it is computed from."""
    shuffle: ShuffleAmplification | None = None
    """Issue 17: the central (epsilon, delta) of one shuffled batch, when the campaign declares a shuffler
    (:mod:`ldp_client.accounting.shuffle`; computed once per campaign and cached)."""


def _campaign_estimate(
    spec: MechanismSpec[Any],
    info: wire.CampaignInfo,
    acc: Accumulator,
    confidence: float,
    *,
    frequencies: FrequencyEstimate | None = None,
    rappor_bits: RapporBitEstimate | None = None,
    means: MeansEstimate | None = None,
    postprocessed: tuple[PostprocessedEstimate, ...] = (),
    discovery: DiscoveryResult | None = None,
) -> CampaignEstimate:
    """A campaign's estimate: what every kind reports (campaign, mechanism, reports, epsilons, level) and
    the kind's own results."""
    params = info.params
    return CampaignEstimate(
        campaign_id=info.campaign_id,
        mechanism=params.name,
        n_reports=acc.n,
        epsilon=params.epsilon,
        epsilon_inf=spec.epsilon_inf(params),
        confidence=confidence,
        frequencies=frequencies,
        rappor_bits=rappor_bits,
        means=means,
        postprocessed=postprocessed,
        discovery=discovery,
        shuffle=campaign_shuffle(info),
    )


def _check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
    if not (math.isfinite(confidence) and 0.0 < confidence < 1.0):
        raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
    return float(confidence)


def estimate_campaign(
    info: wire.CampaignInfo,
    acc: Accumulator,
    *,
    candidates: Sequence[str] = (),
    confidence: float = 0.95,
    population_size: int | None = None,
    reports: ReportsFn | None = None,
) -> CampaignEstimate:
    """Estimates for a campaign from its committed accumulator.

    String RAPPOR gives per-cohort bit counts always, and per-candidate estimates when candidates come
    with the request or, failing that, with the campaign. Numeric mechanisms give the mean (and the sum
    over ``population_size`` devices, default the number of reports) of every attribute. Other
    mechanisms estimate every domain item. Discovery mechanisms find their values in the campaign's raw
    reports (``reports``: a function returning their payloads; without it, none are discovered).
    """
    conf = _check_confidence(confidence)
    spec = registry.spec_for(info.params)
    estimate = _ESTIMATE_BY_KIND.get(spec.kind)
    if estimate is None:
        kinds = ", ".join(k.value for k in _ESTIMATE_BY_KIND)
        raise InvalidParameterError(
            "mechanism", info.params.name, f"a mechanism of a kind estimated here ({kinds})"
        )
    return estimate(spec, info, acc, candidates, conf, population_size, reports)


def _no_population(params: Any, population_size: int | None) -> None:
    if population_size:
        raise InvalidParameterError(
            "population_size",
            population_size,
            f"0 or unset for mechanism {params.name} (numeric mechanisms only)",
        )


def _support_estimate(
    spec: MechanismSpec[Any],
    info: wire.CampaignInfo,
    acc: Accumulator,
    candidates: Sequence[str],
    confidence: float,
    population_size: int | None,
    reports: ReportsFn | None = None,
) -> CampaignEstimate:
    """Kind SUPPORT: every item's frequency (:func:`estimate_frequencies`), and beside them their Norm-Sub
    and clipped versions; no population size. A mechanism that estimates candidate strings
    (``spec.estimates_candidates``) estimates the request's candidates, else the campaign's, else none
    (the service's note says why); the others take no candidates."""
    params = info.params
    _no_population(params, population_size)
    chosen: tuple[str, ...] = ()
    if spec.estimates_candidates:
        if candidates:  # checked before the data (the same answer with or without reports)
            _check_candidates(candidates)
        chosen = tuple(candidates) or info.candidates
    elif candidates:
        raise InvalidParameterError("candidates", list(candidates)[:3], f"none for mechanism {params.name}")
    frequencies = None
    # A marginal mechanism without the full attribute set has no item table (issue 18): marginals only.
    if acc.n > 0 and (chosen or not spec.estimates_candidates) and spec.item_table(params):
        frequencies = estimate_frequencies(
            params, acc, confidence=confidence, candidates=chosen, campaign_id=info.campaign_id
        )
    return _campaign_estimate(
        spec,
        info,
        acc,
        confidence,
        frequencies=frequencies,
        # Issue 6: consistent (non-negative, summing to the total) versions of a full-domain estimate.
        postprocessed=() if frequencies is None else postprocess(frequencies, params),
    )


def _candidates_estimate(
    spec: MechanismSpec[Any],
    info: wire.CampaignInfo,
    acc: Accumulator,
    candidates: Sequence[str],
    confidence: float,
    population_size: int | None,
    reports: ReportsFn | None = None,
) -> CampaignEstimate:
    """Kind RAPPOR: the per-cohort debiased bit counts always, and the candidates' counts (regression)
    when candidates come with the request or, failing that, with the campaign."""
    params = info.params
    _no_population(params, population_size)
    if not isinstance(acc, BitCountAccumulator):
        raise InvalidParameterError("accumulator", type(acc).__name__, f"bit counts for {params.name}")
    bits = estimate_rappor_bits(params, acc) if acc.n > 0 else None  # type: ignore[arg-type]
    if candidates:  # issue 13: checked before the data (the same answer with or without reports)
        _check_candidates(candidates)
    chosen = tuple(candidates) or info.candidates
    frequencies = None
    if chosen and acc.n > 0:
        frequencies = estimate_rappor_candidates(
            params,  # type: ignore[arg-type]
            acc,
            campaign_id=info.campaign_id,
            candidates=chosen,
            confidence=confidence,
        )
    return _campaign_estimate(
        spec,
        info,
        acc,
        confidence,
        frequencies=frequencies,
        rappor_bits=bits,
    )


def _mean_estimate(
    spec: MechanismSpec[Any],
    info: wire.CampaignInfo,
    acc: Accumulator,
    candidates: Sequence[str],
    confidence: float,
    population_size: int | None,
    reports: ReportsFn | None = None,
) -> CampaignEstimate:
    """Kind MEAN: the mean and sum of every attribute (:func:`~ldp_aggregator.means.estimate_means`; the
    sum over ``population_size`` devices, default the number of reports); no candidates."""
    params = info.params
    if candidates:
        raise InvalidParameterError("candidates", list(candidates)[:3], f"none for mechanism {params.name}")
    if not isinstance(acc, MeanAccumulator):
        raise InvalidParameterError(
            "accumulator", type(acc).__name__, f"a mean accumulator for {params.name}"
        )
    means = (
        estimate_means(params, acc, confidence=confidence, population_size=population_size)
        if acc.n > 0
        else None
    )
    return _campaign_estimate(
        spec,
        info,
        acc,
        confidence,
        means=means,
    )


def _paired_estimate(
    spec: MechanismSpec[Any],
    info: wire.CampaignInfo,
    acc: Accumulator,
    candidates: Sequence[str],
    confidence: float,
    population_size: int | None,
    reports: ReportsFn | None = None,
) -> CampaignEstimate:
    """Kind PAIRED: two variables, no per-item frequencies (Analyst.EstimateAssociation estimates them)."""
    params = info.params
    _no_population(params, population_size)
    if candidates:
        raise InvalidParameterError(
            "candidates", list(candidates)[:3], "none for paired (use EstimateAssociation)"
        )
    return _campaign_estimate(
        spec,
        info,
        acc,
        confidence,
    )


def _discovery_estimate(
    spec: MechanismSpec[Any],
    info: wire.CampaignInfo,
    acc: Accumulator,
    candidates: Sequence[str],
    confidence: float,
    population_size: int | None,
    reports: ReportsFn | None = None,
) -> CampaignEstimate:
    """Kind DISCOVERY: the values found in the raw reports (:mod:`ldp_aggregator.discovery`), as items
    too; no candidates (it finds them), no population size."""
    params = info.params
    _no_population(params, population_size)
    if candidates:
        raise InvalidParameterError(
            "candidates", list(candidates)[:3], f"none for {params.name} (it discovers the values)"
        )
    discovery = None
    if acc.n > 0 and reports is not None and is_adaptive(params):
        # Issue 16, rounds: the closed rounds only, each level keeping what it published.
        discovery = discover_rounds(info, reports(), confidence=confidence)
    elif acc.n > 0 and reports is not None:
        columns, n = discovery_columns(params, info.campaign_id, reports())
        if n > 0:
            discovery = discover_columns(params, columns, n, confidence=confidence)
    return _campaign_estimate(
        spec,
        info,
        acc,
        confidence,
        discovery=discovery,
    )


_EstimateFn = Callable[
    [
        MechanismSpec[Any],
        wire.CampaignInfo,
        Accumulator,
        Sequence[str],
        float,
        "int | None",
        "ReportsFn | None",
    ],
    CampaignEstimate,
]
# What an analyst gets for a mechanism, by its kind (ldp_client.spec.Kind).
_ESTIMATE_BY_KIND: dict[Kind, _EstimateFn] = {
    Kind.SUPPORT: _support_estimate,
    Kind.RAPPOR: _candidates_estimate,
    Kind.MEAN: _mean_estimate,
    Kind.PAIRED: _paired_estimate,
    Kind.DISCOVERY: _discovery_estimate,
}


def estimate_to_proto(est: CampaignEstimate) -> estimates_pb2.EstimateResponse:
    """The ``EstimateResponse`` message of an estimate."""
    msg = estimates_pb2.EstimateResponse(
        campaign_id=est.campaign_id,
        mechanism=est.mechanism,
        n_reports=est.n_reports,
        epsilon=est.epsilon,
        epsilon_inf=est.epsilon_inf,
        confidence=est.confidence,
    )
    if est.frequencies is not None:
        msg.items.extend(
            estimates_pb2.ItemEstimate(
                label=it.label,
                count=it.count,
                frequency=it.frequency,
                std_error=it.std_error,
                ci_low=it.ci_low,
                ci_high=it.ci_high,
            )
            for it in est.frequencies.items
        )
    if est.discovery is not None:  # issue 16: the discovered values are the items, ranked
        d = est.discovery
        msg.items.extend(
            estimates_pb2.ItemEstimate(
                label=it.label,
                count=it.count,
                frequency=it.count / d.n,
                std_error=it.std_error,
                ci_low=it.ci_low,
                ci_high=it.ci_high,
            )
            for it in d.items
        )
        msg.discovery_levels.extend(
            estimates_pb2.DiscoveryLevel(
                level=lv.level, reports=lv.reports, tested=lv.tested, kept=lv.kept, threshold=lv.threshold
            )
            for lv in d.levels
        )
    if est.rappor_bits is not None:
        b = est.rappor_bits
        m, k = b.counts.shape
        msg.rappor_bits.m = m
        msg.rappor_bits.k = k
        msg.rappor_bits.cohort_reports.extend(b.cohort_reports.tolist())
        msg.rappor_bits.counts.extend(b.counts.ravel().tolist())
        msg.rappor_bits.std_errors.extend(b.std_errors.ravel().tolist())
    for pp in est.postprocessed:  # issue 6: Norm-Sub and clip, beside the unbiased items
        msg.postprocessed.append(
            estimates_pb2.PostprocessedEstimates(method=pp.method, counts=pp.counts, total=pp.total)
        )
    shuffle_to_proto(est.shuffle, msg.shuffle)  # issue 17: when the campaign declares a shuffler
    if est.means is not None:  # issue 6: numeric mechanisms
        msg.population_size = est.means.population_size
        msg.means.extend(
            estimates_pb2.MeanEstimate(
                label=m.label,
                mean=m.mean,
                std_error=m.std_error,
                ci_low=m.ci_low,
                ci_high=m.ci_high,
                sum=m.sum,
                sum_std_error=m.sum_std_error,
                sum_ci_low=m.sum_ci_low,
                sum_ci_high=m.sum_ci_high,
                n=m.n,
            )
            for m in est.means.means
        )
    return msg


def _json_number(x: float) -> float | str:
    """JSON has no infinities: write them as strings ("inf"), keep finite numbers as they are."""
    return x if math.isfinite(x) else str(x)


def estimate_to_dict(msg: estimates_pb2.EstimateResponse) -> dict[str, Any]:
    """A JSON-ready dict of an ``EstimateResponse`` (the same shape whether it came over gRPC or --db)."""
    out: dict[str, Any] = {
        "campaign_id": msg.campaign_id,
        "mechanism": msg.mechanism,
        "n_reports": msg.n_reports,
        "epsilon": _json_number(msg.epsilon),
        "epsilon_inf": _json_number(msg.epsilon_inf),
        "confidence": msg.confidence,
        "items": [
            {
                "label": it.label,
                "count": it.count,
                "frequency": it.frequency,
                "std_error": it.std_error,
                "ci_low": it.ci_low,
                "ci_high": it.ci_high,
            }
            for it in msg.items
        ],
    }
    if msg.note:  # why items is empty where they would be expected (e.g. RAPPOR without candidates)
        out["note"] = msg.note
    if msg.HasField("rappor_bits"):
        b = msg.rappor_bits
        out["rappor_bits"] = {
            "m": b.m,
            "k": b.k,
            "cohort_reports": list(b.cohort_reports),
            "counts": list(b.counts),
            "std_errors": list(b.std_errors),
        }
    if msg.discovery_levels:  # issue 16: what each level of a discovery tested and kept
        out["levels"] = [
            {
                "level": lv.level,
                "reports": lv.reports,
                "tested": lv.tested,
                "kept": lv.kept,
                "threshold": _json_number(lv.threshold),
            }
            for lv in msg.discovery_levels
        ]
    if msg.postprocessed:  # issue 6: labelled post-processed counts (biased; no intervals)
        out["postprocessed"] = [
            {"method": pp.method, "counts": list(pp.counts), "total": pp.total} for pp in msg.postprocessed
        ]
    shuffled = shuffle_to_dict(msg)  # issue 17: the central guarantee of one shuffled batch
    if shuffled is not None:
        out["shuffle"] = shuffled
    if msg.means:  # issue 6: numeric mechanisms
        out["population_size"] = msg.population_size
        out["means"] = [
            {
                "label": m.label,
                "mean": _json_number(m.mean),
                "std_error": _json_number(m.std_error),
                "ci_low": _json_number(m.ci_low),
                "ci_high": _json_number(m.ci_high),
                "sum": _json_number(m.sum),
                "sum_std_error": _json_number(m.sum_std_error),
                "sum_ci_low": _json_number(m.sum_ci_low),
                "sum_ci_high": _json_number(m.sum_ci_high),
                "n": m.n,
            }
            for m in msg.means
        ]
    out.update(ranges_to_dict(msg))  # issue 18: range mechanisms' ranges and quantiles
    out.update(key_values_to_dict(msg))  # issue 18: key-value mechanisms' keys
    out.update(mining_to_dict(msg))  # issue 18: an SVIM stage's ranking, sizes and correction
    out.update(marginals_to_dict(msg))  # issue 18: marginal mechanisms' marginals
    return out
